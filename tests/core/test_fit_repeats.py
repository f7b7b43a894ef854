"""Launches of one configuration repeated on one DGX Spark (tests/fixtures/vllm-repeats,
bench/repeat_launches.py): the KV memory predicted from the flags must hold every one of them in its
range, and the spreads of vLLM's measured terms are the ones those launches showed."""

from __future__ import annotations

from bench import repeat_launches as rl
from sparktui.core.vllm_measured import MEASURED_CONSTANTS
from tests.core.test_fit import load_bench


def test_every_repeated_launch_is_inside_the_predicted_range(fixtures):
    """Before the repeated launches widened the spreads, two fell outside: Gemma-3-27B fp8 at 44.61 GiB
    (non-torch 0.09) above 43.59, and an --enforce-eager nvfp4 launch at 47.72 (non-torch 0.71) above 47.44."""
    checked = 0
    for key, group in rl.groups(fixtures).items():
        pred = rl.predicted(group[0], fixtures)
        if pred is None:
            continue
        for launch in group:
            checked += 1
            assert pred.low <= launch.kv_gib <= pred.high, (key, launch.name, launch.kv_gib, pred)
    assert checked >= 29


def test_the_favourable_end_is_where_the_lowest_measured_non_torch_puts_it(fixtures):
    """The other side: the range is not padded past the evidence. The Gemma-3-27B fp8 launch whose vLLM
    measured 0.09 GiB of non-torch memory sits within half a GiB of the range's high end."""
    group = next(
        g for k, g in rl.groups(fixtures).items() if k.startswith("gemma-3-27b-it, KV fp8,") and "eager" not in k
    )
    pred = rl.predicted(group[0], fixtures)
    assert pred is not None
    lowest = min(group, key=lambda x: x.non_torch_gib or 99)
    assert lowest.non_torch_gib == 0.09 and lowest.kv_gib == 44.61
    assert 0 <= pred.high - lowest.kv_gib < 0.5


def test_the_torch_peak_repeats_and_the_machine_wide_terms_do_not(fixtures):
    """What the fit reads from vLLM's code (the torch peak) was the same on every launch of a configuration;
    what vLLM reads off the whole machine (non-torch: MemAvailable) moved by gigabytes with every flag the same."""
    debug = {
        k: g for k, g in rl.groups(fixtures).items() if all(x.torch_peak_gib is not None for x in g) and len(g) > 1
    }
    assert len(debug) >= 3
    for key, group in debug.items():
        assert len({x.torch_peak_gib for x in group}) == 1, key
    moved = max(max(x.non_torch_gib or 0 for x in g) - min(x.non_torch_gib or 0 for x in g) for g in debug.values())
    assert moved >= 2.0


def test_each_measured_constants_spread_is_what_the_start_ups_show(fixtures):
    """vllm_measured's spreads (the ends of the fit's range) are the lowest and highest bench/fit_accuracy.py
    refits from every Spark start-up with the figure, the repeated launches included."""
    fitted, _ = load_bench().fit_memory_constants(fixtures)
    constants = {c.key: c for c in MEASURED_CONSTANTS}
    for f in fitted:
        c = constants[f.key]
        if f.key == "flashinfer_full_per_graph":  # its low end is vLLM's own floor, 1 MiB a graph
            assert c.low == 1.0 and round(f.high, 2) == c.high
            continue
        assert (round(f.low, 2), round(f.high, 2)) == (c.low, c.high), (f.key, f.low, f.high, c.low, c.high)


def test_the_relaunch_bound_is_what_launches_of_one_build_and_flags_moved(fixtures):
    """vllm_measured UMA_RELAUNCH: the most and least the KV memory moved between launches of one build
    with every flag the same (Gemma-3-27B nvfp4 KV, build ge2a8197a9: 39.29 and 42.99 GiB)."""
    from sparktui.core.vllm_measured import UMA_RELAUNCH

    least, most, where = rl.relaunch_movement(fixtures)
    assert (round(least, 2), round(most, 2)) == (UMA_RELAUNCH.low, UMA_RELAUNCH.high) == (0.21, 3.70)
    assert UMA_RELAUNCH.value == UMA_RELAUNCH.high and "ge2a8197a9" in where
