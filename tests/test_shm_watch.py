"""The /dev/shm check every process-starting test runs under (tests/conftest.py, no_shm_leftovers;
tests/support/shm_watch.py): a test's own leftovers fail it and are removed; another run's files
are never its."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROCS, REPO, wait_for
from tests.support.shm_watch import OWNER_ENV, ShmWatch

pytestmark = pytest.mark.slow  # spawns processes


def shm_user(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], list[str]]:
    """A process (and its resource tracker) holding a psm_* and a sem.mp-* file."""
    user = subprocess.Popen(
        [sys.executable, str(PROCS / "shm_user.py"), str(tmp_path)], env=env, start_new_session=True
    )
    names = wait_for(lambda: (tmp_path / "names").exists() and (tmp_path / "names").read_text().split(), 10)
    return user, names


def test_a_test_that_leaves_its_files_fails_naming_them_and_they_are_removed(tmp_path):
    out = tmp_path / "names-out"
    case = PROCS / "leaky_shm_case.py"
    env = {**os.environ, "LEAKY_NAMES_OUT": str(out)}
    env.pop(OWNER_ENV, None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(case)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = out.read_text().split()
    left = [n for n in names if (Path("/dev/shm") / n).exists()]
    for n in left:
        (Path("/dev/shm") / n).unlink()  # what the check should have removed: this test's own
    assert len(names) == 2 and names[0].startswith("psm_") and names[1].startswith("sem.mp-"), run.stdout
    assert run.returncode == 1, run.stdout
    assert f"left in /dev/shm, held by nothing (removed now): {', '.join(sorted(names))}" in run.stdout
    assert "1 passed, 1 error" in run.stdout
    assert not left


def test_files_another_run_left_are_not_this_tests(tmp_path, no_shm_leftovers):
    watch = ShmWatch()  # a test's watch beside this one's: the process below is neither's
    watch.start()
    env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    user, names = shm_user(tmp_path, env)
    try:
        wait_for(lambda: {n for n in os.listdir("/dev/shm")} >= set(names), 10, "the files")
        watch.look()
        os.killpg(user.pid, signal.SIGKILL)
        user.wait()
        assert watch.stop() == [] and watch.ours == {}
        assert all((Path("/dev/shm") / n).exists() for n in names)  # not its to remove
    finally:
        for n in names:
            (Path("/dev/shm") / n).unlink(missing_ok=True)  # this test's own: it removes them


def test_a_file_still_held_by_a_live_process_is_not_a_leftover(tmp_path, no_shm_leftovers):
    watch = ShmWatch()
    watch.start()
    user, names = shm_user(tmp_path, {**os.environ, OWNER_ENV: watch.token})
    try:
        wait_for(lambda: set(names) <= set(watch.ours.values()), 10, "the watch to see both held")
        assert watch.leftovers() == {}
    finally:
        os.killpg(user.pid, signal.SIGKILL)
        user.wait()
    assert watch.stop() == sorted(names)
    assert not [n for n in names if (Path("/dev/shm") / n).exists()]
