"""What the fault tests share: the CLI as a user runs it, a live server with its EngineCore recorded,
and the supervisor's socket spoken to byte for byte."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparktui.runtime.records import state as st
from tests.support import REPO, wait_for


def sparktui(*args: str, env: dict[str, str], timeout: float = 90, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`sparktui ARGS…` in a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def running(port: int, timeout: float = 40) -> st.StateRecord:
    """The live state once ready and its EngineCore is recorded (the API server and one child)."""
    return wait_for(
        lambda: (
            (s := st.ask_live(port)) is not None
            and s.status == "running"
            and s.tree is not None
            and len(s.tree.members) >= 2
            and s
        ),
        timeout,
        "ready, with the EngineCore recorded",
    )


def tree_pids(state: st.StateRecord) -> list[int]:
    assert state.tree is not None
    return [pid for pid, _ in state.tree.members]


def raw_request(port: int, payload: bytes) -> dict[str, Any]:
    """Send bytes as they are (no client-side checks) and return the decoded reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(st.socket_address(port))
        sock.sendall(payload + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data, "the supervisor closed the connection without a reply"
    reply: dict[str, Any] = json.loads(data)
    return reply


def mem_available() -> int:
    """MemAvailable now, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")
