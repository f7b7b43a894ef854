"""What the server pane reads from the log as it is tailed: feeds `sparktui.core.vllm_log.LogSummary`
and reads back the phase, the figures vLLM reported, and the failure diagnosis (in the tail worker)."""

from __future__ import annotations

from sparktui.core.vllm_log import LogSummary
from sparktui.ui.serverviews import Diagnosis, LogProgress
from sparktui.ui.viewmodels import Rows


class LogState:
    def __init__(self, summary: LogSummary | None = None) -> None:
        self.summary = summary or LogSummary()

    def feed(self, lines: list[str]) -> None:
        # Once ready, only the lines that can still change what the pane shows are parsed: a log
        # flood then costs the reader thread a search per batch, not a parse per line (it holds
        # the GIL meanwhile, and every key waits for it).
        self.summary.feed_serving(lines)

    @property
    def phase(self) -> str:
        return self.summary.phase  # a start-up phase, or "failed"

    @property
    def reached(self) -> str:
        return self.summary.reached

    def actual(self) -> Rows:
        s = self.summary
        rows = []
        if s.available_kv_gib is not None:
            rows.append(("KV GiB", f"{s.available_kv_gib:.2f}"))
        if s.kv_cache_tokens is not None:
            rows.append(("KV tokens", f"{s.kv_cache_tokens:,}"))
        if s.max_concurrency is not None:
            rows.append(("concurrency", f"{s.max_concurrency:.2f}x"))
        if s.weights_gib is not None:
            rows.append(("weights GiB", f"{s.weights_gib:.2f}"))
        return tuple(rows)

    def diagnosis(self) -> Diagnosis | None:
        f = self.summary.failure
        return None if f is None else Diagnosis(f.kind, f.message, f.hint)

    def progress(self) -> LogProgress:
        return LogProgress(self.phase, self.reached, self.actual(), self.diagnosis())
