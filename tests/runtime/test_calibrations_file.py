"""The calibrations file is read through sparktui.files: a FIFO in its place hangs no fit, and a
file far larger than sparktui writes is never read whole; both read as no calibration (the file is
a cache), as an unreadable one always did."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow  # sparktui processes (before the fix the first one hung)


def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "state").mkdir(mode=0o700)
    return {**os.environ, "SPARKTUI_STATE_DIR": str(tmp_path / "state"), "SPARKTUI_CONFIG_DIR": str(tmp_path / "c")}


def test_a_fifo_as_the_calibrations_file_hangs_no_fit(tmp_path: Path) -> None:
    environ = env(tmp_path)
    os.mkfifo(tmp_path / "state" / "calibrations.json", 0o600)
    argv = [
        sys.executable,
        "-m",
        "sparktui",
        "fit",
        "--model",
        "meta-llama/Meta-Llama-3.1-8B",
        "--max-model-len",
        "4096",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=environ, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "weights" in done.stdout and "calibrated" not in done.stdout  # the fit, with no calibration


def test_a_huge_calibrations_file_is_never_read_whole(tmp_path: Path) -> None:
    environ = env(tmp_path)
    with (tmp_path / "state" / "calibrations.json").open("wb") as f:
        f.truncate(8 << 30)  # sparse: no disk; read whole it is 8 GiB (a MemoryError under the cap)
    code = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from sparktui.runtime import calibrations\n"
        "print(calibrations.load())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=environ, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
