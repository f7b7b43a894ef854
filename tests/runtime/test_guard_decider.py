"""The guard's pure decision part, fed numbers."""

from __future__ import annotations

import pytest

from sparktui.core.guard_lines import GuardLines, resolve_lines
from sparktui.core.profiles import GuardSettings
from sparktui.core.units import GiB
from sparktui.errors import UserError
from sparktui.runtime.guard.guard import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    STEADY_EVENT_INTERVAL,
    STEADY_INTERVAL,
    WORST_RATE,
    GuardAction,
    GuardDecider,
)

# The lines alone (the fall-rate and PSI triggers off); TRIGGERS: the same lines with them on.
LINES = GuardLines(
    warn_below_gib=10, term_below_gib=6, kill_below_gib=3.5, grace_s=5, fall_rate_gib_s=None, psi_full_pct=None
)
TRIGGERS = GuardLines(warn_below_gib=10, term_below_gib=6, kill_below_gib=3.5, grace_s=5)


def g(x: float) -> int:
    return int(x * GiB)


def feed_all(d: GuardDecider, samples):
    return [d.feed(t, g(a)) for t, a in samples]


def test_defaults_are_ordered_and_explained():
    lines = GuardLines()
    assert lines.warn_below_gib >= lines.term_below_gib >= lines.kill_below_gib > 0
    assert lines.bytes("kill") == int(lines.kill_below_gib * GiB)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kill_below_gib=7, term_below_gib=6), "kill line 7 GiB is above the term line 6 GiB"),
        (dict(warn_below_gib=2), "warn line 2 GiB is below a term/kill line"),
        (dict(kill_below_gib=-1), r"kill_below_gib must be a number of GiB from 0 to below 1048576 .*got -1"),
        (dict(grace_s=-1), "grace_s must be a finite number of seconds >= 0"),
        (dict(kill_below_gib=float("nan")), "kill_below_gib"),
    ],
)
def test_bad_lines_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        GuardLines(**kwargs)


def test_lines_can_be_turned_off_and_read_from_settings():
    GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=1)

    settings = GuardSettings(lines={"term_below_gib": 8.0, "grace_s": 2.0}, armed=True)  # the rest: defaults
    lines = settings.guard_lines()
    assert lines == GuardLines(term_below_gib=8.0, grace_s=2.0)
    assert GuardSettings().guard_lines() == GuardLines()


def test_plenty_of_memory_does_nothing_at_the_idle_pace():
    d = GuardDecider(LINES)
    out = feed_all(d, [(i * 0.1, 80) for i in range(20)])
    assert {o.action for o in out} == {GuardAction.NONE}
    assert out[-1].next_interval == MAX_INTERVAL
    assert d.state == "watching"


def test_warn_once_then_again_only_after_recovering():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 20), (1, 9.9), (2, 9.5), (3, 10.5), (4, 9.0), (5, 11.5), (6, 9.9)])
    assert [o.action for o in out] == [
        GuardAction.NONE,
        GuardAction.WARN,
        GuardAction.NONE,
        GuardAction.NONE,
        GuardAction.NONE,
        GuardAction.NONE,
        GuardAction.WARN,
    ]
    assert out[1].line == "warn" and out[1].threshold == g(10) and out[1].reason == "below"


def test_term_then_grace_expired_kill():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 20), (1, 9), (2, 5.9), (3, 5.5), (6.9, 5.5), (7.0, 5.5), (7.1, 5.5)])
    assert [o.action for o in out] == [
        GuardAction.NONE,
        GuardAction.WARN,
        GuardAction.TERM,
        GuardAction.NONE,
        GuardAction.NONE,
        GuardAction.KILL,
        GuardAction.NONE,
    ]
    assert out[2].line == "term" and out[2].threshold == g(6)
    assert out[5].reason == "grace expired"
    assert d.state == "killing"


def test_kill_line_during_grace_kills_at_once():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 20), (1, 5.9), (1.5, 4.0), (1.6, 3.4)])
    assert [o.action for o in out] == [GuardAction.NONE, GuardAction.TERM, GuardAction.NONE, GuardAction.KILL]
    assert out[-1].reason == "below kill line during grace" and out[-1].line == "kill"


def test_fast_fall_straight_through_term_kills():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 20), (0.1, 14), (0.3, 3.0)])  # 55 GiB/s: fast, still a plausible fall
    assert out[-1].action is GuardAction.KILL and out[-1].reason == "below" and not out[-1].held
    assert out[-1].rate == pytest.approx(-g(55), rel=0.01)


def test_predicted_crossing_trips_before_the_line():
    d = GuardDecider(LINES)
    # 14 GiB/s fall; the sampler woke late (50 ms gaps): at 4.0 GiB the next sample would be below 3.5.
    out = feed_all(d, [(0.0, 5.4), (0.05, 4.7), (0.10, 4.0)])
    assert out[0].action is GuardAction.TERM  # already below term
    assert out[-1].action is GuardAction.KILL and out[-1].reason == "predicted kill line during grace"
    assert out[-1].available > g(3.5)
    d = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=3.5, fall_rate_gib_s=None))
    out = feed_all(d, [(0.0, 5.4), (0.05, 4.7), (0.10, 4.0)])
    assert [o.action for o in out] == [GuardAction.NONE, GuardAction.NONE, GuardAction.KILL]
    assert out[-1].reason == "predicted"
    # The same level without a fall does not trip.
    d = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=3.5))
    assert {o.action for o in feed_all(d, [(0.0, 4.0), (0.05, 4.0), (0.10, 4.0)])} == {GuardAction.NONE}


def test_single_noisy_sample_is_dropped_and_not_counted():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 50), (0.1, 50), (0.2, 1.0), (0.2005, 50), (0.3, 50)])
    assert {o.action for o in out} == {GuardAction.NONE}
    assert out[2].held and out[2].next_interval == 0.0
    assert d.noise_dropped == 1 and d.low_water == g(50)
    assert d.state == "watching" and not d.warned


def test_confirmed_sudden_drop_trips_on_the_confirming_sample():
    d = GuardDecider(LINES)
    out = feed_all(d, [(0, 50), (0.1, 50), (0.2, 1.0), (0.201, 1.1)])
    assert out[2].held and out[2].action is GuardAction.NONE
    assert out[3].action is GuardAction.KILL and out[3].reason == "below"
    assert d.low_water == g(1.0)


@pytest.mark.parametrize("rate_gib_s", [0.5, 2, 14, 30, 60])
def test_a_real_fall_is_never_held_and_trips_within_one_sample(rate_gib_s):
    """Simulate a steady fall sampled at the pace the decider asks for."""
    lines = GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=3.5, fall_rate_gib_s=None)
    d = GuardDecider(lines)
    start, t = 40.0, 0.0
    crossing_t = (start - 3.5) / rate_gib_s
    intervals = []
    for _ in range(100000):
        o = d.feed(t, g(start - rate_gib_s * t))
        assert not o.held
        if o.action is GuardAction.KILL:
            break
        intervals.append(o.next_interval)
        t += o.next_interval
    else:
        pytest.fail("never tripped")
    assert t <= crossing_t + MIN_INTERVAL  # at worst one fastest-pace sample late
    assert t >= crossing_t - 2 * MIN_INTERVAL or o.reason == "predicted"
    assert max(intervals) <= MAX_INTERVAL and min(intervals) >= MIN_INTERVAL
    assert intervals[-1] < intervals[0] or rate_gib_s > 16  # the pace quickens close to the line


def test_pace_adapts_to_headroom_and_fall_rate():
    d = GuardDecider(LINES)
    far = d.feed(0, g(60)).next_interval
    d2 = GuardDecider(LINES)
    near = d2.feed(0, g(6.5)).next_interval  # 0.5 GiB above term at 16 GiB/s: ~31 ms
    assert far == MAX_INTERVAL and near == pytest.approx(0.5 / 16, rel=0.01)
    d3 = GuardDecider(LINES)
    d3.feed(0, g(9.0))
    fast = d3.feed(0.01, g(8.5)).next_interval  # falling 50 GiB/s: faster than the assumed 16
    assert fast == pytest.approx(max(MIN_INTERVAL, 2.5 / 50), rel=0.05)
    below_all = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=None))
    assert below_all.feed(0, g(1)).next_interval == MIN_INTERVAL


def test_disarmed_never_acts_and_rearming_acts_on_the_next_sample():
    d = GuardDecider(LINES, armed=False)
    out = feed_all(d, [(0, 50), (0.1, 9), (0.2, 5), (0.3, 1)])
    assert {o.action for o in out} == {GuardAction.NONE}
    assert d.low_water == g(1)
    d.arm()
    assert d.feed(0.4, g(1)).action is GuardAction.KILL
    d.disarm()
    assert d.feed(0.5, g(0.5)).action is GuardAction.NONE


def test_lines_turned_off_do_not_act():
    d = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=None))
    assert {o.action for o in feed_all(d, [(0, 50), (0.1, 0.5), (0.2, 0.1)])} == {GuardAction.NONE}
    d = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=4, kill_below_gib=None, grace_s=1))
    out = feed_all(d, [(0, 5), (0.05, 3.9), (0.5, 0.1), (1.05, 0.1)])
    assert [o.action for o in out] == [GuardAction.NONE, GuardAction.TERM, GuardAction.NONE, GuardAction.KILL]
    assert out[-1].reason == "grace expired"


def test_already_below_at_the_first_sample_acts_at_once():
    d = GuardDecider(LINES)
    o = d.feed(0, g(2))
    assert o.action is GuardAction.KILL and not o.held


def test_after_kill_nothing_more():
    d = GuardDecider(LINES)
    feed_all(d, [(0, 20), (0.5, 3)])
    assert d.state == "killing"
    assert {o.action for o in feed_all(d, [(0.2, 1), (0.3, 0.5)])} == {GuardAction.NONE}
    assert d.low_water == g(0.5)


@pytest.mark.parametrize(
    ("phase", "slowest"),
    [
        ("loading_weights", 0.02),
        ("profiling", 0.02),
        ("kv_cache", 0.02),
        ("cuda_graphs", 0.02),
        ("prefill", 0.02),
        ("starting", MAX_INTERVAL),
        ("ready", STEADY_INTERVAL),
    ],
)
def test_the_pace_follows_the_phase(phase, slowest):
    d = GuardDecider(LINES)
    d.set_phase(phase)
    out = feed_all(d, [(0, 100), (0.5, 100), (1.0, 100)])  # lots of headroom, no fall
    assert out[-1].action is GuardAction.NONE and out[-1].next_interval == pytest.approx(slowest)


def test_at_rest_a_sample_a_second_but_never_slower_than_the_headroom_allows():
    d = GuardDecider(LINES)
    d.set_phase("ready")
    assert STEADY_INTERVAL == 1.0
    assert feed_all(d, [(0, 100), (1, 100)])[-1].next_interval == pytest.approx(1.0)
    # 12 GiB above the term line (the highest that acts): the gap a fall at WORST_RATE would close
    d = GuardDecider(LINES)
    d.set_phase("ready")
    assert feed_all(d, [(0, 18), (1, 18)])[-1].next_interval == pytest.approx(g(12) / WORST_RATE)


def test_at_rest_with_a_psi_trigger_the_pace_rests_longer_but_never_slower_than_the_headroom_allows():
    # Issue 25: where the kernel wakes the guard on a memory stall, far from the lines it rests 5 s.
    d = GuardDecider(LINES)
    d.set_phase("ready")
    d.kernel_wakes = True
    assert STEADY_EVENT_INTERVAL == 5.0
    assert feed_all(d, [(0, 100), (5, 100)])[-1].next_interval == pytest.approx(5.0)
    # 12 GiB above the term line: the gap a fall at WORST_RATE would close, as without the trigger
    d = GuardDecider(LINES)
    d.set_phase("ready")
    d.kernel_wakes = True
    assert feed_all(d, [(0, 18), (1, 18)])[-1].next_interval == pytest.approx(g(12) / WORST_RATE)
    # only at steady state: a busy phase keeps its own pace
    d.set_phase("loading_weights")
    assert feed_all(d, [(2, 100)])[-1].next_interval == pytest.approx(0.02)


@pytest.mark.parametrize("rate_gib_s", [16.0, 14.0, 4.0])
@pytest.mark.parametrize("start_after_s", [0.001, 0.7, 2.5, 4.999])
def test_a_fall_starting_while_the_guard_rests_is_stopped_before_the_kill_line(rate_gib_s, start_after_s):
    """From the 5 s rest pace (100 GiB free), a fall at up to WORST_RATE that starts at any moment
    between two samples: the guard, sampling when it planned, acts no later than MemAvailable
    reaches the kill line (a trip on the term line, or on a predicted crossing of the kill line;
    at exactly WORST_RATE the planned sample lands on the line itself, by design)."""
    d = GuardDecider(LINES)
    d.set_phase("ready")
    d.kernel_wakes = True
    first = d.feed(0.0, g(100))
    assert first.next_interval == pytest.approx(5.0)  # resting, as at rest before the fall
    t, start = 0.0, start_after_s

    def available(at: float) -> float:
        return 100 - rate_gib_s * max(0.0, at - start)

    decision = first
    while decision.action not in (GuardAction.TERM, GuardAction.KILL):  # a warning on the way
        t += max(decision.next_interval, MIN_INTERVAL)
        assert t < 60, "never acted"
        decision = d.feed(t, g(available(t)))
    assert available(t) >= LINES.kill_below_gib - 1e-9, (t, available(t), decision)


def test_near_a_line_the_pace_is_fast_whatever_the_phase():
    d = GuardDecider(LINES)
    d.set_phase("ready")
    assert feed_all(d, [(0, 6.5)])[-1].next_interval < 0.05


def test_a_fast_fall_sends_sigterm_before_the_term_line():
    d = GuardDecider(TRIGGERS)
    out = feed_all(d, [(0, 20), (0.1, 14), (0.3, 3.0)])  # 60 GiB/s
    # At 14 GiB the kill line is 0.2 s away at that rate: SIGTERM, then SIGKILL below the kill line.
    assert out[1].action is GuardAction.TERM and out[1].reason == "fall rate" and out[1].available > g(6)
    assert out[-1].action is GuardAction.KILL and out[-1].reason == "below kill line during grace"


def test_psi_full_trips_term_while_memavailable_still_looks_fine():
    d = GuardDecider(TRIGGERS)
    us = 0
    out = []
    for i in range(11):  # every task stalled 40 % of each second; MemAvailable reads 40 GiB
        out.append(d.feed(i * 0.1, g(40), us))
        us += 40_000
    assert [o.action for o in out[:5]] == [GuardAction.NONE] * 5  # less than half a window: no judgement
    tripped = next(o for o in out if o.action is not GuardAction.NONE)
    assert (
        tripped.action is GuardAction.TERM
        and tripped.reason == "psi full"
        and tripped.psi_full_pct == pytest.approx(40)
    )


def test_light_memory_pressure_does_not_trip():
    d = GuardDecider(TRIGGERS)
    out = [d.feed(i * 0.1, g(40), i * 5_000) for i in range(40)]  # 5 % stalled
    assert {o.action for o in out} == {GuardAction.NONE} and out[-1].psi_full_pct == pytest.approx(5)


def test_the_psi_and_fall_rate_triggers_can_be_turned_off():
    d = GuardDecider(GuardLines(psi_full_pct=None, fall_rate_gib_s=None))
    out = [d.feed(i * 0.1, g(40), i * 90_000) for i in range(20)]
    assert {o.action for o in out} == {GuardAction.NONE}
    d = GuardDecider(GuardLines(psi_full_pct=None, fall_rate_gib_s=None))
    assert feed_all(d, [(0, 20), (0.1, 14)])[-1].action is GuardAction.NONE


def test_a_vllm_start_falling_14_gib_s_that_stops_at_13_gib_is_left_alone():
    d = GuardDecider(GuardLines())  # the defaults, as on a Spark
    samples = [(i * 0.05, 34 - 14 * i * 0.05) for i in range(31)]  # 34 → 12.7 GiB in 1.5 s
    samples += [(1.5 + i * 0.05, 12.7) for i in range(1, 20)]
    actions = {o.action for o in feed_all(d, samples)}
    assert GuardAction.TERM not in actions and GuardAction.KILL not in actions


def test_set_lines_applies_from_the_next_sample():
    d = GuardDecider(LINES)
    assert d.feed(0.0, g(20)).action is GuardAction.NONE
    d.set_lines(GuardLines(warn_below_gib=30, term_below_gib=25, kill_below_gib=3.5))
    decision = d.feed(0.1, g(20))
    assert decision.action is GuardAction.TERM and decision.threshold == g(25)


def test_resolve_lines_lets_the_given_lines_win():
    lines, notes = resolve_lines({"kill_below_gib": 8}, GuardLines(), what="default")
    assert (lines.warn_below_gib, lines.term_below_gib, lines.kill_below_gib) == (10, None, 8)
    assert notes == ["the default term line (6 GiB) is turned off: it would be below your kill line (8 GiB)"]
    lines, notes = resolve_lines({"warn_below_gib": None}, GuardLines())
    assert lines.warn_below_gib is None and lines.term_below_gib == 6 and notes == []
    with pytest.raises(UserError, match="kill line 7 GiB is above the term line 5 GiB"):
        resolve_lines({"term_below_gib": 5, "kill_below_gib": 7}, GuardLines())
    with pytest.raises(UserError, match=r"from 0 to below 1048576 .*got inf"):
        resolve_lines({"kill_below_gib": float("inf")}, GuardLines())


def test_profile_lines_win_over_defaults():
    lines, notes = GuardSettings(lines={"kill_below_gib": 12.0, "grace_s": 2.0}).guard_lines_with_notes()
    assert (lines.warn_below_gib, lines.term_below_gib, lines.kill_below_gib, lines.grace_s) == (None, None, 12, 2)
    assert len(notes) == 2


def test_zero_in_a_profile_turns_the_new_triggers_off():
    d = GuardDecider(GuardLines(psi_full_pct=0, fall_rate_gib_s=0))
    out = [d.feed(i * 0.1, g(40 - 6 * i), i * 90_000) for i in range(5)]  # 60 GiB/s and 90 % stalled
    assert {o.action for o in out} <= {GuardAction.NONE, GuardAction.WARN}


def test_samples_further_apart_than_the_rate_window_still_carry_the_fall_rate():
    # At the steady-state pace (250 ms and more) the previous sample is older than the 0.25 s window:
    # the first sample of a fall must still know how fast memory is going.
    d = GuardDecider(LINES)
    out = feed_all(d, [(0.0, 40.0), (0.3, 37.0)])
    assert out[-1].rate == pytest.approx(-g(3.0) / 0.3)
    # and a fall that would cross the kill line before the next sample is caught on that sample
    d = GuardDecider(GuardLines(warn_below_gib=None, term_below_gib=None, kill_below_gib=3.5, fall_rate_gib_s=None))
    out = feed_all(d, [(0.0, 9.0), (0.3, 5.0)])
    assert out[-1].action is GuardAction.KILL and out[-1].reason == "predicted"


def test_an_engine_stall_with_a_fall_samples_faster_and_is_less_patient():
    """/metrics frozen with requests running, and MemAvailable falling: the guard's slowest pace
    drops to ALERT_INTERVAL, its grace to ALERT_GRACE_S, and the fall-rate trigger to half."""
    from sparktui.runtime.guard.guard import ALERT_GRACE_S, ALERT_INTERVAL, STEADY_INTERVAL

    d = GuardDecider(TRIGGERS)
    d.set_phase("ready")
    calm = feed_all(d, [(0.0, 60), (0.25, 60)])
    assert calm[-1].next_interval == STEADY_INTERVAL
    d.set_stalled(True)  # a stall alone (a long prefill, a client that went away): no change
    assert d.feed(0.5, g(60)).next_interval == STEADY_INTERVAL and d.grace() == 5
    d.set_stalled(False)
    falling = d.feed(0.75, g(59))  # a fall alone: no change either
    assert falling.next_interval == STEADY_INTERVAL
    d.set_stalled(True)
    alert = d.feed(1.0, g(58.9))
    assert d.alert and alert.next_interval == ALERT_INTERVAL and d.grace() == ALERT_GRACE_S
    # 5 GiB/s with the kill line 0.7 s away: below the 8 GiB/s trigger and beyond its 0.5 s look
    # ahead; on alert, above half the rate and within twice the look ahead: SIGTERM
    samples = [(0.0, 8.25), (0.25, 7.5)]
    stalled = GuardDecider(TRIGGERS)
    stalled.set_phase("ready")
    stalled.set_stalled(True)
    feed_all(stalled, samples)
    trip = stalled.feed(0.35, g(7.0))
    assert trip.action is GuardAction.TERM and trip.reason == "fall rate"
    moving = GuardDecider(TRIGGERS)
    moving.set_phase("ready")
    feed_all(moving, samples)
    assert moving.feed(0.35, g(7.0)).action is GuardAction.NONE  # the same fall with the engine moving
