"""Fit core/speed.py's per-layer costs on the FIT set of tests/fixtures/speed/published.json:
LAYER_COST_S on every vLLM version, then LAYER_COST_BY_SERIES per release line (speed.SERIES).

    python bench/fit_speed.py [--prior W] [--series-prior W]

Each single-user plain-decode fit record's measured step (1 / tok/s) less its bandwidth time (bytes
read / (273 GB/s × η), η as core/speed.py has it per precision) is what the fixed costs must explain:
Σ cost[kind] × layers of that kind. The costs are fitted by least squares on the relative step error,
non-negative, pulled toward priors (weight --prior, relative) so a kind the fit set barely sees stays
near its prior: the all-versions fit toward PRIORS, each release line's toward the all-versions fit
(weight --series-prior). Both weights, unless given, are the one of PRIOR_WEIGHTS whose fit predicts a
fit record it did not see best (leave-one-out over the fit set's single-user records, fit set only).
Prints the tables to paste into core/speed.py and each record's error. A
record above its plain-decode roofline is left out (no fixed cost can explain it). Records with more
users or speculative decoding are not fitted on: they check the batch and draft models. The held-out
set is not read here: bench/speed_accuracy.py checks it.
"""

from __future__ import annotations

import argparse
import math

import speed_records as recs

from sparktui.core import speed as sp

# Before any fit, one prior for every kind: 30 µs, a block of half a dozen small kernels; no kind is
# told apart before the data, and no record of any set gave it. (Until stop 33 the Gated DeltaNet prior,
# 220 µs, was read off the guide's Qwen3.5-35B-A3B row and the MoE prior, 70, off Nemotron-3-Nano at
# 67-75 tok/s: both held-out records, so the held-out set fed the fit through them.)
PRIOR_S = 30e-6
PRIORS = {kind: PRIOR_S for kind in sp.LAYER_KINDS}
# How hard the fit pulls toward the prior (relative, squared) is chosen among these by leave-one-out on
# the fit set (prior_weight); until stop 33 it was 0.05, unchosen.
PRIOR_WEIGHTS = (0.002, 0.01, 0.05, 0.2, 1.0)


Row = tuple[recs.Record, float, float, dict[str, float]]


def rows_of(records: list[recs.Record]) -> list[Row]:
    """(record, measured seconds per token, seconds per token with no fixed cost, how many seconds
    each µs of a kind's cost adds): a token's time is affine in the costs, whatever the users and
    the drafting, so each record is one linear equation in them."""
    zero = {k: 0.0 for k in sp.LAYER_KINDS}
    out = []
    for r in records:
        t0 = 1 / recs.per_user(r, recs.predict(r, zero))
        slopes = {}
        for k in sp.LAYER_KINDS:
            unit = {**zero, k: 1e-6}
            slopes[k] = (1 / recs.per_user(r, recs.predict(r, unit)) - t0) / 1e-6
        out.append((r, 1 / r.tok_s, t0, slopes))
    return out


def fit(rows: list[Row], prior: dict[str, float], weight: float) -> dict[str, float]:
    kinds = [k for k in sp.LAYER_KINDS if any(n[k] for *_, n in rows)]
    cost = {k: prior[k] for k in kinds}

    def loss(c: dict[str, float]) -> float:
        fit_part = sum(((m + sum(c[k] * n[k] for k in kinds)) / t - 1) ** 2 for _, t, m, n in rows)
        return fit_part + weight * sum((c[k] / prior[k] - 1) ** 2 for k in kinds if prior[k])

    step = {k: max(prior[k], 1e-6) * 0.5 for k in kinds}
    for _ in range(4000):  # coordinate search: simple, non-negative, deterministic
        improved = False
        for k in kinds:
            for sign in (1, -1):
                trial = dict(cost)
                trial[k] = max(0.0, cost[k] + sign * step[k])
                if loss(trial) < loss(cost):
                    cost, improved = trial, True
        if not improved:
            step = {k: v / 2 for k, v in step.items()}
            if max(step.values()) < 1e-8:
                break
    return {**prior, **cost}


def fit_spread(records: list[recs.Record], costs: dict[str, float]) -> float:
    """ROUTING_SPREAD that best fits the multi-user plain-decode records (golden-section search)."""

    def loss(c: float) -> float:
        sp.ROUTING_SPREAD = c
        return sum((recs.per_user(r, recs.predict(r, costs)) / r.tok_s - 1) ** 2 for r in records)

    low, high = 0.05, 1.0
    for _ in range(40):
        a, b = low + (high - low) * 0.382, low + (high - low) * 0.618
        if loss(a) < loss(b):
            high = b
        else:
            low = a
    return (low + high) / 2


def fit_compute_efficiency(records: list[recs.Record]) -> float:
    """COMPUTE_EFFICIENCY that gives the fit records' published prefill rates (geometric mean of
    each record's own, found by bisection; prefill is compute-bound, so only this moves it)."""
    logs = []
    for r in records:
        low, high = 0.05, 1.0
        for _ in range(40):
            sp.COMPUTE_EFFICIENCY = (low + high) / 2
            low, high = (
                (sp.COMPUTE_EFFICIENCY, high)
                if recs.prefill_tok_s(r) < r.prefill["tok_s"]
                else (low, sp.COMPUTE_EFFICIENCY)
            )  # type: ignore[index]
        logs.append(math.log((low + high) / 2))
    return math.exp(sum(logs) / len(logs))


def predict_row(row: Row, costs: dict[str, float]) -> float:
    """The row's predicted seconds per token at these costs."""
    _, _, bare, slopes = row
    return bare + sum(costs[k] * slopes[k] for k in slopes if k in costs)


def leave_one_out(rows: list[Row], weight: float) -> list[float]:
    """Each single-user fit record's predicted seconds per token when the costs (all versions, then
    its release line's, both pulled with `weight`) are fitted on the other records only."""
    predicted = []
    for i, row in enumerate(rows):
        rest = rows[:i] + rows[i + 1 :]
        costs = fit(rest, PRIORS, weight)
        series = sp.series_of(row[0].series)
        mine = [r for r in rest if series and sp.series_of(r[0].series) == series]
        if mine:
            costs = fit(mine, costs, weight)
        predicted.append(predict_row(row, costs))
    return predicted


def prior_weight(rows: list[Row]) -> tuple[float, dict[float, float]]:
    """The PRIOR_WEIGHTS entry with the lowest mean leave-one-out error, and each one's."""
    scores = {
        w: sum(abs(row[1] / seconds - 1) for row, seconds in zip(rows, leave_one_out(rows, w), strict=True)) / len(rows)
        for w in PRIOR_WEIGHTS
    }
    return min(scores, key=lambda w: scores[w]), scores


def fit_tables(
    prior: float | None = None, series_prior: float | None = None
) -> tuple[dict[str, float], dict[str, dict[str, float]], float, list[recs.Record], list[recs.Record]]:
    """(LAYER_COST_S, LAYER_COST_BY_SERIES, ROUTING_SPREAD, the single-user records fitted on, the
    multi-user ones) from the fit set. Leaves sp.ROUTING_SPREAD at the fitted spread and
    sp.COMPUTE_EFFICIENCY at the one the fit set's prefill figures give (fit_compute_efficiency)."""
    zero = {k: 0.0 for k in sp.LAYER_KINDS}
    sp.COMPUTE_EFFICIENCY = fit_compute_efficiency([r for r in recs.load("fit") if r.prefill])
    single, many = [], []
    for r in recs.load("fit"):
        if r.speculative == "unknown" or (r.users > 1 and r.speculative is not None):
            continue  # unknown drafting; several users and drafting at once: checks, not fitted on
        if r.users > 1:
            many.append(r)
            continue
        est = recs.predict(r, zero)
        if r.speculative is None and sp.above_roofline(r.low, est):
            print(f"left out: {r.id} ({r.tok_s} tok/s is above its {est.roofline_tok_s:.1f} tok/s roofline)")
            continue
        single.append(r)
    if prior is None or series_prior is None:
        chosen, scores = prior_weight(rows_of(single))
        print("prior weight by leave-one-out: " + ", ".join(f"{w:g} {e:.1%}" for w, e in scores.items()))
        prior = chosen if prior is None else prior
        series_prior = chosen if series_prior is None else series_prior
    print(f"PRIOR_WEIGHT = {prior:g} (release lines {series_prior:g})")
    every = dict(PRIORS)
    spread = sp.ROUTING_SPREAD
    for _ in range(3):  # the costs and the routing spread each move the other a little
        sp.ROUTING_SPREAD = spread
        every = fit(rows_of(single), PRIORS, prior)
        spread = fit_spread(many, every) if many else spread
    sp.ROUTING_SPREAD = spread
    rows = rows_of(single)
    by_series = {}
    for name, *_ in sp.SERIES:
        mine = [row for row in rows if sp.series_of(row[0].series) == name]
        by_series[name] = fit(mine, every, series_prior) if mine else dict(every)
    return every, by_series, spread, single, many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prior", type=float, help="pull toward PRIORS (0: none; default: by leave-one-out)")
    parser.add_argument(
        "--series-prior", type=float, help="pull of a release line toward all versions (default: as --prior)"
    )
    args = parser.parse_args()
    every, by_series, spread, single, many = fit_tables(args.prior, args.series_prior)
    print(f"\nrouting spread: {spread:.2f} (on {len(many)} multi-user records: {', '.join(r.id for r in many)})")
    print(f"ROUTING_SPREAD = {spread:.2f}")
    print(f"\nprefill: {', '.join(r.id for r in recs.load('fit') if r.prefill)}")
    print(f"COMPUTE_EFFICIENCY = {sp.COMPUTE_EFFICIENCY:.2f}")
    print(f"\nall versions: {len(single)} single-user records")
    print(table("LAYER_COST_S", every))
    for name, *_ in sp.SERIES:
        mine = [r for r in single if sp.series_of(r.series) == name]
        print(f"\nvLLM {name}: {len(mine)} records ({', '.join(r.id for r in mine) or 'none: all-versions kept'})")
    print("\nLAYER_COST_BY_SERIES = {")
    for name, costs in by_series.items():
        print(f'    "{name}": {{' + ", ".join(f'"{k}": {costs[k] * 1e6:.0f}e-6' for k in sp.LAYER_KINDS) + "},")
    print("}")
    print(f"\n{'record':<44} {'series':>8} {'users':>5} {'measured':>8} {'now':>7} {'fitted':>7}")
    for r in [*single, *many]:
        sp.ROUTING_SPREAD = spread
        series = sp.series_of(r.series)
        after = recs.per_user(r, recs.predict(r, by_series[series] if series else every))
        now = recs.per_user(r, recs.predict(r))  # core/speed.py's tables as they stand
        print(
            f"{r.id:<44} {series or '?':>8} {r.users:>5} {r.tok_s:>8.1f} {now:>7.1f} {after:>7.1f}  ({after / r.tok_s - 1:+.0%})"
        )


def table(name: str, costs: dict[str, float]) -> str:
    body = "".join(f'    "{k}": {costs[k] * 1e6:.0f}e-6,\n' for k in sp.LAYER_KINDS)
    return f"{name} = {{\n{body}}}"


if __name__ == "__main__":
    main()
