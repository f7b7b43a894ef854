"""A bench run as a Spark shows it, for the bench pane's tests and snapshots: four levels, the last
cut short, one a burst (the CPU build's tokens), one with errors, and a previous run beside it."""

from __future__ import annotations

from types import SimpleNamespace

from sparktui.runtime.bench.results import LevelResult


def level(users: int, **changes) -> LevelResult:
    figures = dict(
        users=users, ttft_p50_s=0.812 * users, ttft_p95_s=1.734 * users, itl_p50_s=0.0412, itl_p95_s=0.1187,
        decode_tok_s_per_user=24.3 / users**0.5, aggregate_tok_s=24.3 * users**0.5, requests=2 * users, errors=0,
        wall_s=30.0, output_tokens=256 * users, prompt_tokens_mean=1024, min_mem_available_gib=112.4,
        peak_kv_usage=0.02 * users, mean_power_w=None, joules_per_token=None, client_cpu_s_per_request=None,
    )  # fmt: skip
    return LevelResult(**{**figures, **changes})


RUNS = [
    level(1),
    level(5, decode_tok_s_per_user=29781.1, itl_p50_s=0.0),
    level(10, errors=3),
    level(20, partial=True),
]
PREVIOUS_RUNS = [level(1, decode_tok_s_per_user=20.0), level(5), level(10), level(20)]


def previous_record(recorded_at: float = 0.0) -> SimpleNamespace:
    """The history's record of the previous run, as the pane reads it: its levels, when, under which key."""
    return SimpleNamespace(
        runs=PREVIOUS_RUNS, recorded_at=recorded_at, key=SimpleNamespace(profile="p", vllm_version=None, flags=[])
    )
