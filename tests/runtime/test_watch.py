"""watch.py's pure parts fed numbers (wedge detector, breaker, post-mortem verdicts), and the
flight recorder and page cache on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.metrics import parse_metrics
from sparktui.core.units import GiB
from sparktui.runtime import watch as w
from sparktui.runtime.watch import (
    BreakerFailure,
    CrashLoopBreaker,
    EngineCounters,
    FlightHeader,
    FlightRecord,
    FlightRecorder,
    KernelLog,
    Verdict,
    WedgeDetector,
    WedgeState,
)
from tests.support import REPO


def counters(t, running=1, gen=0, prompt=0, first=1, finished=0, kv=0.1):
    return EngineCounters(t, running, 0, gen, prompt, first, finished, kv)


# ---------------------------------------------------------------- wedge detector


def test_decoding_requests_without_new_tokens_become_suspect_after_wedge_after_s():
    d = WedgeDetector(wedge_after_s=30)
    assert d.observe(counters(0, gen=10)).state is WedgeState.OK
    assert d.observe(counters(2, gen=20)).state is WedgeState.OK
    assert d.observe(counters(31, gen=20)).state is WedgeState.OK  # 29 s without a token
    view = d.observe(counters(32.5, gen=20))
    assert view.state is WedgeState.SUSPECT and view.stalled_s == pytest.approx(30.5)
    d.confirm(33, "probe: no token within 5 s")
    assert d.observe(counters(34, gen=20)).state is WedgeState.WEDGED
    assert d.observe(counters(36, gen=21)).state is WedgeState.OK  # it moves again
    assert not d.wedged


def test_an_idle_server_is_never_suspect():
    d = WedgeDetector(wedge_after_s=5)
    for t in range(0, 100, 2):
        assert d.observe(counters(t, running=0, gen=7, first=3, finished=3)).state is WedgeState.IDLE


def test_a_long_prefill_is_not_a_wedge_kv_usage_moves_chunk_by_chunk():
    # vLLM 0.32 counts prompt tokens and the first token only when a prefill ends: during it,
    # only the KV-cache usage grows as chunks are scheduled.
    d = WedgeDetector(wedge_after_s=5)
    for i in range(60):
        view = d.observe(counters(i * 2, gen=100, prompt=50, first=4, finished=4, kv=0.01 * i))
        assert view.state is WedgeState.OK and view.prefilling == 1 and view.decoding == 0


def test_one_unchunked_prefill_gets_the_longer_prefill_allowance():
    d = WedgeDetector(wedge_after_s=5, prefill_after_s=120)
    for t in range(0, 120, 2):
        view = d.observe(counters(t, gen=100, first=4, finished=4, kv=0.5))
        assert view.state in (WedgeState.OK, WedgeState.PREFILLING), t
    assert d.observe(counters(121, gen=100, first=4, finished=4, kv=0.5)).state is WedgeState.SUSPECT


def test_a_stalled_decode_beside_a_prefill_is_still_suspect():
    d = WedgeDetector(wedge_after_s=5)
    d.observe(counters(0, running=2, gen=10, first=5, finished=4, kv=0.2))
    view = d.observe(counters(6, running=2, gen=10, first=5, finished=4, kv=0.2))
    assert view.state is WedgeState.SUSPECT and view.decoding == 1 and view.prefilling == 1


def test_an_answered_probe_clears_the_suspicion_for_another_period():
    d = WedgeDetector(wedge_after_s=5)
    d.observe(counters(0, gen=10))
    assert d.observe(counters(6, gen=10)).state is WedgeState.SUSPECT
    d.probe_answered(7)
    assert d.observe(counters(8, gen=10)).state is WedgeState.OK
    assert d.observe(counters(12.5, gen=10)).state is WedgeState.SUSPECT


def test_engine_counters_from_real_vllm_metrics(fixtures):
    text = (fixtures / "vllm-cpu" / "metrics_after_requests.txt").read_text()
    c = EngineCounters.from_snapshot(parse_metrics(text, time=5.0))
    assert (c.running, c.generation_tokens, c.prompt_tokens) == (0.0, 24.0, 15.0)
    assert (c.first_tokens, c.finished, c.kv_usage) == (2.0, 2.0, 0.0)
    assert c.decoding == 0 and c.prefilling == 0


# ---------------------------------------------------------------- breaker


def test_the_breaker_stops_at_n_failures_in_one_phase_within_the_window():
    b = CrashLoopBreaker(max_failures=3, window_s=600)
    assert b.record(BreakerFailure(0, "loading_weights", "crash", "x")).restart
    assert b.record(BreakerFailure(10, "profiling", "crash", "y")).restart  # another phase: counted apart
    assert b.record(BreakerFailure(20, "loading_weights", "crash", "x")).restart
    verdict = b.record(BreakerFailure(30, "loading_weights", "crash", "x"))
    assert not verdict.restart and len(verdict.failures) == 3
    assert verdict.reason == "crash loop: 3 failures in phase loading_weights within 10 min; not restarting again"


def test_failures_outside_the_window_do_not_count():
    b = CrashLoopBreaker(max_failures=3, window_s=600)
    for t in (0, 400, 800, 1200, 1600):
        assert b.record(BreakerFailure(t, "ready", "wedge", "probe")).restart


# ---------------------------------------------------------------- flight recorder


def record(seq, t, avail_gib, phase="loading_weights", **kw):
    return FlightRecord(
        seq=seq,
        t=t,
        avail=int(avail_gib * GiB),
        total=int(121.7 * GiB),
        psi_some=None,
        psi_full=None,
        phase=phase,
        status="starting",
        tree_rss=int(2 * GiB),
        **kw,
    )


def header(port=8000, boot="boot-a", **kw):
    return FlightHeader(port=port, profile="big", model="/m", boot_id=boot, started_at=1000.0, supervisor_pid=1, **kw)


def test_the_ring_never_grows_and_keeps_the_newest_records(tmp_path):
    h = header(slots=10)
    rec = FlightRecorder(tmp_path, h)
    rec.open()
    for i in range(25):
        rec.append(record(rec.next_seq(), 1000.0 + i, 30 - i, log=["x" * 500] * 5), now=float(i))
    rec.close(clean=False)
    assert rec.ring_path.stat().st_size == 10 * w.SLOT_BYTES
    records = w.read_ring(rec.ring_path)
    assert [r.seq for r in records] == list(range(16, 26))
    assert all(len(r.log) >= 1 and all(len(line) <= w.LOG_LINE_CHARS for line in r.log) for r in records)
    assert json.loads(rec.header_path.read_text())["clean_stop"] is False


def test_a_torn_slot_is_skipped(tmp_path):
    rec = FlightRecorder(tmp_path, header(slots=4))
    rec.open()
    for i in range(3):
        rec.append(record(rec.next_seq(), 1000.0 + i, 20))
    rec.close(clean=True)
    data = bytearray(rec.ring_path.read_bytes())
    data[w.SLOT_BYTES + 5 : w.SLOT_BYTES + 40] = b"\0" * 35  # slot 1 half-written when power went
    rec.ring_path.write_bytes(bytes(data))
    assert [r.seq for r in w.read_ring(rec.ring_path)] == [2, 3]


# ---------------------------------------------------------------- post-mortem


def trajectory(fixtures: Path) -> list[FlightRecord]:
    """The recorded trajectory in tests/fixtures/flight (see its SOURCES.md)."""
    rows = json.loads((fixtures / "flight" / "loading_collapse.json").read_text())
    return [FlightRecord.from_dict(r) for r in rows]


def write_flight(state_dir: Path, records: list[FlightRecord], boot: str, port: int = 8000) -> Path:
    folder = w.flight_dir(state_dir)
    rec = FlightRecorder(folder, header(port=port, boot=boot))
    rec.open()
    for r in records:
        rec.append(r)
    rec.close(clean=False)  # the power went: no clean stop
    return folder


def no_kernel() -> KernelLog:
    return KernelLog(
        False,
        [],
        "journalctl -k -b -1: Specifying boot ID or boot offset has no effect, no persistent journal was found.",
    )


def test_a_reboot_under_a_loading_server_gets_a_post_mortem_once(tmp_path, fixtures):
    records = trajectory(fixtures)
    write_flight(tmp_path, records, boot="boot-before")
    assert w.check_after_reboot(tmp_path, boot_id="boot-before", kernel=no_kernel) == []  # same boot: not a reboot
    kernel = KernelLog(
        True,
        w.kernel_lines(
            [
                "[ 812.1] NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=VLLM::EngineCore, Ch 00000008",
                "[ 812.5] systemd-journald[412]: Under memory pressure, flushing caches.",
                "[ 813.0] usb 1-1: new high-speed USB device",
            ]
        ),
    )
    found = w.check_after_reboot(tmp_path, boot_id="boot-after", kernel=lambda: kernel)
    assert len(found) == 1
    pm = found[0]
    assert pm.verdict is Verdict.MEM_LOADING and pm.phase == "loading_weights"
    assert pm.boot_id == "boot-before" and pm.records == len(records)
    assert pm.trajectory[-1][0] == 0.0 and all(ago <= 60 for ago, _, _ in pm.trajectory)
    assert pm.kernel.lines == ["[ 812.1] NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=VLLM::EngineCore, Ch 00000008"]
    text = pm.render()
    assert "verdict: memory exhausted while loading" in text and "NVRM: Xid" in text
    assert "Loading safetensors checkpoint shards" in text
    assert w.check_after_reboot(tmp_path, boot_id="boot-after", kernel=lambda: kernel) == []  # reported once
    assert w.saved_postmortems(tmp_path)[0]["verdict"] == "memory exhausted while loading"


def test_a_clean_stop_or_a_recorded_end_is_no_post_mortem(tmp_path, fixtures):
    rec = FlightRecorder(w.flight_dir(tmp_path), header(boot="b1"))
    rec.open()
    rec.append(record(1, 1000.0, 30))
    rec.close(clean=True)
    assert w.check_after_reboot(tmp_path, boot_id="b2", kernel=no_kernel) == []
    write_flight(tmp_path, trajectory(fixtures), boot="b1", port=8001)
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "8001.json").write_text(json.dumps({"status": "exited", "started_at": 1000.0}))
    assert w.check_after_reboot(tmp_path, boot_id="b2", kernel=no_kernel) == []  # the reaper recorded its end


@pytest.mark.parametrize("change", ["owner", "mode"])
def test_an_end_recorded_in_a_record_another_user_owns_or_may_write_is_not_believed(tmp_path, fixtures, capsys, change):
    # Such a record could say "exited" over a machine that went down: the post-mortem is reported all the same
    write_flight(tmp_path, trajectory(fixtures), boot="b1", port=8001)
    (tmp_path / "servers").mkdir(mode=0o700)
    path = tmp_path / "servers" / "8001.json"
    path.write_text(json.dumps({"status": "exited", "started_at": 1000.0}))
    if change == "owner":
        if os.getuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 65534, 65534)
    else:
        path.chmod(0o666)
    assert len(w.check_after_reboot(tmp_path, boot_id="b2", kernel=no_kernel)) == 1
    why = "owned by user id 65534" if change == "owner" else "writable by other users (mode 0666"
    err = capsys.readouterr().err
    assert f"{path}: {why}" in err and "not trusted" in err and "port 8001" in err, err


@pytest.mark.parametrize(
    ("phase", "extra", "verdict"),
    [
        ("profiling", {}, Verdict.MEM_PROFILING),
        ("cuda_graphs", {}, Verdict.MEM_PROFILING),
        ("ready", {"prefilling": 1.0, "running": 1.0}, Verdict.MEM_PREFILL),
        ("ready", {"prefilling": 0.0, "running": 8.0}, Verdict.MEM_SERVING),
    ],
)
def test_the_verdict_follows_the_phase_of_a_collapse(phase, extra, verdict):
    falls = [record(i, 1000.0 + i, max(1.5, 30 - 3 * i), phase=phase, **extra) for i in range(12)]
    pm = w.analyse(header(), falls, no_kernel())
    assert pm.verdict is verdict and "MemAvailable fell to 1.5 GiB" in pm.why


def test_a_fast_fall_caught_before_the_floor_still_counts_as_exhaustion():
    falls = [record(i, 1000.0 + i * 0.5, 40 - 6 * i, phase="profiling") for i in range(6)]  # 12 GiB/s, last 10 GiB
    assert w.analyse(header(), falls, no_kernel()).verdict is Verdict.MEM_PROFILING


def test_a_wedge_with_healthy_memory_and_an_unknown_end():
    wedged = [record(i, 1000.0 + i, 40, phase="ready", running=3.0, prefilling=0.0, wedge="wedged") for i in range(30)]
    assert w.analyse(header(), wedged, no_kernel()).verdict is Verdict.WEDGE
    calm = [record(i, 1000.0 + i, 40, phase="ready", running=1.0, wedge="ok") for i in range(30)]
    pm = w.analyse(header(), calm, no_kernel())
    assert pm.verdict is Verdict.UNKNOWN and "not readable" in pm.render()


@pytest.mark.slow  # starts a process
def test_every_command_reports_a_post_mortem_once_after_a_simulated_reboot(tmp_path, fixtures):
    state = tmp_path / "state"
    write_flight(state, trajectory(fixtures), boot="11111111-before")
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(state), "SPARKTUI_CONFIG_DIR": str(tmp_path / "config")}

    def sparktui(*args, boot):
        return subprocess.run(
            [sys.executable, "-m", "sparktui", *args],
            env={**env, w.BOOT_ID_ENV: boot},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert "post-mortem" not in sparktui("status", boot="11111111-before").stderr  # same boot
    first = sparktui("status", boot="22222222-after")
    assert first.returncode == 0 and "verdict: memory exhausted while loading" in first.stderr
    assert "kernel messages of that boot:" in first.stderr and "MemAvailable in the last minute" in first.stderr
    assert "post-mortem" not in sparktui("status", boot="22222222-after").stderr  # once
    again = sparktui("postmortem", boot="22222222-after")
    assert again.returncode == 0 and "verdict: memory exhausted while loading" in again.stdout
    as_json = json.loads(sparktui("postmortem", "--json", boot="22222222-after").stdout)
    assert as_json[0]["verdict"] == "memory exhausted while loading" and as_json[0]["phase"] == "loading_weights"


# ---------------------------------------------------------------- page cache


@pytest.mark.slow  # starts a process
def test_resident_bytes_and_eviction_agree_with_the_kernel(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    weights = folder / "model.safetensors"
    with open(weights, "wb") as f:
        f.write(os.urandom(1 << 20) * 64)  # 64 MiB
        f.flush()
        os.fsync(f.fileno())  # clean pages: DONTNEED only drops clean ones
    (folder / "config.json").write_text("{}")
    weights.read_bytes()
    assert w.resident_bytes(weights) >= 60 << 20
    assert int(fincore(weights)) >= 60 << 20
    report = w.model_page_cache(str(folder), evict=True)
    assert report.before >= 60 << 20 and report.freed >= 60 << 20 and report.after < 1 << 20
    assert int(fincore(weights)) < 1 << 20
    assert "evicted" in report.summary() and "without root" in report.summary()
    measured = w.model_page_cache(str(folder), evict=False)
    assert measured.before == report.after


def fincore(path: Path) -> str:
    return subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_model_that_is_not_a_local_folder_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    report = w.model_page_cache("nobody/no-such-model", evict=True)
    assert report.folder is None and report.files == [] and "not a local folder" in report.summary()
