"""What a running server reserves of the pool, read from its state record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktui.core import pool

if TYPE_CHECKING:
    from sparktui.core.fit import Machine
    from sparktui.runtime.records import protocol as pr


def reservation_of(state: pr.StateRecord, machine: Machine) -> pool.Reservation:
    """What a running server reserves: as it recorded at launch, or (older records) from its argv."""
    name = state.profile or "?"
    if state.reservation is not None:
        r = state.reservation
        return pool.Reservation(state.port, name, r.bytes, r.basis, r.priority)
    argv = state.argv or []
    util = None
    if "--gpu-memory-utilization" in argv[:-1]:
        try:
            util = float(argv[argv.index("--gpu-memory-utilization") + 1])
        except ValueError:
            util = None
    reserved, basis = pool.reserved_bytes(machine, util)
    return pool.Reservation(state.port, name, reserved, basis)
