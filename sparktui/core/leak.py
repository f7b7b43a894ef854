"""Leaked memory after a server ended: how much, who holds it, and the words the gate refuses with.

Pure: the runtime (runtime/guard/leakgate.py) measures and hands the figures in. On a DGX Spark a crash
or an OOM kill can leave tens of GiB behind until a reboot (~30 GiB of locked shared memory after
one OOM kill: MiaAI-Lab GLM #193), and a relaunch into that memory is the next hang. What counts as
leaked is what the old server can have left, measured where it is: the /dev/shm files made since the
launch that no process outside its tree uses (their pages), the resident memory of its processes
that survived (private and shared, a file they map counted once), and locked memory grown (Mlocked,
machine-wide, so at most the fall in MemAvailable since the launch). A dead process's anonymous
memory, shared or not, goes back to the kernel with it; other programs' allocations on a shared box
(meminfo Shmem grows with every shared mapping on the machine) are never counted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sparktui.core.units import GiB

LEAK_MIN_BYTES = 2 * GiB  # below this a shortfall is noise on a busy box, whatever the pool
LEAK_POOL_SHARE = 0.03  # ...or 3% of the pool on a large one (3.6 GiB on a 119.6 GiB Spark)
MEMORY_BACK_TIMEOUT_S = 30.0  # the kernel and the driver take a few seconds to free a dead tree's memory

HolderKind = Literal["shm_file", "process", "locked"]


def leak_threshold(pool_bytes: int) -> int:
    """The most that may stay missing after a server ended: max(2 GiB, 3% of the pool)."""
    return max(LEAK_MIN_BYTES, int(LEAK_POOL_SHARE * pool_bytes))


class Holder(BaseModel):
    """One thing that holds memory the old server left: a /dev/shm file (with the processes that
    still map it or hold it open), a surviving process of the old tree or cgroup, or locked memory."""

    model_config = ConfigDict(extra="allow")

    kind: str  # a HolderKind, or another version's kind: kept as written, shown by name
    name: str  # the file's path, the process's command, or "locked memory"
    bytes: int = Field(ge=0)
    pids: list[int] = Field(default_factory=list)  # shm_file: who maps it; process: the pid
    start_times: list[int] = Field(default_factory=list)  # per pid: its start time (pids are reused)
    inode: int | None = None  # shm_file: the file, whatever its name is now
    # shm_file: whether the old tree was seen mapping or holding it while it ran (by device and inode,
    # as the /dev/shm sweep records them); False: made since the launch but never seen held by the tree,
    # so it may as well be another program's; None: not known (a record from before this field)
    seen_held: bool | None = None

    def text(self) -> str:
        size = f"{self.bytes / GiB:.2f} GiB"
        if self.kind == "shm_file":
            users = f", mapped by pid {', '.join(map(str, self.pids))}" if self.pids else ", mapped by no process"
            unseen = ", never seen held by the old server" if self.seen_held is False else ""
            return f"{self.name} ({size}{users}{unseen})"
        if self.kind == "process":
            return f"pid {', '.join(map(str, self.pids))} {self.name} ({size}), a survivor of the old server"
        return f"{self.name} ({size})"


class LeakRecord(BaseModel):
    """What did not come back after a server ended (the end record's `leak`; `status` shows it)."""

    model_config = ConfigDict(extra="allow")

    leaked_bytes: int = Field(ge=0)
    threshold_bytes: int = Field(ge=0)
    shortfall_bytes: int = Field(ge=0)  # free memory (MemAvailable + per-CPU lists) below the baseline, whoever took it
    waited_s: float = Field(ge=0)
    holders: list[Holder] = Field(default_factory=list)
    boot_id: str | None = None  # a reboot frees everything: a record from another boot says nothing
    baseline_mlocked: int = 0  # Mlocked at the launch: locked memory counts only above it
    baseline_shmem: int = 0  # Shmem at the launch: with no holder named, shared memory above it counts
    at: float = 0.0

    @property
    def leaked(self) -> bool:
        return self.leaked_bytes > self.threshold_bytes

    def summary(self) -> str:
        head = (
            f"{self.leaked_bytes / GiB:.2f} GiB did not come back within {self.waited_s:.0f} s after the "
            f"server ended (more than {self.threshold_bytes / GiB:.2f} GiB)"
        )
        if not self.holders:
            return head + "; no holder could be named"
        return head + "; held by: " + "; ".join(h.text() for h in self.holders)


def leaked_bytes(*, files: int, survivors: int, mlocked_growth: int, shortfall: int) -> int:
    """What the old server left: its /dev/shm files and its survivors' memory as measured, plus locked
    memory grown, at most the fall in MemAvailable (a machine-wide figure: only a fall makes it a cost)."""
    return max(0, files) + max(0, survivors) + max(0, min(max(0, mlocked_growth), shortfall))


def fix_for(holders: list[Holder]) -> str:
    """What the user can do about these holders, in words."""
    steps = []
    files = [h.name for h in holders if h.kind == "shm_file" and h.seen_held is not False]
    if files:
        steps.append("remove " + " ".join(files))
    # never seen held by the old server: possibly another program's file, never to be removed blindly
    unseen = [h.name for h in holders if h.kind == "shm_file" and h.seen_held is False]
    if unseen:
        steps.append("check that no other program uses " + " ".join(unseen) + " before removing it")
    pids = sorted({p for h in holders if h.kind in ("process", "shm_file") for p in h.pids})
    if pids:
        steps.append("stop pid " + ", ".join(map(str, pids)))
    return ", ".join(steps) + ", or reboot" if steps else "reboot"


def refusal(port: int, record: LeakRecord, still_held: int) -> str:
    """The gate's refusal (exit 2): the figure, the holders, the fix, and how to go on anyway."""
    return (
        f"memory leaked by the server that ran on port {port} has not come back: {still_held / GiB:.2f} GiB "
        f"still held (more than {record.threshold_bytes / GiB:.2f} GiB); "
        + ("held by: " + "; ".join(h.text() for h in record.holders) + "; " if record.holders else "")
        + f"fix: {fix_for(record.holders)}; or pass --force to launch into it anyway"
    )
