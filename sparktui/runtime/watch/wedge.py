"""A server that holds requests but moves nothing: the wedge detector (pure), fed /metrics counters."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    from sparktui.core.metrics import MetricsSnapshot


FINISHED = "vllm:request_success_total"


@dataclass(frozen=True)
class EngineCounters:
    """The figures of one /metrics snapshot the wedge detector needs."""

    t: float  # monotonic seconds
    running: float
    waiting: float
    generation_tokens: float
    prompt_tokens: float
    first_tokens: float  # requests that got their first token (TTFT histogram count)
    finished: float  # requests finished, for any reason
    kv_usage: float | None  # 0..1

    @classmethod
    def from_snapshot(cls, snapshot: MetricsSnapshot) -> EngineCounters:
        from sparktui.core.metrics import GENERATION_TOKENS, KV_USAGE, PROMPT_TOKENS, RUNNING, TTFT, WAITING

        kv = None
        for name in KV_USAGE:
            kv = snapshot.mean(name)
            if kv is not None:
                break
        return cls(
            t=snapshot.time,
            running=snapshot.total(RUNNING) or 0.0,
            waiting=snapshot.total(WAITING) or 0.0,
            generation_tokens=snapshot.total(GENERATION_TOKENS) or 0.0,
            prompt_tokens=snapshot.total(PROMPT_TOKENS) or 0.0,
            first_tokens=snapshot.total(TTFT + "_count") or 0.0,
            finished=snapshot.total(FINISHED) or 0.0,
            kv_usage=kv,
        )

    @property
    def decoding(self) -> float:
        """Running requests past their first token (an aborted request never had one: clamp)."""
        return max(0.0, min(self.running, self.first_tokens - self.finished))

    @property
    def prefilling(self) -> float:
        return max(0.0, self.running - self.decoding)

    def progress_key(self) -> tuple[float, ...]:
        """Any change in these is the engine doing work."""
        return (self.generation_tokens, self.prompt_tokens, self.first_tokens, self.finished, self.kv_usage or 0.0)


class WedgeState(StrEnum):
    IDLE = "idle"  # no request running
    OK = "ok"  # tokens moving
    PREFILLING = "prefilling"  # only requests in prefill, still within the prefill allowance
    SUSPECT = "suspect"  # nothing moved for wedge-after-s: probe it
    WEDGED = "wedged"  # the probe got no answer


@dataclass(frozen=True)
class WedgeView:
    state: WedgeState
    stalled_s: float  # seconds since the engine last showed progress (0 when idle)
    running: float
    decoding: float
    prefilling: float
    evidence: str | None = None


class WedgeDetector:
    """Fed EngineCounters (any pace); says whether the engine is stalled. No I/O, no clock.

    Decoding requests make a token every engine step, so with one running, `wedge_after_s`
    without a new generated token is a stall. Requests still in prefill get `prefill_after_s`
    (default 4 × wedge_after_s, at least 120 s) without any counter or KV usage moving: one
    unchunked prefill of a long prompt is a single step that shows nothing until it ends.
    """

    def __init__(self, wedge_after_s: float = 30.0, prefill_after_s: float | None = None) -> None:
        self.wedge_after_s = wedge_after_s
        self.prefill_after_s = prefill_after_s if prefill_after_s is not None else max(4 * wedge_after_s, 120.0)
        self.last: EngineCounters | None = None
        self.progress_at: float | None = None  # monotonic time of the last progress seen
        self.wedged_at: float | None = None  # monotonic time the wedge was confirmed
        self.evidence: str | None = None

    def observe(self, c: EngineCounters) -> WedgeView:
        moved = self.last is None or c.progress_key() != self.last.progress_key()
        self.last = c
        if c.running <= 0 or moved:
            self.progress_at = c.t
            self.wedged_at, self.evidence = None, None
            state = WedgeState.IDLE if c.running <= 0 else WedgeState.OK
            return WedgeView(state, 0.0, c.running, c.decoding, c.prefilling)
        assert self.progress_at is not None
        stalled = c.t - self.progress_at
        if self.wedged_at is not None:
            state = WedgeState.WEDGED
        elif c.decoding > 0:
            state = WedgeState.SUSPECT if stalled >= self.wedge_after_s else WedgeState.OK
        else:
            state = WedgeState.SUSPECT if stalled >= self.prefill_after_s else WedgeState.PREFILLING
        return WedgeView(state, stalled, c.running, c.decoding, c.prefilling, self.evidence)

    def probe_answered(self, t: float) -> None:
        """A probe got its token: the engine steps (the stalled requests wait on their clients)."""
        self.progress_at = t
        self.wedged_at, self.evidence = None, None

    def confirm(self, t: float, evidence: str) -> None:
        self.wedged_at, self.evidence = t, evidence

    @property
    def wedged(self) -> bool:
        return self.wedged_at is not None
