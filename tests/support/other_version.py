"""A state record as a newer sparktui might write it: values and keys this version does not know, in
the parts that are typed (issue 24: a typed record must not refuse them, lose them, or lose the server)."""

from __future__ import annotations

import copy
from typing import Any

from sparktui.core.leak import Holder

NEW_KERNEL_EVENT = {"kind": "gsp_timeout", "line": "NVRM: GSP RPC timeout (fn 76)", "usec": 99, "gsp_fn": 76}
NEW_FAILURE_KIND = "unified_memory_exhausted"
NEW_EVENT = {"kind": "SwapStorm", "t": 1.5, "swapped_gib": 3.25}
NEW_LINE_KEY = "swap_below_gib"


def from_another_version(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (a state file's JSON) with a kernel event, a failure kind, an event kind, a key in
    guard.lines, a guard state and kernel mode/source, and a leak holder kind this version does not know."""
    out = copy.deepcopy(record)
    guard = out["guard"]
    guard["lines"][NEW_LINE_KEY] = 1.0
    guard["state"] = "throttling"
    if guard.get("kernel") is None:
        guard["kernel"] = {"mode": "stop", "source": "kmsg", "detail": "/dev/kmsg", "events": []}
    kernel = guard["kernel"]
    kernel["events"] = [*kernel.get("events", []), dict(NEW_KERNEL_EVENT)]
    kernel["mode"], kernel["source"] = "notify", "ebpf"
    out["events"] = [*out.get("events", []), dict(NEW_EVENT)]
    failure = {"kind": NEW_FAILURE_KIND, "message": "the pool ran dry", "hint": None}
    out["summary"] = {**(out.get("summary") or {}), "failure": failure}
    if out.get("exit") is not None:
        out["exit"]["failure"] = dict(failure)
        leak = out["exit"].get("leak")
        if leak is not None:
            # every field this version writes (so none is added on the way back), with a kind it does not know
            holder = Holder(kind="shm_file", name="/dev/dma_heap/x", bytes=4096, pids=[7], start_times=[8])
            leak["holders"] = [*leak["holders"], {**holder.model_dump(), "kind": "dma_buf"}]
    return out
