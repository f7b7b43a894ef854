"""A level's figures from its requests' timestamps and what the watcher sampled: sparktui's own
(percentiles, decode and aggregate tok/s, energy) and the same level under `vllm bench serve`'s
names and definitions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparktui.core.units import GiB
from sparktui.runtime.bench.request_record import RequestRecord
from sparktui.runtime.bench.results import LevelResult, VllmBenchFields


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class LevelWatch:
    """What the watcher saw during one level."""

    min_available: int | None = None
    peak_kv: float | None = None
    power: list[tuple[float, float]] = field(default_factory=list)  # (perf_counter, watts)
    lag_s: float = 0.0  # the most the client's event loop woke late


def energy_j(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Power integrated over [start, end] (trapezoids; the edges hold the nearest sample)."""
    points = [(t, w) for t, w in samples if start <= t <= end]
    if not points or end <= start:
        return None
    points = [(start, points[0][1]), *points, (end, points[-1][1])]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))


def summarize(
    users: int,
    records: Sequence[RequestRecord],
    started: float,
    watch: LevelWatch,
    cpu_s: float | None,
    *,
    partial: bool = False,
) -> LevelResult:
    """The figures of one level from its requests' timestamps."""
    done = [r for r in records if r.end is not None]
    ok = [r for r in done if r.error is None]
    ends = [r.last or r.end for r in done if (r.last or r.end) is not None]
    end = max((e for e in ends if e is not None), default=started)
    wall = max(0.0, end - started)
    tokens = sum(r.tokens for r in done)
    ttfts = [t for r in ok if (t := r.ttft) is not None]
    gaps = [g for r in ok for g in r.gaps]
    decoding = [r for r in ok if r.decode_tok_s is not None]
    decode_s = sum((r.last or 0.0) - (r.first or 0.0) for r in decoding)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    energy = energy_j(watch.power, started, end)
    errors = [r.error for r in done if r.error is not None]
    return LevelResult(
        users=users,
        ttft_p50_s=percentile(ttfts, 0.50),
        ttft_p95_s=percentile(ttfts, 0.95),
        itl_p50_s=percentile(gaps, 0.50),
        itl_p95_s=percentile(gaps, 0.95),
        decode_tok_s_per_user=sum(r.tokens - r.first_chunk_tokens for r in decoding) / decode_s if decoding else None,
        aggregate_tok_s=tokens / wall if tokens and wall > 0 else None,
        requests=len(done),
        errors=len(errors),
        wall_s=wall,
        output_tokens=tokens,
        prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
        min_mem_available_gib=None if watch.min_available is None else watch.min_available / GiB,
        peak_kv_usage=watch.peak_kv,
        mean_power_w=energy / wall if energy is not None and wall > 0 else None,
        joules_per_token=energy / tokens if energy is not None and tokens else None,
        client_cpu_s_per_request=cpu_s / len(done) if cpu_s is not None and done else None,
        client_lag_max_s=watch.lag_s,
        partial=partial,
        error_messages=list(dict.fromkeys(errors))[:5],
        vllm_bench=vllm_fields(users, records, wall),
    )


def _ms_stats(values: Sequence[float], name: str) -> dict[str, float | None]:
    if not values:
        return {f"{kind}_{name}_ms": None for kind in ("mean", "median", "std", "p99")}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    median, p99 = percentile(values, 0.5), percentile(values, 0.99)
    assert median is not None and p99 is not None
    return {
        f"mean_{name}_ms": mean * 1000,
        f"median_{name}_ms": median * 1000,
        f"std_{name}_ms": std * 1000,
        f"p99_{name}_ms": p99 * 1000,
    }


def vllm_fields(users: int, records: Sequence[RequestRecord], wall: float) -> VllmBenchFields:
    """The level as `vllm bench serve` would report it (see VllmBenchFields)."""
    done = [r for r in records if r.end is not None]
    ok = [r for r in done if r.error is None and r.first is not None]
    outputs = sum(r.tokens for r in ok)
    inputs = sum(r.prompt_tokens or 0 for r in ok)
    duration = wall if wall > 0 else math.inf
    tpots = [
        (r.last - r.first) / (r.tokens - 1) for r in ok if r.last is not None and r.first is not None and r.tokens > 1
    ]
    return VllmBenchFields.model_validate(
        {
            "duration": wall,
            "completed": len(ok),
            "failed": len(done) - len(ok),
            "max_concurrency": users,
            "total_input_tokens": inputs,
            "total_output_tokens": outputs,
            "request_throughput": len(ok) / duration,
            "output_throughput": outputs / duration,
            "total_token_throughput": (inputs + outputs) / duration,
            **_ms_stats([t for r in ok if (t := r.ttft) is not None], "ttft"),
            **_ms_stats(tpots, "tpot"),
            **_ms_stats([g for r in ok for g in r.chunk_gaps], "itl"),
            **_ms_stats([(r.last or r.end or r.sent) - r.sent for r in ok], "e2el"),
        }
    )
