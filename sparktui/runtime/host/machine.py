"""The machine a fit is judged on, from this host's own memory reading and the profile's plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktui.core.fit import Machine
    from sparktui.core.profiles import Profile


def host_machine(profile: Profile, mem: dict[str, int], warnings: list[str] | None = None) -> Machine:
    """The machine vLLM will start on: the profile's, unless it was planned for another size of
    unified memory (a Spark profile on a smaller box is checked against the box it runs on)."""
    from sparktui.core import fit as fit_mod

    meminfo = "".join(f"{key}: {value // 1024} kB\n" for key, value in mem.items())
    machine = fit_mod.machine_from_name(profile.machine, meminfo)
    host_total = mem["MemTotal"]
    if machine.unified and not fit_mod.reading_applies(machine, host_total):
        if warnings is not None:
            warnings.append(
                f"the profile is planned for {machine.name} ({machine.mem_total / 2**30:.1f} GiB) but this "
                f"host has {host_total / 2**30:.1f} GiB: the fit check uses this host"
            )
        machine = fit_mod.machine_from_name("auto", meminfo)
    return machine
