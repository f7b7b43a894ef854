"""The real-vLLM tests skip on a laptop without vLLM, but CI without vLLM is a failure."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow  # spawns processes


def run_e2e(ci: str | None):
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKTUI_TEST_VLLM", "CI")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e/test_real_vllm.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_skipped_without_vllm_outside_ci():
    out = run_e2e(None)
    assert out.returncode == 0 and "2 skipped" in out.stdout, out.stdout[-2000:]


def test_failing_without_vllm_under_ci():
    out = run_e2e("true")
    assert out.returncode == 1 and "2 errors" in out.stdout, out.stdout[-2000:]
    assert "CI=true: the real-vLLM e2e tests must run" in out.stdout
