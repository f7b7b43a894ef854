"""What the server pane reads from a log as it is tailed (ui.logstate.LogState)."""

from __future__ import annotations

import pytest

from sparktui.core import vllm_log
from sparktui.ui.logstate import LogState

START = [
    "(APIServer pid=1) INFO 11-29 19:24:01 [api_server.py:1] vLLM API server version 0.32.0",
    "(EngineCore_DP0 pid=2) INFO 11-29 19:24:05 [gpu_model_runner.py:1] Model loading took 4.25 GiB and 3.1 seconds",
    "(EngineCore_DP0 pid=2) INFO 11-29 19:24:09 [gpu_worker.py:1] Available KV cache memory: 8.99 GiB",
    "(EngineCore_DP0 pid=2) INFO 11-29 19:24:09 [kv_cache_utils.py:1] GPU KV cache size: 18,400 tokens",
    "(EngineCore_DP0 pid=2) INFO 11-29 19:24:09 [kv_cache_utils.py:1] Maximum concurrency for 4,096 tokens per "
    "request: 4.49x",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
REQUESTS = [
    f'(APIServer pid=1) INFO:     127.0.0.1:4000 - "POST /v1/completions HTTP/1.1" 200 OK {i}' for i in range(1000)
]
WORKER_DIED = (
    "(EngineCore_DP0 pid=2) ERROR 11-29 19:25:02 [multiproc_executor.py:316] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: -4), shutting down executor."
)


def test_a_flood_after_ready_is_not_parsed_line_by_line(monkeypatch: pytest.MonkeyPatch):
    """Once ready, the tail's reader (it holds the GIL while it reads: every key waits) parses only
    the lines that can still change what the pane shows: vLLM's INFO lines under a request flood
    are skipped, and the crash after them still reaches the pane's phase and card."""
    state = LogState()
    state.feed(START)
    assert state.phase == "ready"
    parsed: list[str] = []
    parse = vllm_log.parse_line

    def counted(raw: str):
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(vllm_log, "parse_line", counted)
    state.feed(REQUESTS)
    assert parsed == [], f"{len(parsed)} of {len(REQUESTS)} routine lines parsed after ready"
    state.feed([*REQUESTS[:10], WORKER_DIED, *REQUESTS[:10]])
    assert parsed == [WORKER_DIED]
    progress = state.progress()
    assert (progress.phase, progress.reached) == ("failed", "ready")
    assert progress.diagnosis is not None and progress.diagnosis.kind == "worker_died"
    assert "SIGILL" in progress.diagnosis.message
    assert dict(progress.actual) == {
        "KV GiB": "8.99",
        "KV tokens": "18,400",
        "concurrency": "4.49x",
        "weights GiB": "4.25",
    }
