"""One request as the client saw it: when it was sent, when each chunk carrying tokens arrived
(the kernel's receive stamps, perf_counter seconds), how many tokens, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One request as the client saw it (perf_counter seconds)."""

    sent: float
    first: float | None = None
    last: float | None = None
    tokens: int = 0
    first_chunk_tokens: int = 0
    prompt_tokens: int | None = None
    gaps: list[float] = field(default_factory=list)  # inter-token latencies
    chunk_gaps: list[float] = field(default_factory=list)  # between chunks, as `vllm bench serve` counts ITL
    end: float | None = None
    error: str | None = None
    counted_by_server: bool = False  # chunks carry cumulative completion tokens
    status: int | None = None  # the HTTP status of the reply

    def arrive(self, now: float, tokens: int) -> None:
        if tokens <= 0:
            return
        if self.first is None:
            self.first, self.first_chunk_tokens = now, tokens
        elif self.last is not None:
            self.gaps.extend([(now - self.last) / tokens] * tokens)
            self.chunk_gaps.append(now - self.last)
        self.last = now
        self.tokens += tokens

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def decode_tok_s(self) -> float | None:
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        return (self.tokens - self.first_chunk_tokens) / (self.last - self.first)
