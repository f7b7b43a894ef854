"""Containment: a server's whole tree in a cgroup v2 of its own, killed at once with cgroup.kill.

The systemd unit is the model: the unit's cgroup dies with it. Where the machine allows it (a
cgroup2 mount we may write to: our own delegated cgroup, e.g. a `systemd-run --user --scope` or
user@.service subtree on DGX OS, or the mount's root when we are root), every process the command
starts, setsid daemons included, lands in `sparktui-<name>/`, because the command joins it before
its first instruction (proc.spawn's trampoline writes its pid into cgroup.procs before exec).
Then:
- kill: one write of "1" to cgroup.kill SIGKILLs every member, forks in flight included;
- gone: cgroup.events says `populated 0`;
- memory: memory.current / memory.peak, where the memory controller is enabled for us.

Elsewhere (no cgroup2, nothing writable, SPARKTUI_CGROUP=off) the process-group and pidfd tracking
in proc.py is the fallback; `describe()` says which one is in use, and `status` prints it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ENV = "SPARKTUI_CGROUP"  # "off": never contain; a path: create scopes under that cgroup
PREFIX = "sparktui-"


@dataclass(frozen=True)
class CgroupMemory:
    current: int  # bytes charged to the tree now
    peak: int | None  # highest since the scope was made (memory.peak, kernel ≥ 5.19)


def cgroup2_mounts() -> list[Path]:
    out: list[Path] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            out.append(Path(left.split()[4]))
    return out


def _own_cgroup() -> str | None:
    """Our cgroup v2 path ("0::/a/b"), relative to the cgroup2 mount."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].strip()
    except OSError:
        pass
    return None


def _usable(parent: Path) -> bool:
    return (parent / "cgroup.procs").exists() and os.access(parent, os.W_OK | os.X_OK)


def find_parent() -> tuple[Path | None, str]:
    """Where our scopes can go, or None and why not (for `status`)."""
    setting = os.environ.get(CGROUP_ENV, "").strip()
    if setting.lower() in ("off", "0", "no", "false"):
        return None, f"{CGROUP_ENV}=off"
    if setting:
        path = Path(setting)
        return (path, "") if _usable(path) else (None, f"{CGROUP_ENV}={setting} is not a writable cgroup")
    mounts = cgroup2_mounts()
    if not mounts:
        return None, "no cgroup2 mount"
    own = _own_cgroup()
    for mount in mounts:
        # Our own cgroup first (delegated to us, as systemd does for user sessions), then the mount root.
        candidates = [mount / own.lstrip("/")] if own not in (None, "/") else []
        candidates.append(mount)
        for parent in candidates:
            if _usable(parent):
                return parent, ""
    return None, "no writable cgroup2 (not delegated to this user)"


@dataclass(frozen=True)
class CgroupScope:
    """One cgroup v2 directory that holds one tree."""

    path: Path

    @classmethod
    def create(cls, name: str, tag: str) -> CgroupScope | None:
        """A new, empty scope named after `name` and `tag` (its tree's mark: provenance.scope_tag),
        or None where containment is not possible."""
        parent, _ = find_parent()
        if parent is None:
            return None
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:80]
        path = parent / f"{PREFIX}{safe}-{tag}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        try:
            path.mkdir()
        except OSError:
            return None
        scope = cls(path)
        if not (path / "cgroup.kill").exists():  # kernel < 5.14: killing one by one races with forks
            scope.remove()
            return None
        return scope

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def exists(self) -> bool:
        return self.path.is_dir()

    def procs(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def populated(self) -> bool:
        try:
            for line in (self.path / "cgroup.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "populated":
                    return value.strip() == "1"
        except OSError:
            return False
        return False

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def kill(self) -> bool:
        """SIGKILL every process in the scope at once (forks in flight included)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return True
        except OSError:
            return False

    def signal(self, sig: int) -> list[int]:
        """Send `sig` to each member (for SIGTERM: cgroup.kill only knows SIGKILL); the pids signalled."""
        sent = []
        for pid in self.procs():
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except ProcessLookupError:
                pass
        return sent

    def wait_empty(self, timeout: float, tick: float = 0.002) -> bool:
        deadline = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() >= deadline:
                return False
            time.sleep(tick)
        return True

    def memory(self) -> CgroupMemory | None:
        """The tree's memory as the kernel charges it, where the memory controller is ours."""
        try:
            current = int((self.path / "memory.current").read_text())
        except (OSError, ValueError):
            return None
        try:
            peak: int | None = int((self.path / "memory.peak").read_text())
        except (OSError, ValueError):
            peak = None
        return CgroupMemory(current, peak)

    def remove(self) -> bool:
        """Remove the (empty) scope; False while it still holds a process."""
        try:
            self.path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def kill_and_remove(self, timeout: float = 10.0) -> bool:
        """Kill whatever is left and remove the scope; True when it is gone."""
        if not self.exists():
            return True
        if self.populated():
            self.kill()
            self.wait_empty(timeout)
        return self.remove()

    def describe(self) -> str:
        return f"cgroup {self.path}"


def remove_stale_scopes() -> list[Path]:
    """Remove empty scopes whose creator is gone (a process killed before it could clean up)."""
    parent, _ = find_parent()
    removed: list[Path] = []
    if parent is None:
        return removed
    for path in parent.glob(f"{PREFIX}*"):
        try:
            creator = int(path.name.rsplit("-", 2)[-2])
        except (ValueError, IndexError):
            continue
        if creator != os.getpid() and Path(f"/proc/{creator}").exists():
            continue  # its creator still runs and will remove it
        scope = CgroupScope(path)
        if not scope.populated() and scope.remove():
            removed.append(path)
    return removed


def fallback_description() -> str:
    _, why = find_parent()
    return f"process group + pidfd tracking ({why})" if why else "process group + pidfd tracking"
