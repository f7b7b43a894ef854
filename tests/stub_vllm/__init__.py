"""A stub `vllm` executable for fast tests (see stub.py for what it does and its knobs)."""

from __future__ import annotations

import sys
from pathlib import Path

STUB = Path(__file__).resolve().parent / "stub.py"


def install_stub(directory: Path) -> Path:
    """Write an executable named `vllm` into directory that runs the stub with this Python."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "vllm"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(STUB)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 15.0, what: str = "condition", interval: float = 0.05):
    """Poll until predicate() is truthy; return its value, or fail naming what never happened."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def shm_held_by(pid: int) -> set[str]:
    """/dev/shm files the process holds open."""
    import os

    names = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return names
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/shm/"):
            names.add(target)
    return names
