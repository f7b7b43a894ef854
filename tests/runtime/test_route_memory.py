"""route.memory_back: a swap waits until the stopped servers' memory has come back."""

from __future__ import annotations

from sparktui.runtime.route.memory_back import GIB, wait_memory_back


def test_it_waits_until_memory_available_has_risen_by_what_the_stopped_server_took():
    readings = iter([10 * GIB, 14 * GIB, 25 * GIB, 30 * GIB])
    back = wait_memory_back(10 * GIB, 20 * GIB, 50 * GIB, interval_s=0.0, read=lambda: next(readings))
    assert back.ok and back.available == 30 * GIB  # 28 GiB expected: 10 + 20 − 2 (the tolerance)


def test_memory_that_never_comes_back_is_reported_with_the_figure():
    back = wait_memory_back(10 * GIB, 20 * GIB, 50 * GIB, timeout_s=0.05, interval_s=0.01, read=lambda: 12 * GIB)
    assert not back.ok and back.missing == 16 * GIB
    assert "16.0 GiB of the stopped servers' memory did not come back" in back.describe()
