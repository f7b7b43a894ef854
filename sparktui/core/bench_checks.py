"""Bench figures that cannot be what they claim, flagged rather than plotted.

A streamed response whose tokens arrive in bursts (several per chunk, chunks a few microseconds
apart: the CPU build, a proxy that buffers) gives an inter-token latency near 0 and a "per-user
decode rate" of tokens over the time between the first and the last chunk, which can be hundreds
of times what the server produced in all: a person reading the table must not take it for speed.
"""

from __future__ import annotations

BURST_ITL_S = 0.001  # no GPU decodes a token of a real model in under a millisecond per user
PER_USER_OVER_AGGREGATE = 10.0  # one user's rate this far above everyone's together: bursts


def implausible(per_user_tok_s: float | None, aggregate_tok_s: float | None, itl_p50_s: float | None) -> list[str]:
    """Why a level's per-user rate is not a decode speed (empty when it may be one)."""
    why: list[str] = []
    if per_user_tok_s is not None and aggregate_tok_s and per_user_tok_s > PER_USER_OVER_AGGREGATE * aggregate_tok_s:
        why.append(
            f"{per_user_tok_s:.1f} tok/s per user is {per_user_tok_s / aggregate_tok_s:.0f}× the aggregate "
            f"{aggregate_tok_s:.1f}: the tokens came in bursts, not one by one"
        )
    if itl_p50_s is not None and itl_p50_s < BURST_ITL_S:
        why.append(f"ITL p50 {itl_p50_s * 1000:.2f} ms: chunks arrived together, so the per-user rate is a burst's")
    return why
