"""The typed contract: state records and socket messages are checked, and say what is wrong."""

from __future__ import annotations

import json

import pytest

from sparktui.core.guard_lines import GuardLines
from sparktui.runtime.records import protocol as pr
from tests.support import FIXTURES
from tests.support.other_version import NEW_EVENT, NEW_FAILURE_KIND, NEW_KERNEL_EVENT, from_another_version


def record(**changes) -> dict:
    base = {
        "status": "running",
        "port": 8000,
        "supervisor": {"pid": 123, "start_time": 456},
        "guard": {"armed": True, "state": "watching", "lines": {"warn_below_gib": 10, "term_below_gib": 6}},
    }
    return base | changes


def test_a_state_record_round_trips_and_keeps_status_json_shape():
    state = pr.parse_state(json.dumps(record()), "x.json")
    data = state.to_dict()
    assert data["guard"]["armed"] is True
    assert data["guard"]["lines"] == {  # the lines it names; a line or trigger it does not name was not watched
        "warn_below_gib": 10.0,
        "term_below_gib": 6.0,
        "kill_below_gib": None,
        "grace_s": 5.0,
        "fall_rate_gib_s": None,
        "fall_lookahead_s": 0.5,
        "psi_full_pct": None,
    }
    again = pr.parse_state(state.to_json(), "x.json")
    assert again == state and "alive" not in json.loads(state.to_json())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[]", "expected a JSON object, got list"),
        ("{", "not JSON"),
        (json.dumps(record(port="eight")), "field port"),
        (json.dumps(record(supervisor=None)), "field supervisor"),
        (json.dumps({k: v for k, v in record().items() if k != "guard"}), "field guard"),
        (json.dumps(record(guard={"armed": "false", "lines": {}})), "field guard.armed"),
    ],
)
def test_a_wrong_shaped_state_file_is_named_with_its_field(text, expected):
    with pytest.raises(pr.ProtocolError, match=r"servers/8000\.json") as info:
        pr.parse_state(text, "servers/8000.json")
    assert expected in str(info.value) and "remove the file" in str(info.value)


def test_unknown_keys_from_other_versions_are_kept():
    state = pr.parse_state(json.dumps(record(autoscale={"replicas": 2})), "x")  # a section this version lacks
    assert state.to_dict()["autoscale"] == {"replicas": 2}


def test_the_watch_section_is_typed_and_a_confirmed_wedge_is_a_condition():
    wedged = {"wedge": {"state": "wedged", "since": 1796000000.0, "evidence": "probe: no token within 5 s"}}
    state = pr.parse_state(json.dumps(record(watch=wedged)), "x")
    assert state.watch is not None and state.watch.wedge.state == "wedged" and state.watch.wedge.probes == 0
    view = pr.condition_of(state)
    assert view.condition is pr.Condition.WEDGED and view.reason is not None and view.reason.startswith("since ")
    ended = pr.parse_state(json.dumps(record(status="exited", watch=wedged, exit={"reason": "wedged"})), "x")
    assert pr.condition_of(ended).condition is pr.Condition.FAILED and pr.condition_of(ended).kind == "wedged"


def test_guard_request_carries_armed_and_lines_separately():
    req = pr.parse_request(b'{"cmd": "guard", "lines": {"kill_below_gib": 8, "warn_below_gib": null}}')
    assert isinstance(req, pr.GuardRequest) and req.armed is None
    assert req.lines == {"kill_below_gib": 8.0, "warn_below_gib": None}
    req = pr.parse_request(b'{"cmd": "guard", "armed": false}')
    assert isinstance(req, pr.GuardRequest) and req.armed is False and req.lines is None


def test_a_status_request_is_a_metrics_reader_unless_it_says_otherwise():
    # An older client's plain {"cmd": "status"} still reads metrics; a lookup says metrics false.
    plain = pr.parse_request(b'{"cmd": "status"}')
    assert isinstance(plain, pr.StatusRequest) and plain.metrics is True
    lookup = pr.parse_request(b'{"cmd": "status", "metrics": false}')
    assert isinstance(lookup, pr.StatusRequest) and lookup.metrics is False


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b'{"cmd": "status", "metrics": "no"}', "field metrics"),
        (b'{"cmd": "guard", "armed": "false"}', "field armed: Input should be a valid boolean"),
        (b'{"cmd": "guard", "armed": 0}', "field armed"),
        (b'{"cmd": "guard", "lines": {"kill_below_gib": "8"}}', "field lines.kill_below_gib"),
        (b'{"cmd": "guard", "lines": {"kill_below_gib": -1}}', "greater than or equal to 0"),
        (
            b'{"cmd": "guard", "lines": {"kill": 3}}',
            "field lines.kill: Input should be 'warn_below_gib', 'term_below_gib' or 'kill_below_gib'",
        ),
        (b'{"cmd": "stop", "wait": "soon"}', "field wait"),
        (b"[1, 2]", "expected a JSON object"),
        (b'"status"', "expected a JSON object"),
        (b"{nope", "not JSON"),
        (b'{"cmd": "reboot"}', "unknown command 'reboot'"),
    ],
)
def test_bad_requests_say_what_is_wrong(message, expected):
    with pytest.raises(pr.ProtocolError) as info:
        pr.parse_request(message)
    assert expected in str(info.value)


def test_infinite_lines_are_refused():
    with pytest.raises(pr.ProtocolError, match="finite"):
        pr.parse_request(b'{"cmd": "guard", "lines": {"term_below_gib": 1e999}}')


def test_condition_vocabulary():
    def cond(**changes):
        return pr.condition_of(pr.StateRecord.model_validate(record(**changes)))

    assert cond(status="running").condition is pr.Condition.READY
    assert cond(status="starting", phase="loading_weights").text() == "starting (loading weights)"
    lost = cond(status="lost", lost_reason="supervisor pid 1 died")
    assert lost.condition is pr.Condition.LOST and lost.reason == "supervisor pid 1 died"
    failed = cond(status="exited", exit={"reason": "failed", "failure": {"kind": "free_memory"}})
    assert failed.condition is pr.Condition.FAILED and failed.kind == "free_memory"
    assert cond(status="exited", exit={"reason": "guard"}).kind == "guard"
    assert cond(status="exited", exit={"reason": "exited", "returncode": 2}).kind == "exit_2"
    assert cond(status="exited", exit={"reason": "killed"}).condition is pr.Condition.STOPPED
    assert cond(status="exited", exit={"reason": "supervisor_died"}).condition is pr.Condition.LOST


def test_the_records_parts_are_typed_and_a_file_written_before_they_were_reads_the_same():
    # summary, events, trip and metrics as earlier versions wrote them (dicts), with a key a newer
    # version added: read into typed parts, and written back with nothing lost
    older = record(
        summary={"version": "0.32.0", "model": "m", "max_model_len": 4096, "weights_gib": 1.5,
                    "available_kv_gib": 10.0, "kv_cache_tokens": 81920, "max_concurrency": 20.0, "ready": True,
                    "failure": {"kind": "oom", "message": "out of memory", "hint": None}},
        events=[{"kind": "KVCacheSize", "t": 1.0, "tokens": 81920, "device": "GPU"},
                   {"kind": "GuardTrip", "t": 2.0, "line": "term", "reason": "below", "available_gib": 3.2}],
        trip={"line": "term", "reason": "below", "threshold_gib": 4.0, "mem_available_gib": 3.2,
                 "low_water_gib": 3.0, "fall_rate_gib_s": 0.5, "last_samples": [[-0.1, 3.5]],
                 "signalled": [{"target": "group", "signal": "SIGTERM", "at_s": 0.0}], "escalated": False,
                 "escalation": None, "gone": True, "gone_after_s": 0.4, "shm_removed": [], "tripped_at": 5.0,
                 "survivors": [], "leaked_gib": 1.25},
        metrics={"kv_cache_usage_pct": 12.5, "running": 2.0, "waiting": 0.0, "ttft_window": "interval",
                    "at": 9.0},
    )  # fmt: skip
    parsed = pr.parse_state(json.dumps(older), "servers/8000.json")
    assert parsed.summary is not None and parsed.summary.kv_cache_tokens == 81920
    assert parsed.summary.failure is not None and parsed.summary.failure.kind == "oom"
    assert [e.kind for e in parsed.events] == ["KVCacheSize", "GuardTrip"]
    assert parsed.events[0].field("tokens") == 81920 and parsed.events[1].field("line") == "term"
    assert parsed.trip is not None and parsed.trip.line == "term" and parsed.trip.gone_after_s == 0.4
    assert parsed.metrics is not None and parsed.metrics.running == 2.0 and parsed.metrics.error is None
    again = json.loads(parsed.to_json())
    for part in ("summary", "events", "trip", "metrics"):
        assert again[part] == {**older, **again}[part]
        for key, value in older[part].items() if isinstance(older[part], dict) else []:
            assert again[part][key] == value  # the newer version's leaked_gib too


STATE_FIXTURES = FIXTURES / "state"  # written by the supervisor before the guard lines and the exit were typed


@pytest.mark.parametrize("name", ["crash-loop.json", "stopped.json"])
def test_a_state_file_written_before_reads_back_the_same(name):
    text = (STATE_FIXTURES / name).read_text()
    state = pr.parse_state(text, name)
    assert state.to_json() == text  # byte for byte: the file format is unchanged
    assert isinstance(state.guard.lines, GuardLines)  # the guard's own model, end to end


def test_the_exit_records_parts_are_typed():
    crash = pr.parse_state((STATE_FIXTURES / "crash-loop.json").read_text(), "crash-loop.json")
    assert crash.exit is not None and crash.exit.failure is not None and crash.exit.failure.kind == "free_memory"
    breaker = crash.exit.breaker
    assert breaker is not None and breaker.reason is not None and breaker.reason.startswith("crash loop: 2 failures")
    assert [f.kind for f in breaker.failures] == ["crash", "crash"]
    assert crash.watch is not None and crash.watch.breaker == breaker
    assert crash.guard.lines == GuardLines(warn_below_gib=12, term_below_gib=8, kill_below_gib=2.5)
    fit = crash.preflight.fit
    assert fit is not None and fit.kv_cache_tokens > 0 and fit.verdict in ("fits", "tight")
    stopped = pr.parse_state((STATE_FIXTURES / "stopped.json").read_text(), "stopped.json")
    assert stopped.exit is not None and stopped.exit.reason == "stopped"
    stop = stopped.exit.stop
    assert stop is not None and stop.gone and stop.signals and stop.signals[0].signal == "SIGTERM"


def test_guard_lines_out_of_order_in_a_state_file_are_named():
    bad = record(guard={"armed": True, "lines": {"warn_below_gib": 2, "kill_below_gib": 5}})
    with pytest.raises(pr.ProtocolError, match=r"x\.json: guard lines out of order.*remove the file"):
        pr.parse_state(json.dumps(bad), "x.json")


def test_kernel_events_trip_signals_and_restarts_are_typed_and_written_as_before():
    # as a supervisor wrote them (KernelEvent.to_dict leaves out what an event lacks)
    events = [
        {"kind": "no_memory", "line": "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory", "usec": 12},
        {"kind": "xid", "line": "NVRM: Xid (PCI:0000:01:00): 31, pid=1234, name=python3", "xid": 31, "pid": 1234,
         "name": "python3"},
    ]  # fmt: skip
    older = record(
        guard={"armed": True, "lines": {}, "kernel": {"mode": "stop", "source": "kmsg", "events": events}},
        trip={"line": "kill", "reason": "below", "threshold_gib": 3.5, "mem_available_gib": 3.2, "low_water_gib": 3.0,
              "fall_rate_gib_s": 0.5, "signalled": [{"target": "group 77", "signal": "SIGKILL", "at_s": 0.001}]},
        watch={"restarts": [{"at": 5.0, "kind": "crash", "phase": "profiling", "detail": "exit status 1"}]},
    )  # fmt: skip
    state = pr.parse_state(json.dumps(older), "x.json")
    kernel = state.guard.kernel
    assert kernel is not None and [e.kind for e in kernel.events] == ["no_memory", "xid"]
    assert (kernel.events[1].xid, kernel.events[1].pid) == (31, 1234) and kernel.events[0].xid is None
    assert state.trip is not None and state.trip.signalled[0].signal == "SIGKILL"
    assert state.watch is not None and state.watch.restarts[0].phase == "profiling"
    again = json.loads(state.to_json())
    assert again["guard"]["kernel"]["events"] == events  # no null for what an event lacks
    assert again["trip"]["signalled"] == older["trip"]["signalled"]
    assert again["watch"]["restarts"] == older["watch"]["restarts"]


def test_a_live_reply_that_leaves_out_a_trigger_turned_off_reads_it_as_off():
    # a reply is sent with exclude_none: the fall-rate trigger turned off is left out, and must not
    # read back as the guard's default 8 GiB/s (status --json printed what the guard did not watch)
    off = pr.GuardRecord(armed=True, lines=GuardLines(warn_below_gib=None, fall_rate_gib_s=None))
    state = pr.StateRecord(status="running", port=8000, supervisor=pr.ProcessRef(pid=1), guard=off)
    reply = pr.parse_reply(pr.Reply(ok=True, state=state).to_line(), "reply")
    assert reply.state is not None and reply.state.guard.lines == off.lines


def test_a_state_file_from_another_version_reads_and_keeps_what_this_one_does_not_know():
    # Issue 24: a kernel event kind, a failure kind, an event kind, a guard state, a kernel mode, a
    # leak holder kind this version does not know, and a key in guard.lines it does not have
    newer = from_another_version(json.loads((STATE_FIXTURES / "crash-loop.json").read_text()))
    state = pr.parse_state(json.dumps(newer, indent=1), "newer.json")
    kernel = state.guard.kernel
    assert kernel is not None and kernel.events[-1].kind == NEW_KERNEL_EVENT["kind"] and kernel.mode == "notify"
    assert state.exit is not None and state.exit.failure is not None and state.exit.failure.kind == NEW_FAILURE_KIND
    assert pr.condition_of(state).text() == f"failed ({NEW_FAILURE_KIND})"
    assert state.events[-1].kind == NEW_EVENT["kind"] and state.events[-1].field("swapped_gib") == 3.25
    assert state.guard.state == "throttling" and state.guard.lines == GuardLines(12, 8, 2.5)
    assert json.loads(state.to_json()) == newer  # nothing dropped, nothing added: written back as read


def test_an_untrusted_state_file_is_told_to_be_removed_once(tmp_path):
    # a record others may write said "… remove it if it is not yours; remove it"
    path = tmp_path / "18725.json"
    path.write_text("{}")
    path.chmod(0o666)
    with pytest.raises(pr.ProtocolError) as exc:
        pr.read_state_file(path)
    said = str(exc.value)
    assert "writable by other users" in said and said.count("remove it") == 1, said


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777])
def test_a_state_record_in_a_folder_others_may_write_in_is_not_read(tmp_path, mode):
    # the reaper, the panel and the route read records too: one others could have put there is not one of them
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o700)
    path = folder / "8000.json"
    path.write_text(json.dumps(record()))
    path.chmod(0o600)
    assert pr.read_state_file(path) is not None  # 0700: read
    folder.chmod(mode)
    with pytest.raises(pr.ProtocolError) as exc:
        pr.read_state_file(path)
    said = str(exc.value)
    assert said.startswith(f"{folder}: writable by other users (mode {mode:04o}"), said
    assert f"chmod 700 {folder}" in said, said
    assert "remove it" not in said, said  # the folder is what to fix, not the file
