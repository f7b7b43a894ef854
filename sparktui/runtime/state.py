"""Where running servers are recorded, and how to talk to their supervisors.

<state dir>/                      mode 0700 (sparktui.paths.state_dir: $SPARKTUI_STATE_DIR overrides)
  servers/<port>.json             the supervisor's state, replaced atomically
  servers/<port>.sock             its command socket (mode 0600): one JSON request, one reply
  logs/<profile>-<time>.log       vLLM's output for one run
  supervisor/<port>.log           the detached supervisor's own output
  profiles/<port>.toml            the exact profile a detached run was started from
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparktui.atomic import atomic_write_text
from sparktui.errors import UserError
from sparktui.paths import state_dir as state_dir  # re-exported: callers say st.state_dir()

STATE_VERSION = 1
RUNNING = ("starting", "running", "stopping")  # supervisor statuses while it lives


def state_path(port: int) -> Path:
    return state_dir() / "servers" / f"{port}.json"


def socket_path(port: int) -> Path:
    return state_dir() / "servers" / f"{port}.sock"


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomic: readers see the old file or the new one, never half of one."""
    atomic_write_text(path, json.dumps(state, indent=1, default=str), private=True)


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # being replaced, or corrupt: treat as absent (never crash a reader)


def supervisor_alive(state: dict[str, Any]) -> bool:
    """The recorded supervisor process is still the same process (pid + start time)."""
    from sparktui.runtime.proc import ProcessIdentity

    sup = state.get("supervisor") or {}
    if not sup.get("pid"):
        return False
    return ProcessIdentity(int(sup["pid"]), int(sup["start_time"])).is_alive()


def list_states() -> list[dict[str, Any]]:
    """Every recorded server, newest first, each with `alive` (its supervisor still runs)."""
    out = []
    for path in sorted((state_dir() / "servers").glob("*.json")):
        state = read_state(path)
        if state is None:
            continue
        state["alive"] = supervisor_alive(state)
        if not state["alive"] and state.get("status") in RUNNING:
            state["status"] = "lost"  # the supervisor died without recording its end
        out.append(state)
    out.sort(key=lambda s: s.get("started_at") or 0, reverse=True)
    return out


def find_state(port: int | None = None) -> dict[str, Any]:
    """The server on `port`, or the only live one when port is None. UserError otherwise."""
    states = list_states()
    if port is not None:
        for state in states:
            if state.get("port") == port:
                return state
        raise UserError(f"no server recorded on port {port} (see `sparktui status`)")
    live = [s for s in states if s["alive"]]
    if len(live) == 1:
        return live[0]
    if not live:
        raise UserError("no server is running (see `sparktui status`)")
    ports = ", ".join(str(s.get("port")) for s in live)
    raise UserError(f"several servers are running (ports {ports}); say which with --port")


def request(port: int, command: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
    """Send one command to the supervisor of the server on `port`; its JSON reply."""
    path = socket_path(port)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise UserError(f"the supervisor of port {port} is not answering on {path} (is it running?)") from None
        sock.sendall(json.dumps({"cmd": command, **args}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        raise UserError(f"the supervisor of port {port} closed the connection without answering")
    reply: dict[str, Any] = json.loads(data)
    return reply


def wait_for_state(
    port: int, predicate: Callable[[dict[str, Any]], bool], timeout: float, after: float = 0.0
) -> dict[str, Any] | None:
    """Poll the state file until predicate(state) holds (state written after `after`)."""
    deadline = time.monotonic() + timeout
    path = state_path(port)
    while time.monotonic() < deadline:
        state = read_state(path)
        if state is not None and state.get("started_at", 0) >= after and predicate(state):
            return state
        time.sleep(0.05)
    return None
