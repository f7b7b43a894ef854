"""The NVRM matcher on the line shapes the reports show (core/kernel_log.py)."""

from __future__ import annotations

import json

from sparktui.core.kernel_log import classify, parse_journal_entry, parse_kmsg_record

# As logged on GB10 (NVIDIA/open-gpu-kernel-modules #1358, dgx-spark-playbooks #97, vllm #56824)
MEMDESC = (
    "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)
SYSTEM_MEM = (
    "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from rmStatus @ system_mem.c:353"
)
ASSERT = (
    "NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from pRmApi->Alloc(pRmApi, hClient, hParent, &hObject, class, pAllocParams, size) @ rs_server.c:259"
)
XID = "NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=VLLM::EngineCore, Ch 00000008, intr 10000000. MMU Fault"


def kmsg(text: str, prio: int = 3, seq: int = 7) -> bytes:
    return f"{prio},{seq},123456789,-;{text}\n SUBSYSTEM=pci\n".encode()


def test_the_out_of_memory_shapes_match_whatever_the_facility() -> None:
    for text in (MEMDESC, SYSTEM_MEM, ASSERT):
        for prio in (3, 8 + 3, 4):  # kern.err, user.err (written from user space), kern.warning
            line = parse_kmsg_record(kmsg(text, prio))
            assert line is not None and line.facility == prio >> 3
            event = classify(line)
            assert event is not None and event.kind == "no_memory"
            assert event.line == text
            assert event.usec == 123456789


def test_an_xid_line_names_its_pid() -> None:
    event = classify(parse_kmsg_record(kmsg(XID)))  # type: ignore[arg-type]
    assert event is not None and event.kind == "xid"
    assert (event.xid, event.pid, event.name) == (31, 4242, "VLLM::EngineCore")
    unknown = classify(parse_kmsg_record(kmsg("NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>")))  # type: ignore[arg-type]
    assert unknown is not None and unknown.kind == "xid" and unknown.pid is None


def test_other_lines_do_not_match() -> None:
    for text in (
        "NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  580.95.05",
        "nvidia-uvm: Loaded the UVM driver, major device number 508.",
        "myprog: NV_ERR_NO_MEMORY in a user program's own words",  # not the driver's line
        "Out of memory: Killed process 1234 (python3)",
    ):
        assert classify(parse_kmsg_record(kmsg(text))) is None, text  # type: ignore[arg-type]
    assert parse_kmsg_record(b"not a kmsg record") is None


def test_journal_entries_with_the_prefix_moved_into_the_identifier() -> None:
    kernel = json.dumps({"MESSAGE": MEMDESC, "PRIORITY": "3", "SYSLOG_FACILITY": "0", "__MONOTONIC_TIMESTAMP": "99"})
    line = parse_journal_entry(kernel)
    assert line is not None and classify(line) is not None and line.usec == 99
    # a user-facility line journald filed under the identifier "NVRM", its message without the prefix
    user = json.dumps({"MESSAGE": MEMDESC.removeprefix("NVRM: "), "SYSLOG_IDENTIFIER": "NVRM", "SYSLOG_FACILITY": "1"})
    event = classify(parse_journal_entry(user))  # type: ignore[arg-type]
    assert event is not None and event.kind == "no_memory"
    as_bytes = json.dumps({"MESSAGE": list(XID.encode())})
    xid = classify(parse_journal_entry(as_bytes))  # type: ignore[arg-type]
    assert xid is not None and xid.pid == 4242
    assert parse_journal_entry("-- No entries --") is None
