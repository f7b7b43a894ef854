"""`sparktui guard -- CMD` and `sparktui mem`, as a user runs them (real processes, real memory)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparktui.commands.guard import EXIT_GUARD_TRIPPED
from sparktui.core.units import GiB
from sparktui.runtime.host.memory import read_mem_available
from tests.support import PROCS, REPO, alive, hog_mib, wait_file

pytestmark = pytest.mark.slow  # spawns processes


def sparktui(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, timeout=60, **kw
    )


def start(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "sparktui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        **kw,
    )


def test_exit_status_is_the_commands_own():
    assert sparktui("guard", "--", sys.executable, "-c", "import sys; print('out'); sys.exit(3)").returncode == 3
    out = sparktui("guard", "--", sys.executable, "-c", "print('hello')")
    assert out.returncode == 0 and out.stdout == "hello\n"  # the command's output goes to the terminal
    died = sparktui("guard", "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert died.returncode == 128 + 9


def guard_hog(tmp_path, make_options):
    """Run the hog under `sparktui guard` with options from make_options(MemAvailable GiB now).
    On a shared machine other programs may free memory meanwhile and the hog, holding 2 GiB,
    then exits 0 without reaching the lines: only then is the attempt repeated (3 at most)."""
    for _attempt in range(3):
        options = make_options(read_mem_available() / GiB)
        out = sparktui(
            "guard",
            *options,
            "--log",
            str(tmp_path / "hog.log"),
            "--",
            sys.executable,
            str(PROCS / "hog.py"),
            "1024",
            str(hog_mib(2048)),
            "--hold",
            "3",
        )
        if out.returncode != 0:
            return options, out
    raise AssertionError("MemAvailable never reached the lines in 3 attempts: other programs kept freeing memory")


def test_trip_exits_with_the_guard_code_and_a_json_report(tmp_path):
    options, out = guard_hog(
        tmp_path,
        lambda a0: ["--json", "--warn-below", "off", "--term-below", "off", "--kill-below", str(round(a0 - 0.7, 3))],
    )
    assert out.returncode == EXIT_GUARD_TRIPPED, out.stderr
    events = [json.loads(line) for line in out.stderr.splitlines()]
    trip = events[-1]
    assert trip["event"] == "trip" and trip["line"] == "kill" and trip["gone"]
    assert trip["threshold_gib"] == float(options[-1])
    pgid = next(int(s["target"].split()[1]) for s in trip["signalled"] if s["target"].startswith("group "))
    assert not alive(pgid)
    assert "started" in (tmp_path / "hog.log").read_text()


def test_human_trip_report_and_warning(tmp_path):
    _, out = guard_hog(
        tmp_path,
        lambda a0: [
            "--warn-below",
            str(round(a0 - 0.3, 3)),
            "--term-below",
            str(round(a0 - 0.7, 3)),
            "--kill-below",
            "0.5",
            "--grace",
            "1",
        ],
    )
    assert out.returncode == EXIT_GUARD_TRIPPED
    assert "sparktui guard: warning: MemAvailable" in out.stderr
    assert "memory guard tripped: term line" in out.stderr and "signalled: SIGTERM group" in out.stderr


def test_sigterm_to_sparktui_stops_the_whole_tree(tmp_path):
    p = start("guard", "--grace", "0.5", "--", sys.executable, str(PROCS / "tree.py"), "root", str(tmp_path))
    grand = int(wait_file(tmp_path / "grand.pid"))
    child = int(wait_file(tmp_path / "child.pid"))
    root = int(wait_file(tmp_path / "root.pid"))
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 128 + signal.SIGTERM
    assert "got SIGTERM: stopped the command's process tree (gone after" in err
    assert not alive(root) and not alive(child) and not alive(grand)  # the child ignores SIGTERM: it took SIGKILL


def test_ctrl_c_stops_the_tree_and_a_second_kills_at_once(tmp_path):
    p = start("guard", "--grace", "30", "--json", "--", sys.executable, str(PROCS / "tree.py"), "root", str(tmp_path))
    child = int(wait_file(tmp_path / "child.pid"))
    wait_file(tmp_path / "grand.pid")
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert alive(child)  # ignores SIGTERM, 30 s grace
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 130
    event = json.loads(err.splitlines()[-1])
    assert event["event"] == "interrupted" and event["stop"]["escalated"] and event["stop"]["gone"]
    assert not alive(child)


def test_leftovers_of_an_exited_command_are_stopped():
    out = sparktui("guard", "--", "sh", "-c", "sleep 30 & echo $!; exit 4")
    assert out.returncode == 4
    assert not alive(int(out.stdout.split()[0]))
    assert "left" in out.stderr


def test_an_exited_command_s_files_in_dev_shm_are_removed(tmp_path):
    """A command that dies leaving shared memory (a SIGKILLed multiprocessing program) and nothing
    running: the files it was seen holding are removed, as after a trip."""
    name = f"psm_{uuid.uuid4().hex[:8]}"
    path = Path("/dev/shm") / name
    leave = (
        f"import mmap, os, signal, time; fd = os.open({str(path)!r}, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600); "
        "os.ftruncate(fd, 4096); m = mmap.mmap(fd, 4096); time.sleep(3); os.kill(os.getpid(), signal.SIGKILL)"
    )
    try:
        out = sparktui("guard", "--", sys.executable, "-c", leave)
        assert out.returncode == 128 + signal.SIGKILL, out.stderr
        assert not path.exists(), "the command's /dev/shm file was left"
        assert "the command left 1 file(s) in /dev/shm that nothing holds: removed them" in out.stderr
    finally:
        path.unlink(missing_ok=True)


def test_usage_errors():
    out = sparktui("guard")
    assert out.returncode == 2 and "guard needs a command to run" in out.stderr and "Traceback" not in out.stderr
    out = sparktui("guard", "--term-below", "6", "--kill-below", "8", "--", "true")
    assert out.returncode == 2 and "kill line 8.0 GiB is above the term line 6.0 GiB" in out.stderr
    out = sparktui("guard", "--term-below", "-3", "--", "true")
    assert out.returncode == 2 and "expected a finite number of GiB >= 0" in out.stderr
    out = sparktui("guard", "--", "no-such-command-xyz")
    assert out.returncode == 2 and "command not found: 'no-such-command-xyz'" in out.stderr


def test_mem_one_sample_json_and_text():
    out = sparktui("mem", "--json")
    assert out.returncode == 0
    s = json.loads(out.stdout)
    assert s["memory"]["mem_total"] > 0 and "available" in s["gpu"]
    text = sparktui("mem").stdout
    assert text.startswith("memory    available") and "gpu" in text


def test_mem_watch_streams_json_lines_until_ctrl_c():
    p = start("mem", "--watch", "--json", "--no-gpu", "--interval", "0.05")
    first = p.stdout.readline()
    second = p.stdout.readline()
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=10)
    assert p.returncode == 0
    samples = [json.loads(x) for x in [first, second, *rest.splitlines()]]
    assert len(samples) >= 2 and samples[1]["memory"]["time"] > samples[0]["memory"]["time"]
    assert "gpu" not in samples[0]
