"""Run by tests/test_shm_watch.py in a pytest of its own (the file named on its command line):
a test that kills its process group with SIGKILL and leaves that group's /dev/shm files."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROCS, wait_for


@pytest.mark.slow
def test_leaves_its_files(tmp_path, request):
    user = subprocess.Popen([sys.executable, str(PROCS / "shm_user.py"), str(tmp_path)], start_new_session=True)
    names = wait_for(lambda: (tmp_path / "names").exists() and (tmp_path / "names").read_text().split(), 10)
    Path(os.environ["LEAKY_NAMES_OUT"]).write_text("\n".join(names))
    if "no_shm_leftovers" in request.fixturenames:  # (a conftest without the check: nothing to wait for)
        watch = request.getfixturevalue("no_shm_leftovers")
        wait_for(lambda: set(names) <= set(watch.ours.values()), 10, "the watch to see both held")
    os.killpg(user.pid, signal.SIGKILL)  # its resource tracker too: nothing unlinks them
    user.wait()
