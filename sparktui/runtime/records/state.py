"""Where running servers are recorded, and how to talk to their supervisors.

<state dir>/                      mode 0700 (sparktui.paths.state_dir: $SPARKTUI_STATE_DIR overrides)
  servers/<port>.json             the supervisor's state, replaced atomically
  servers/<port>.sock             its command socket (mode 0600): one JSON request, one reply
  logs/<profile>-<time>.log       vLLM's output for one run
  supervisor/<port>.log           the detached supervisor's own output
  profiles/<port>.toml            the exact profile a detached run was started from
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from sparktui import files
from sparktui.atomic import atomic_write_text
from sparktui.core.guard_lines import LineName
from sparktui.errors import UserError
from sparktui.files import Untrusted, own_folder_refusal, read_regular
from sparktui.paths import state_dir as state_dir  # re-exported: callers say st.state_dir()
from sparktui.paths import writable_state_dir as writable_state_dir
from sparktui.runtime.records.beat import LINE_BYTES, NO_BEAT, parse_beat
from sparktui.runtime.records.protocol import (
    MAX_MESSAGE_BYTES,
    MAX_STATE_BYTES,
    RUNNING_STATUSES,
    STATE_VERSION,
    AnyRequest,
    GuardRequest,
    ProtocolError,
    Reply,
    StateRecord,
    StatusRequest,
    parse_reply,
    read_state_file,
    salvage_state,
)

RUNNING = RUNNING_STATUSES  # supervisor statuses while it lives
__all__ = ["RUNNING", "STATE_VERSION", "ProtocolError", "StateRecord"]


def state_path(port: int) -> Path:
    return state_dir() / "servers" / f"{port}.json"


def safe_name(name: str) -> str:
    """A profile name as a file name: letters, digits and -_. only."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "server"


def beat_path(port: int) -> Path:
    """The guard's heartbeat: CLOCK_BOOTTIME seconds of its last sample and the seconds it planned
    to its next one ("T INTERVAL"), rewritten in place (no rename, no fsync: a few bytes a sample)
    so a reader can tell a frozen guard from a quiet one that samples seldom at rest."""
    return state_dir() / "servers" / f"{port}.beat"


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_beat(fd_or_path: int | Path) -> float | None:
    """The heartbeat's time (CLOCK_BOOTTIME), or None when there is none."""
    return read_beat_plan(fd_or_path)[0]


def read_beat_plan(fd_or_path: int | Path) -> tuple[float | None, float]:
    """(the heartbeat's time, the seconds the guard planned to its next sample): records/beat.py.
    A file another user owns or may write (or in such a folder) raises Untrusted: a stamp written
    there could make a frozen guard look alive."""
    try:
        raw = (
            os.pread(fd_or_path, LINE_BYTES + 8, 0)
            if isinstance(fd_or_path, int)
            else read_regular(fd_or_path, 64, "heartbeat", own=True)
        )
    except Untrusted:
        raise
    except (OSError, UserError):
        return NO_BEAT.stamp, NO_BEAT.plan
    beat = parse_beat(raw)
    return beat.stamp, beat.plan


def socket_path(port: int) -> Path:
    """The command socket of supervisors before the abstract one (still tried, for old ones)."""
    return state_dir() / "servers" / f"{port}.sock"


def _namespace() -> str:
    """User and state dir (its path, not the folder: the name outlives a deleted dir), so that
    separate state dirs (tests, several installs) never see each other's supervisors."""
    from sparktui.paths import state_dir_path

    where = str(state_dir_path())
    return f"sparktui-{os.getuid()}-{hashlib.sha256(where.encode()).hexdigest()[:10]}-"


def socket_address(port: int) -> str:
    """The supervisor's command socket: a Linux abstract socket named by user (state dir) and port.
    No file: reachable with the state dir gone; bound once per port (the launch lock); gone with
    the process."""
    return f"\0{_namespace()}{port}"


# Ports whose socket this process holds (a supervisor between its claim and its first answer):
# asking one of them would wait for an answer this very process has not begun to give.
HELD_HERE: set[int] = set()
# A supervisor whose port name another user holds (a squatter: abstract names have no file mode)
# binds the port's next name instead: `<name><port>~1`, `~2`, … up to this many.
ALTERNATE_NAMES = 8


def alternate_address(port: int, n: int) -> str:
    return f"{socket_address(port)}~{n}"


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _, uid, _ = struct.unpack("3i", creds)
    return int(uid)


def trusted_uid(uid: int | None) -> bool:
    """Only our own user, or root, may be a supervisor we talk to or a client we answer."""
    return uid is not None and uid in (os.getuid(), 0)


def warn_foreign(port: int, uid: int | None) -> None:
    """Once per port and user (files.WARNINGS: stderr and the panel): a listener of another user was ignored."""
    who = "an unknown user" if uid is None else f"user id {uid}"
    files.warn(
        f"ignored a listener of {who} on port {port}'s supervisor socket name "
        "(not sparktui's supervisor: only your own user's or root's are trusted)",
        key=f"foreign listener {port} {uid}",
    )


def _listeners() -> dict[int, list[str]]:
    """Port → the abstract names of this namespace listening now (from /proc/net/unix), the
    port's own name first; whoever holds them (another user may: see peer_uid)."""
    prefix = "@" + _namespace()
    found: dict[int, set[str]] = {}
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or not fields[7].startswith(prefix) or fields[5] != "01":  # 01: listening
            continue
        tail = fields[7][len(prefix) :]
        port_text, _, alt = tail.partition("~")
        if not port_text.isdigit() or (alt and not alt.isdigit()):
            continue
        found.setdefault(int(port_text), set()).add("\0" + fields[7][1:])
    return {port: sorted(names, key=lambda n: (len(n), n)) for port, names in found.items()}


def live_ports() -> list[int]:
    """Ports whose supervisor listens now (from /proc/net/unix), whatever became of the state dir;
    never one this process holds itself. A name may be held by another user: request() checks."""
    return sorted(set(_listeners()) - HELD_HERE)


class UntrustedFolder(ProtocolError):
    """The servers/ folder is not ours alone (another user owns it or may write in it): none of
    its records is read, and stop and kill do nothing from them (exit 2, the fix said)."""


def check_servers_folder() -> None:
    """UntrustedFolder when the folder of the state records is not ours alone (files.own_folder_refusal)."""
    if (refusal := own_folder_refusal(state_dir() / "servers", "state record")) is not None:
        raise UntrustedFolder(refusal)


def write_state(path: Path, state: StateRecord) -> None:
    """Atomic: readers see the old file or the new one, never half of one."""
    atomic_write_text(path, state.to_json(), private=True)


def read_state(path: Path) -> StateRecord | None:
    """The record in `path` (None when there is none); ProtocolError when it has the wrong shape."""
    return read_state_file(path)


def salvage(port: int, why: str) -> StateRecord | None:
    """What stop and kill need of `port`'s record that did not read whole (protocol.salvage_state)."""
    try:
        text = read_regular(state_path(port), MAX_STATE_BYTES, "state record", own=True)
    except (OSError, UserError):
        return None
    return salvage_state(text, why)


def supervisor_alive(state: StateRecord) -> bool:
    """The recorded supervisor process is still the same process (pid + start time)."""
    from sparktui.runtime.host.proc import ProcessIdentity

    sup = state.supervisor
    if not sup.pid or sup.start_time is None:
        return False
    return ProcessIdentity(sup.pid, sup.start_time).is_alive()


def with_liveness(state: StateRecord) -> StateRecord:
    """Fill in `alive`, and call a server whose supervisor vanished without a word `lost`."""
    state.alive = supervisor_alive(state)
    if state.alive and state.running and state.guard.sample_age_s is None:
        try:
            beat, plan = read_beat_plan(beat_path(state.port))
        except Untrusted as exc:  # whether the guard samples is unknown: never shown as watching
            state.guard.stale, state.guard.beat_doubt = True, str(exc)
        else:
            state.guard.set_age(None if beat is None else boottime() - beat, plan)
    if not state.alive and state.running:
        state.status = "lost"
        state.lost_reason = (
            f"its supervisor (pid {state.supervisor.pid}) died without recording an end; the server's "
            "processes may still run unguarded: `sparktui kill --port "
            f"{state.port}` (or the next launch) sweeps them"
        )
    return state


def list_states(problems: list[str] | None = None, salvaged: bool = False) -> list[StateRecord]:
    """Every recorded server, newest first, each with `alive` (its supervisor still runs).

    A file of the wrong shape is skipped (it never blocks anything); its error goes to `problems`.
    With `salvaged`, such a file's server is listed from what stop and kill need of it (`salvage`),
    so that `stop --all` and `kill --all` end it too.
    """
    check_servers_folder()
    out = []
    seen: set[int] = set()
    for path in sorted((state_dir() / "servers").glob("*.json")):
        try:
            state = read_state(path)
        except ProtocolError as exc:
            if problems is not None:
                problems.append(str(exc))
            if salvaged and path.stem.isdigit() and (part := salvage(int(path.stem), str(exc))) is not None:
                out.append(with_liveness(part))
                seen.add(part.port)
            continue
        if state is None:
            continue
        out.append(with_liveness(state))
        if state.alive:
            seen.add(state.port)
    for port in live_ports():  # a supervisor whose state file is gone (state dir deleted…)
        if port not in seen and (live := ask_live(port)) is not None:
            out.append(live)
    out.sort(key=lambda s: s.started_at or 0, reverse=True)
    return out


def ports_to_end() -> list[int]:
    """The ports `stop --all` and `kill --all` end, each once: a live server's or a lost one's (a record
    that does not read whole too). A lost record and a live listener on one port are one port to stop:
    stop and kill of that port (find_state) pick the one to end, and say what they did once."""
    return list(dict.fromkeys(s.port for s in list_states(salvaged=True) if s.alive or s.status == "lost"))


def set_aside(path: Path) -> Path:
    """Move a wrong-shaped state file out of the way (kept for a look), so it blocks nothing."""
    target = path.with_name(path.name + f".bad-{int(time.time())}")
    os.replace(path, target)
    files.warn(f"moved the unreadable state file {path} to {target}")  # stderr and the panel
    return target


def find_state(port: int | None = None) -> StateRecord:
    """The server on `port`, or the only live one when port is None. UserError otherwise."""
    check_servers_folder()  # before any record is read or any supervisor asked
    if port is not None:
        try:
            state = read_state(state_path(port))
        except ProtocolError:
            if (answered := ask_live(port)) is not None:
                return answered
            raise  # a wrong-shaped file and nobody answering: the error names the file
        if state is not None and with_liveness(state).alive:
            return state
        if (answered := ask_live(port)) is not None:  # the file is gone or stale, the supervisor is not
            return answered
        if state is None:
            raise NoLiveServer(f"no server recorded on port {port} (see `sparktui status`)")
        return state
    running = [s for s in list_states() if s.alive]
    if len(running) == 1:
        return running[0]
    if not running:
        raise NoLiveServer("no server is running (see `sparktui status`)")
    ports = ", ".join(str(s.port) for s in running)
    raise UserError(f"several servers are running (ports {ports}); say which with --port")


def ask_live(port: int, timeout: float = 5.0, *, metrics: bool = False) -> StateRecord | None:
    """The state straight from the supervisor listening on `port`, or None when none answers.
    Only a reader of its metrics says `metrics` (a lookup leaves the scrape pace alone)."""
    try:
        reply = request(port, StatusRequest(cmd="status", metrics=metrics), timeout=timeout)
    except (UserError, OSError):
        return None
    if reply.state is None:
        return None
    reply.state.alive = True
    return reply.state


class NoLiveServer(UserError):
    """No server runs where one was asked for: bad input for a command that needs one (status --port,
    bench, set-guard), nothing to do for stop and kill."""


class Unanswered(UserError):
    """A supervisor that took the request and gave no answer: stopped (SIGSTOP), starved or dead.
    `pid`: the supervisor's process (SO_PEERCRED), for a caller that falls back to the record."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class NotTheRecorded(UserError):
    """The socket of a port is held by a process other than the supervisor its record names."""


# A supervisor stopped (SIGSTOP, a debugger) this long is not waited for: it cannot answer.
FROZEN_S = 1.0
_SLICE_S = 0.25


def peer_pid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[0]) or None


def connect(port: int, timeout: float) -> socket.socket:
    """A connection to the supervisor of `port`: the first of the port's names held by our own
    user or root (SO_PEERCRED); another user's listener is ignored with a warning. Connecting
    never waits longer than `timeout` (a full queue of a frozen supervisor)."""
    names = [socket_address(port)] + [n for n in _listeners().get(port, []) if n != socket_address(port)]
    ignored = False
    for name in [*names, str(socket_path(port))]:  # the file: a supervisor from before the abstract socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(name)
        except OSError:
            sock.close()
            continue
        uid = peer_uid(sock)
        if trusted_uid(uid):
            return sock
        sock.close()
        warn_foreign(port, uid)
        ignored = True
    why = " (only another user's listener answered, and was ignored)" if ignored else " (is it running?)"
    raise UserError(f"the supervisor of port {port} is not answering{why}")


def _stopped(pid: int | None) -> bool | None:
    """True: stopped (T/t); False: runs; None: gone."""
    if pid is None:
        return False
    from sparktui.runtime.host.proc import read_stat

    info = read_stat(pid)
    if info is None or info.dead:
        return None
    return info.state in "Tt"


def request(
    port: int,
    message: AnyRequest,
    timeout: float = 30.0,
    *,
    expect_pid: int | None = None,
    vouch: Callable[[], None] | None = None,
) -> Reply:
    """Send one request to the supervisor of the server on `port`; its reply (ok or not).

    Bounded: Unanswered when no answer came within `timeout`, the supervisor has been stopped
    (SIGSTOP) for FROZEN_S, or it died meanwhile; never an exception of the socket's own.
    `expect_pid`: the supervisor a record names; another process holding the socket (SO_PEERCRED)
    is told nothing (NotTheRecorded). `vouch`: called once the peer is that process, before anything
    is sent; what it raises passes through, nothing sent (the caller's proof of provenance)."""
    sock = connect(port, min(timeout, 5.0))
    pid = peer_pid(sock)
    if expect_pid is not None and pid != expect_pid:
        sock.close()
        raise NotTheRecorded(
            f"port {port}: the process holding its supervisor socket (pid {pid}) is not the supervisor that "
            f"{state_path(port)} names (pid {expect_pid}), so it was asked nothing and nothing was done; if no "
            "server of yours runs on that port, look at the record and remove it"
        )
    if vouch is not None:
        try:
            vouch()
        except BaseException:
            sock.close()
            raise
    deadline = time.monotonic() + timeout
    stopped_since: float | None = None
    data = b""
    try:
        sock.settimeout(min(timeout, 5.0))
        try:
            sock.sendall(message.model_dump_json(exclude_none=True).encode() + b"\n")
        except OSError as exc:
            raise Unanswered(f"the supervisor of port {port} did not take the request ({exc})", pid) from None
        while not data.endswith(b"\n") and len(data) < 64 * MAX_MESSAGE_BYTES:
            now = time.monotonic()
            if now >= deadline:
                raise Unanswered(f"the supervisor of port {port} (pid {pid}) did not answer within {timeout:g} s", pid)
            sock.settimeout(min(_SLICE_S, deadline - now))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                state = _stopped(pid)
                if state is None:
                    raise Unanswered(f"the supervisor of port {port} (pid {pid}) died before answering", pid) from None
                stopped_since = (stopped_since or now) if state else None
                if stopped_since is not None and now - stopped_since >= FROZEN_S:
                    raise Unanswered(
                        f"the supervisor of port {port} (pid {pid}) is stopped (SIGSTOP?) and cannot answer", pid
                    ) from None
                continue
            except OSError as exc:
                raise Unanswered(f"the supervisor of port {port} broke the connection ({exc})", pid) from None
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    if not data:
        raise UserError(f"the supervisor of port {port} closed the connection without answering")
    return parse_reply(data, f"the supervisor of port {port}")


def listener_pid(port: int) -> int | None:
    """The process of our own user (or root) that listens on `port`'s supervisor socket, found
    without asking it (SO_PEERCRED of a bare connection): for a supervisor that cannot answer."""
    try:
        sock = connect(port, 1.0)
    except UserError:
        return None
    with sock:
        return peer_pid(sock)


def guard_request(
    armed: bool | None = None, lines: Mapping[LineName, float | None] | None = None, kernel: str | None = None
) -> GuardRequest:
    """A guard request; `lines` holds only the lines to move (None turns one off); `kernel` the
    kernel tripwire's mode (stop, warn, off)."""
    return GuardRequest.model_validate({"cmd": "guard", "armed": armed, "lines": lines, "kernel": kernel})


def wait_for_state(
    port: int, predicate: Callable[[StateRecord], bool], timeout: float, after: float = 0.0
) -> StateRecord | None:
    """Poll the state file until predicate(state) holds (state written after `after`)."""
    deadline = time.monotonic() + timeout
    path = state_path(port)
    while time.monotonic() < deadline:
        try:
            state = read_state(path)
        except ProtocolError:
            state = None
        if state is not None and state.started_at >= after and predicate(state):
            return state
        time.sleep(0.05)
    return None
