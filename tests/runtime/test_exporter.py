"""runtime.exporter without processes: the families it always describes, HOST:PORT parsing, and
the Grafana dashboard in docs/ asking only for families it serves."""

from __future__ import annotations

import json
import re

import pytest

from sparktui.errors import UserError
from sparktui.runtime import exporter
from tests.support import REPO

MEMINFO = "MemTotal:       127535772 kB\nMemFree:        100000000 kB\nMemAvailable:   110000000 kB\n"


def served_names() -> set[str]:
    names = set()
    for family in exporter.families([], MEMINFO, 0.0):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_dashboard_asks_only_for_served_families() -> None:
    dashboard = json.loads((REPO / "docs" / "grafana-sparktui.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    asked = {name for expr in exprs for name in re.findall(r"sparktui_[a-z_]+", expr)}
    assert asked == served_names(), asked ^ served_names()  # every family, and only those


def test_machine_figures_come_from_meminfo() -> None:
    by_name = {f.name: f.samples for f in exporter.families([], MEMINFO, 0.0)}
    assert by_name["sparktui_mem_available_bytes"][0].value == 110000000 * 1024
    assert by_name["sparktui_mem_total_bytes"][0].value == 127535772 * 1024


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:80", ("::1", 80))])
def test_listen(text: str, expected: tuple[str, int]) -> None:
    assert exporter.parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9464", "host:", ":80", "127.0.0.1:0", "127.0.0.1:70000", "a b:1"])
def test_bad_listen(text: str) -> None:
    with pytest.raises(UserError, match="HOST:PORT"):
        exporter.parse_listen(text)


def guard_state(*, last_at: float, sample_age_s: float | None):
    from sparktui.core.guard_lines import GuardLines
    from sparktui.runtime.records import protocol as pr

    guard = pr.GuardRecord(
        armed=True,
        state="watching",
        lines=GuardLines(),
        last=pr.GuardLast(action="none", available_gib=100.0, rate_gib_s=0.0, interval_s=1.0, at=last_at),
    )
    guard.sample_age_s = sample_age_s
    state = pr.StateRecord(
        status="running", port=8000, profile="p", supervisor=pr.ProcessRef(pid=1, start_time=1), guard=guard
    )
    state.alive = True
    return state


def age_of(state, now: float) -> float:
    by_name = {f.name: f.samples for f in exporter.families([state], MEMINFO, now)}
    return by_name["sparktui_guard_last_sample_age_seconds"][0].value


def test_the_guard_sample_age_is_the_guards_own_not_the_age_of_its_line_in_the_record() -> None:
    # At rest the record's guard line is rewritten only when memory moves (issue 25): its time is
    # an hour old while the guard sampled half a second ago (heartbeat / live answer).
    assert age_of(guard_state(last_at=1000.0, sample_age_s=0.5), now=4600.0) == 0.5
    # a record read without either (an old supervisor) still gives the line's age
    assert age_of(guard_state(last_at=1000.0, sample_age_s=None), now=1010.0) == 10.0
