"""The NVIDIA driver's lines in the kernel log, as the guard's tripwire reads them. Pure: the
runtime (runtime/guard/kernel_watch.py) reads /dev/kmsg or `journalctl -o json` and hands each record in.

On GB10 the driver fails before MemAvailable looks low: it logs `NV_ERR_NO_MEMORY` (often in
bursts), the engine stalls for ~5 s, then the host freezes (NVIDIA/open-gpu-kernel-modules #1358,
dgx-spark-playbooks #97, eugr/spark-vllm-docker #404). The shapes seen in those reports:

    NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359
    NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from rmStatus @ system_mem.c:353
    NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from ...
    NVRM: Xid (PCI:0000:01:00): 31, pid=1234, name=python3, Ch 00000008, ...

A line matches whatever its syslog facility: one written to /dev/kmsg from user space (as the tests
do) carries facility "user" (1), not "kern" (0).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

# [guard] kernel: "stop" stops the tree on a new NV_ERR_NO_MEMORY line, "warn" records it, "off" reads nothing
KERNEL_MODES = ("stop", "warn", "off")
DEFAULT_KERNEL_MODE = "stop"
NO_MEMORY_STATUS = "NV_ERR_NO_MEMORY"
NO_MEMORY_CODE = "(0x00000051)"  # the same status as a number, for lines that leave out the name
_NVRM = re.compile(r"(?:^|\s|\]\s*)NVRM:\s")
_XID = re.compile(
    r"NVRM: Xid \((?P<device>[^)]*)\): (?P<xid>\d+), pid=(?P<pid>\d+|'<unknown>'|<unknown>)(?:, name=(?P<name>[^,]*))?"
)
MAX_QUOTE = 400  # a kernel line is at most ~1 KiB; the state record quotes this much of it


@dataclass(frozen=True)
class KernelLine:
    """One record of the kernel log."""

    text: str
    facility: int | None = None  # 0 kern, 1 user, …
    level: int | None = None  # 0 emerg … 7 debug
    seq: int | None = None  # /dev/kmsg's sequence number
    usec: int | None = None  # microseconds since boot (CLOCK_MONOTONIC)


EventKind = Literal["no_memory", "xid"]


@dataclass(frozen=True)
class KernelEvent:
    """An NVRM line the guard acts on (no_memory) or records (xid)."""

    kind: EventKind
    line: str  # the line as logged, cut to MAX_QUOTE
    xid: int | None = None
    pid: int | None = None
    name: str | None = None
    usec: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse_kmsg_record(raw: bytes) -> KernelLine | None:
    """One read() of /dev/kmsg: `PRIO,SEQ,USEC,FLAGS[,…];MESSAGE\\n` then optional ` KEY=VALUE`
    continuation lines. PRIO is facility × 8 + level. None for a record of another shape."""
    head, sep, rest = raw.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None
    message = rest.split(b"\n", 1)[0]
    return KernelLine(_unescape(message), facility=prio >> 3, level=prio & 7, seq=seq, usec=usec)


def _unescape(message: bytes) -> str:
    """/dev/kmsg writes non-printable bytes as \\xNN."""
    text = message.decode("utf-8", errors="replace")
    if "\\x" not in text:
        return text
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def parse_journal_entry(line: bytes | str) -> KernelLine | None:
    """One line of `journalctl -o json`; None for anything else. MESSAGE may be an array of bytes."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list) and all(isinstance(b, int) for b in message):
        message = bytes(b & 0xFF for b in message).decode("utf-8", errors="replace")
    if not isinstance(message, str):
        return None
    ident = entry.get("SYSLOG_IDENTIFIER")
    if ident == "NVRM" and not message.lstrip().startswith("NVRM"):
        message = f"NVRM: {message.lstrip()}"  # journald moved the "NVRM:" prefix into the identifier
    return KernelLine(
        message,
        facility=_int(entry.get("SYSLOG_FACILITY")),
        level=_int(entry.get("PRIORITY")),
        seq=None,
        usec=_int(entry.get("__MONOTONIC_TIMESTAMP")),
    )


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def classify(line: KernelLine) -> KernelEvent | None:
    """NV_ERR_NO_MEMORY → no_memory; an Xid line → xid (with the pid it names); else None."""
    text = line.text
    if "NVRM" not in text or not _NVRM.search(text):
        return None
    quote = text.strip()[:MAX_QUOTE]
    if NO_MEMORY_STATUS in text or NO_MEMORY_CODE in text:
        return KernelEvent("no_memory", quote, usec=line.usec)
    m = _XID.search(text)
    if m:
        pid = m.group("pid")
        name = m.group("name")
        return KernelEvent(
            "xid",
            quote,
            xid=int(m.group("xid")),
            pid=int(pid) if pid.isdigit() else None,
            name=name.strip() if name else None,
            usec=line.usec,
        )
    return None
