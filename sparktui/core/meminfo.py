"""The one /proc/meminfo parser: bytes as read (the guard reads them with pread at up to 500 Hz)
in, the fields sparktui uses out, in bytes. Pure: the caller does the reading."""

from __future__ import annotations

# field → the text that starts its line; "\nCached:" so that SwapCached is not taken for it
_KEYS = (
    ("mem_total", b"MemTotal:"),
    ("mem_available", b"MemAvailable:"),
    ("mem_free", b"MemFree:"),
    ("cached", b"\nCached:"),
    ("buffers", b"Buffers:"),
    ("swap_total", b"SwapTotal:"),
    ("swap_free", b"SwapFree:"),
)


def kib_field(raw: bytes, key: bytes) -> int | None:
    """The value of one `Key:   N kB` line, in bytes; None when the kernel has no such line."""
    i = raw.find(key)
    if i < 0:
        return None
    j = raw.find(b"kB", i)
    try:
        return int(raw[i + len(key) : j]) * 1024
    except ValueError:
        return None


def parse_meminfo(raw: bytes | str) -> dict[str, int]:
    """{mem_total, mem_available, mem_free, cached, buffers, swap_total, swap_free} in bytes; a
    missing line is 0, except MemAvailable, estimated as free(1) did before kernel 3.14."""
    data = raw.encode() if isinstance(raw, str) else raw
    out = {name: kib_field(data, key) for name, key in _KEYS}
    if out["mem_available"] is None:
        out["mem_available"] = (out["mem_free"] or 0) + (out["cached"] or 0) + (out["buffers"] or 0)
    return {name: value or 0 for name, value in out.items()}


def per_cpu_free_pages(zoneinfo: bytes | str) -> int:
    """Free pages parked on the kernel's per-CPU free lists: the sum of every pageset's `count:` in
    /proc/zoneinfo. MemFree and MemAvailable leave them out. Since Linux 6.7 a CPU that frees a lot
    (a process's teardown) lets its list grow to 1/8 of the zone among all CPUs, and an idle CPU keeps
    them: right after a server ends, MemAvailable can read that much below what is free."""
    data = zoneinfo.encode() if isinstance(zoneinfo, str) else zoneinfo
    total = 0
    for line in data.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == b"count:":
            try:
                total += int(parts[1])
            except ValueError:
                continue
    return total
