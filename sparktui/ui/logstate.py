"""What the launch pane shows from the log: feeds `sparktui.core.vllm_log` and reads back the
phase, the figures vLLM reported, and the failure diagnosis. Runs in the tail worker's thread."""

from __future__ import annotations

from typing import Any

from sparktui.ui.widgets.server import PHASES


class LogState:
    def __init__(self, summary: Any) -> None:
        self.summary = summary
        self.phase: str | None = "starting"

    def feed(self, lines: list[str]) -> None:
        feed = getattr(self.summary, "feed_lines", None)
        if feed is not None:
            feed(lines)
        else:
            for line in lines:
                self.summary.feed(line)
        phase = getattr(self.summary, "phase", None)
        if isinstance(phase, str) and phase in PHASES:
            self.phase = phase
        elif getattr(self.summary, "ready", False):
            self.phase = "ready"

    @property
    def failed(self) -> bool:
        return getattr(self.summary, "failure", None) is not None

    def actual(self) -> list[tuple[str, str]]:
        s = self.summary
        rows = []
        kv_gib = getattr(s, "available_kv_gib", None)
        if kv_gib is not None:
            rows.append(("KV cache GiB", f"{kv_gib:.2f}"))
        tokens = getattr(s, "kv_cache_tokens", None)
        if tokens is not None:
            rows.append(("KV tokens", f"{tokens:,}"))
        conc = getattr(s, "max_concurrency", None)
        if conc is not None:
            rows.append(("max concurrency", f"{conc:.2f}x"))
        weights = getattr(s, "weights_gib", None)
        if weights is not None:
            rows.append(("weights GiB", f"{weights:.2f}"))
        return rows

    def diagnosis(self) -> tuple[str, str, str] | None:
        failure = getattr(self.summary, "failure", None)
        if failure is None:
            return None
        get = (lambda k: failure.get(k)) if isinstance(failure, dict) else (lambda k: getattr(failure, k, None))
        return (str(get("kind") or "failure"), str(get("message") or ""), str(get("hint") or ""))
