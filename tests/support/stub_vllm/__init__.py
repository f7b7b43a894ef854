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
