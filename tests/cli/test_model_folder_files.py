"""`sparktui fit --model FOLDER` reads the folder's config.json and model.safetensors.index.json
through sparktui.files: one far larger than such a file is refused naming it (exit 2), never read
whole into memory (an 8 GiB sparse file, under a 3 GiB address-space cap, was a MemoryError)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import FIXTURES, REPO

pytestmark = pytest.mark.slow  # sparktui processes with their address space capped

CAPPED = (
    "import resource, runpy, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
    "sys.argv = ['sparktui', *sys.argv[1:]]\n"
    "runpy.run_module('sparktui', run_name='__main__')\n"
)


def fit(folder: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", CAPPED, "fit", "--model", str(folder), "--max-model-len", "4096"]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)


def huge(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(8 << 30)  # sparse: no disk used


def test_a_huge_config_json_is_refused_naming_it(tmp_path: Path) -> None:
    huge(tmp_path / "config.json")
    done = fit(tmp_path)
    assert done.returncode == 2, done.stderr
    assert str(tmp_path / "config.json") in done.stderr and "8,589,934,592 bytes" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_huge_safetensors_index_is_refused_naming_it(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "model-configs" / "meta-llama__Meta-Llama-3.1-8B.json", tmp_path / "config.json")
    huge(tmp_path / "model.safetensors.index.json")
    done = fit(tmp_path)
    assert done.returncode == 2, done.stderr
    assert str(tmp_path / "model.safetensors.index.json") in done.stderr and "8,589,934,592 bytes" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_capped_process_still_fits_a_real_folder(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "model-configs" / "meta-llama__Meta-Llama-3.1-8B.json", tmp_path / "config.json")
    done = fit(tmp_path)
    assert done.returncode == 0, done.stderr
