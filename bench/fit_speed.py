"""Fit core/speed.py's per-layer costs (LAYER_COST_S) on the FIT set of tests/fixtures/speed/published.json.

    python bench/fit_speed.py

Each record's measured step (1 / tok/s) less its bandwidth time (bytes read / (273 GB/s × η), η as
core/speed.py has it per precision) is what the fixed costs must explain: Σ cost[kind] × layers of
that kind. The costs are fitted by least squares on the relative step error, non-negative, pulled
toward core/speed.py's priors (weight --prior, relative) so a kind the fit set barely sees stays
near its prior. Prints the fitted table (paste it into LAYER_COST_S) and each fit record's error
before and after. The held-out set is not read here: bench/speed_accuracy.py checks it.
"""

from __future__ import annotations

import argparse

import speed_records as recs

from sparktui.core import speed as sp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prior", type=float, default=0.05, help="pull toward the priors (0: none)")
    args = parser.parse_args()
    fit = [r for r in recs.load("fit") if not r.speculative]
    rows = []
    for r in fit:
        zero = {k: 0.0 for k in sp.LAYER_KINDS}
        memory_s = 1 / recs.predict(r, zero).decode_tok_s  # the step with no fixed cost
        counts = sp.layer_kinds(r.spec)
        rows.append((r, 1 / r.tok_s, memory_s, counts))
    kinds = [k for k in sp.LAYER_KINDS if any(c[k] for *_, c in rows)]
    prior = {k: sp.LAYER_COST_S[k] for k in kinds}
    cost = dict(prior)

    def loss(c: dict[str, float]) -> float:
        fit_part = sum(((m + sum(c[k] * n[k] for k in kinds)) / t - 1) ** 2 for _, t, m, n in rows)
        return fit_part + args.prior * sum((c[k] / prior[k] - 1) ** 2 for k in kinds)

    step = {k: prior[k] * 0.5 for k in kinds}
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
    print(f"fit set: {len(rows)} records; kinds seen: {', '.join(kinds)}; prior weight {args.prior}")
    print(f"{'kind':<18} {'prior µs':>9} {'fitted µs':>10}")
    for k in sp.LAYER_KINDS:
        print(
            f"{k:<18} {sp.LAYER_COST_S[k] * 1e6:>9.0f} {cost.get(k, sp.LAYER_COST_S[k]) * 1e6:>10.0f}"
            + ("" if k in kinds else "  (not in the fit set: prior kept)")
        )
    print(f"\n{'record':<36} {'measured':>8} {'prior':>7} {'fitted':>7}")
    for r, _, _, _ in rows:
        before = recs.predict(r).decode_tok_s
        after = recs.predict(r, {**sp.LAYER_COST_S, **cost}).decode_tok_s
        print(f"{r.id:<36} {r.tok_s:>8.1f} {before:>7.1f} {after:>7.1f}  ({after / r.tok_s - 1:+.0%})")


if __name__ == "__main__":
    main()
