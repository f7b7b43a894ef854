"""Following a growing log file written by a real writer (a separate process, or appends here)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from sparktui.runtime.server.logtail import LogTail

WRITER = r"""
import sys, time
path, src = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
with open(path, "ab", buffering=0) as out:
    # odd-sized pieces so lines (and UTF-8 characters) are split across writes
    for i in range(0, len(data), 97):
        out.write(data[i:i + 97])
        if i % (97 * 20) == 0:
            time.sleep(0.002)
"""


def append(path, data: bytes):
    with open(path, "ab") as fh:
        fh.write(data)


@pytest.mark.slow  # starts a process
def test_lines_from_a_real_writer_process(tmp_path, fixtures):
    src = fixtures / "vllm-logs" / "spark_v0.25.1_laguna-s-2.1-nvfp4-dflash_success.log"
    expected = src.read_bytes().decode("utf-8", "replace").split("\n")
    if expected[-1] == "":
        expected.pop()
    log = tmp_path / "vllm.log"
    tail = LogTail(log, chunk_bytes=512)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(src)])
    stop = threading.Event()
    threading.Thread(target=lambda: (writer.wait(), stop.set()), daemon=True).start()
    got, batches = [], 0
    for batch in tail.follow(interval_s=0.005, stop=stop):
        assert batch
        got.extend(batch)
        batches += 1
    assert writer.returncode == 0
    assert got == expected
    assert batches > 1
    assert tail.lines_read == len(expected)
    tail.close()


def test_partial_last_line_is_held_back(tmp_path):
    log = tmp_path / "a.log"
    append(log, b"one\ntw")
    with LogTail(log) as tail:
        assert tail.poll() == ["one"]
        assert tail.poll() == []
        append(log, b"o\r\nthr")
        assert tail.poll() == ["two\r"]  # the parser deals with carriage returns
        assert tail.flush() == ["thr"]
        assert list(tail.recent) == ["one", "two\r", "thr"]


def test_file_that_appears_later(tmp_path):
    log = tmp_path / "later.log"
    with LogTail(log, from_start=False) as tail:
        assert tail.poll() == []
        append(log, b"first\n")
        assert tail.poll() == ["first"]  # created after we started: read from its start


def test_from_end_skips_what_was_there(tmp_path):
    log = tmp_path / "b.log"
    append(log, b"old\n")
    with LogTail(log, from_start=False) as tail:
        assert tail.poll() == []
        append(log, b"new\n")
        assert tail.poll() == ["new"]


def test_truncation_restarts_from_the_top(tmp_path):
    log = tmp_path / "c.log"
    append(log, b"a long first line\nsecond\n")
    with LogTail(log) as tail:
        assert tail.poll() == ["a long first line", "second"]
        with open(log, "wb") as fh:  # truncate in place, then a new run writes
            fh.write(b"fresh\n")
        assert tail.poll() == ["fresh"]
        assert tail.restarts == 1


def test_rotation_finishes_the_old_file_then_follows_the_new(tmp_path):
    log = tmp_path / "d.log"
    append(log, b"1\n")
    with LogTail(log) as tail:
        assert tail.poll() == ["1"]
        old = open(log, "ab", buffering=0)  # noqa: SIM115 (a writer that outlives the rename)
        old.write(b"2\n3")
        os.rename(log, tmp_path / "d.log.1")
        old.write(b"\n4")  # the writer still has the old file open
        old.close()
        append(log, b"new 1\nnew 2\n")
        assert tail.poll() == ["2", "3", "4", "new 1", "new 2"]
        assert tail.restarts == 1


def test_memory_is_bounded(tmp_path):
    log = tmp_path / "e.log"
    append(log, b"".join(b"line %d\n" % i for i in range(20000)))
    append(log, b"x" * 5000)  # a line that never ends
    with LogTail(log, keep=10, chunk_bytes=4096, max_line_bytes=1000) as tail:
        total = 0
        while batch := tail.poll():
            assert len(batch) < 4 * 4096  # one poll reads at most 4 chunks
            total += len(batch)
        assert total == 20000 + 4  # 5000 x's: four 1000-byte pieces out, the last 1000 held back
        assert list(tail.recent) == [f"line {i}" for i in range(19994, 20000)] + ["x" * 1000] * 4
        assert tail.flush() == ["x" * 1000]


# -- waking on inotify instead of polling the file


def append_later(path, data: bytes, after: float = 0.2) -> threading.Thread:
    writer = threading.Timer(after, append, (path, data))
    writer.start()
    return writer


def lines_on_wakes(tail: LogTail, last: str) -> list[str]:
    """Lines read on each wake-up until `last` arrives (one change may wake the tail more than once)."""
    got: list[str] = []
    while True:
        got += tail.poll()
        if got and got[-1] == last:
            return got
        assert tail.wait(30) is True, "timed out: no wake-up came"


def test_wait_sleeps_until_a_write_wakes_it(tmp_path):
    log = tmp_path / "w.log"
    append(log, b"first\n")
    with LogTail(log) as tail:
        assert tail.fileno() is not None, "inotify is available on Linux"
        assert tail.poll() == ["first"]
        assert tail.wait(0.2) is False  # nothing written: it slept the whole timeout
        writer = append_later(log, b"second\n")
        assert tail.wait(30) is True  # woken by the write, not by the timeout
        writer.join()
        assert tail.poll() == ["second"]
        assert tail.wakeups == 1


def test_wait_wakes_on_truncation(tmp_path):
    log = tmp_path / "t.log"
    append(log, b"old run\n")
    with LogTail(log) as tail:
        tail.fileno()
        assert tail.poll() == ["old run"]
        writer = threading.Timer(0.2, lambda: log.write_bytes(b"new\n"))
        writer.start()
        assert tail.wait(30) is True
        writer.join()
        assert lines_on_wakes(tail, "new") == ["new"] and tail.restarts == 1


def test_wait_follows_a_rotation_and_then_the_new_file(tmp_path):
    log = tmp_path / "r.log"
    append(log, b"1\n")
    with LogTail(log) as tail:
        tail.fileno()
        assert tail.poll() == ["1"]
        rotate = threading.Timer(0.2, lambda: (os.rename(log, tmp_path / "r.log.1"), append(log, b"new 1\n")))
        rotate.start()
        assert tail.wait(30) is True
        rotate.join()
        assert lines_on_wakes(tail, "new 1") == ["new 1"] and tail.restarts == 1
        # The watch moved to the new file: a write to it wakes the tail too.
        writer = append_later(log, b"new 2\n")
        assert tail.wait(30) is True
        writer.join()
        assert tail.poll() == ["new 2"]


def test_wait_wakes_when_the_file_appears(tmp_path):
    log = tmp_path / "later.log"
    with LogTail(log) as tail:
        tail.fileno()
        assert tail.poll() == []
        writer = append_later(log, b"hello\n")
        assert tail.wait(30) is True
        writer.join()
        assert tail.poll() == ["hello"]


def test_wait_returns_for_the_stop_fd(tmp_path):
    log = tmp_path / "s.log"
    append(log, b"x\n")
    r, w = os.pipe()
    try:
        with LogTail(log) as tail:
            tail.fileno()
            tail.poll()
            threading.Timer(0.2, os.write, (w, b"!")).start()
            assert tail.wait(30, stop_fd=r) is False  # woken, but not by the log
            assert os.read(r, 1) == b"!"
    finally:
        os.close(r)
        os.close(w)


def test_without_inotify_wait_sleeps_its_timeout_or_until_the_stop_fd(tmp_path, monkeypatch):
    from sparktui.runtime.host import inotify

    def unavailable() -> None:
        raise OSError(38, "inotify is not available")

    monkeypatch.setattr(inotify, "Inotify", unavailable)
    log = tmp_path / "n.log"
    append(log, b"x\n")
    r, w = os.pipe()
    try:
        with LogTail(log) as tail:
            assert tail.fileno() is None and tail.poll() == ["x"]
            started = time.monotonic()
            assert tail.wait(0.2) is False and time.monotonic() - started >= 0.19  # slept, did not spin
            started = time.monotonic()
            assert tail.wait(0.2, stop_fd=r) is False and time.monotonic() - started >= 0.19
            os.write(w, b"!")
            assert tail.wait(30, stop_fd=r) is False  # returns at once for the stop fd
            append(log, b"y\n")
            assert tail.poll() == ["y"]  # polling still reads
    finally:
        os.close(r)
        os.close(w)
