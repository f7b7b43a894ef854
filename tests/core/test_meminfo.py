"""The one /proc/meminfo parser."""

from __future__ import annotations

from sparktui.core.meminfo import parse_meminfo


def test_fields_in_bytes_and_memavailable_estimated_on_old_kernels():
    raw = (
        b"MemTotal:       127600748 kB\nMemFree:         1000 kB\nMemAvailable:   118566368 kB\n"
        b"Buffers:            10 kB\nCached:          2000 kB\nSwapCached:        5 kB\n"
        b"SwapTotal:       4096 kB\nSwapFree:        1024 kB\n"
    )
    f = parse_meminfo(raw)
    assert f["mem_total"] == 127600748 * 1024 and f["mem_available"] == 118566368 * 1024
    assert f["cached"] == 2000 * 1024  # not SwapCached
    assert f["swap_total"] == 4096 * 1024 and f["swap_free"] == 1024 * 1024
    no_avail = raw.replace(b"MemAvailable:   118566368 kB\n", b"")
    assert parse_meminfo(no_avail)["mem_available"] == (1000 + 10 + 2000) * 1024


def test_a_garbled_line_reads_as_missing_not_a_crash():
    assert parse_meminfo(b"MemTotal: lots kB\n")["mem_total"] == 0
    assert parse_meminfo("MemTotal: 1 kB\n")["mem_total"] == 1024
