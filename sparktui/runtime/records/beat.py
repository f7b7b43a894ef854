"""The guard's heartbeat line, "STAMP PLAN[ alarm]": written by the supervisor's guard thread
(server/guard_wiring.py), read by its reaper (server/reaper.py, which imports nothing heavy) and
by every reader of a server's state (records/state.py). One format, one parse, one clamp."""

from __future__ import annotations

import math
from typing import NamedTuple

UNSAID_PLAN_S = 0.25  # what a heartbeat without a plan (an older supervisor's) is taken to promise
# The guard plans at most guard.STEADY_EVENT_INTERVAL (5 s) between samples: a larger plan is a
# damaged file, and is held to this so that no reader waits on it for long.
MAX_PLAN_S = 60.0
LINE_BYTES = 40  # the line is padded to this and rewritten in place (a pwrite, no rename)


class Beat(NamedTuple):
    stamp: float | None  # CLOCK_BOOTTIME of the guard's sample; None: no heartbeat
    plan: float  # the seconds the guard planned to its next sample
    alarm: bool  # the reaper's alarm was pushed for this heartbeat (host/deadline.py)


NO_BEAT = Beat(None, UNSAID_PLAN_S, False)


def beat_line(stamp: float, plan: float, alarm: bool) -> bytes:
    return f"{stamp:.3f} {plan:.3f}{' alarm' if alarm else ''}\n".encode().ljust(LINE_BYTES)


def parse_beat(raw: bytes) -> Beat:
    fields = raw.split(b"\n", 1)[0].split()
    try:
        stamp = float(fields[0])
        plan = float(fields[1]) if len(fields) > 1 else UNSAID_PLAN_S
    except (ValueError, IndexError):
        return NO_BEAT
    if not math.isfinite(stamp):  # an endless stamp would never be late
        return NO_BEAT
    if math.isnan(plan):
        plan = MAX_PLAN_S
    return Beat(stamp, min(max(plan, 0.0), MAX_PLAN_S), fields[2:3] == [b"alarm"])
