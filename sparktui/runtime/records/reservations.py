"""What a running server reserves of the pool, read from its state record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktui.core import pool

if TYPE_CHECKING:
    from sparktui.core.machine import Machine
    from sparktui.runtime.records import protocol as pr


def reservation_of(state: pr.StateRecord, machine: Machine) -> pool.Reservation:
    """What a running server reserves: as it recorded at launch, or (older records) from its argv."""
    name = state.profile or "?"
    r = state.reservation
    recorded = pool.Reservation(state.port, name, r.bytes, r.basis, r.priority) if r is not None else None
    return pool.recorded_or_counted(machine, state.port, name, recorded, pool.utilization_in(state.argv or []))
