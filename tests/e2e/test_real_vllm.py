"""End to end against a real vLLM (CPU build 0.32.0) on a tiny local Llama.

Needs SPARKTUI_TEST_VLLM=<venv>/bin/vllm (`.ci/setup-vllm` prints it; `.ci/run` exports it).
Skipped without it — except under CI=true, where a missing vLLM is a failure, not a skip.
About a minute per test and 2 GB of RAM on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from sparktui.core.metrics import GENERATION_TOKENS, kv_cache_usage_pct, parse_metrics
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from sparktui.runtime.watch import EngineCounters, probe_completion, read_ring
from tests.support import REPO, free_port, sweep_recorded_servers, wait_for
from tests.support.shm_watch import ShmWatch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VLLM = os.environ.get("SPARKTUI_TEST_VLLM", "")
SERVE_FLAGS = ["--enforce-eager", "--kv-cache-memory-bytes", "64M", "--max-model-len", "512"]
STARTUP_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def vllm() -> Path:
    if not VLLM:
        message = "SPARKTUI_TEST_VLLM is not set: run `.ci/setup-vllm` and export the path it prints"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the real-vLLM e2e tests must run. {message}")
        pytest.skip(message)
    path = Path(VLLM)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"SPARKTUI_TEST_VLLM={VLLM}: not an executable file")
    return path


@pytest.fixture(scope="module")
def workdir():
    # Not pytest's tmp_path: another pytest run on the machine rotates those away, and vLLM
    # would lose its model folder mid-start.
    path = Path(tempfile.mkdtemp(prefix="sparktui-e2e-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def tiny_model(vllm, workdir) -> Path:
    out = workdir / "tiny-llama"
    python = vllm.parent / "python"
    done = subprocess.run(
        [str(python), str(REPO / "tests" / "e2e" / "make_tiny_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["head_dim"] >= 32
    return out


@pytest.fixture
def run_dir(workdir, request) -> Path:
    path = workdir / request.node.name
    path.mkdir()
    return path


@pytest.fixture
def env(run_dir, monkeypatch):
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(run_dir / "state"))
    return {**os.environ, "SPARKTUI_STATE_DIR": str(run_dir / "state")}


@pytest.fixture
def profile(run_dir, vllm, tiny_model) -> Path:
    path = run_dir / "tiny.toml"
    # gpu-memory-utilization: the CPU backend ignores it once --kv-cache-memory-bytes is given, but
    # sparktui's fit preflight models a GPU's start-up check, which 0.9 of this small machine fails.
    path.write_text(
        f'[serve]\nmodel = "{tiny_model}"\nport = {free_port()}\ngpu-memory-utilization = 0.5\n\n'
        f'[machine]\nname = "auto"\n\n[runner]\nexecutable = "{vllm}"\n'
    )
    return path


@pytest.fixture
def leftovers():
    """Sweep by identity whatever a failing test leaves running."""
    yield
    sweep_recorded_servers()


def sparktui(*args, env, **kw):
    return [sys.executable, "-m", "sparktui", *args], dict(env=env, cwd=REPO, **kw)


def ready_state(port: int) -> dict:
    def ready():
        record = st.read_state(st.state_path(port))
        s = record.to_dict() if record else None
        if s and s.get("status") == "exited":
            lines = Path(s["log_path"]).read_text().splitlines()
            first = next((i for i, line in enumerate(lines) if "Traceback" in line), max(0, len(lines) - 30))
            raise AssertionError(
                f"vLLM exited during start-up: {s.get('exit')}\n" + "\n".join(lines[first : first + 40])
            )
        return s if s and s.get("status") == "running" and s.get("metrics") else None

    return wait_for(ready, STARTUP_TIMEOUT_S, "real vLLM to be ready", interval=0.5)


def members(state):
    return [proc.ProcessIdentity(p, t) for p, t in state["tree"]["members"]]


def titles(state) -> dict[int, str]:
    out = {}
    for ident in members(state):
        try:
            out[ident.pid] = Path(f"/proc/{ident.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            pass
    return out


def shm_of(state) -> set[str]:
    """/dev/shm files the tree's processes map or hold open."""
    found = set()
    for ident in members(state):
        for source in (f"/proc/{ident.pid}/maps",):
            try:
                found |= {m.group(0) for m in re.finditer(r"/dev/shm/\S+", Path(source).read_text())}
            except OSError:
                pass
        try:
            for fd in os.listdir(f"/proc/{ident.pid}/fd"):
                target = os.readlink(f"/proc/{ident.pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    found.add(target)
        except OSError:
            pass
    return found


def assert_nothing_left(state, held: set[str], watch: ShmWatch):
    alive = [(i.pid, titles(state).get(i.pid)) for i in members(state) if i.is_alive()]
    assert not alive, f"processes of the tree still alive: {alive}"
    assert not [p for p in held if os.path.exists(p)], "/dev/shm files the tree held are still there"
    # every file this test's processes held (shm_of saw some, at one moment), no other run's:
    # sparktui must have removed them (the autouse check after the test only cleans up)
    watch.look()
    left = sorted(watch.leftovers().values())
    assert not left, f"vLLM left files in /dev/shm: {left}"


def check_running_server(state):
    """The parsed log, /metrics, and a real completion."""
    kv = [e for e in state["events"] if e["kind"] == "KVCacheSize"]
    assert kv and kv[0]["device"] == "CPU" and kv[0]["tokens"] > 0, state["events"]
    assert state["summary"]["kv_cache_tokens"] == kv[0]["tokens"]
    assert state["summary"]["version"].startswith("0.32.0") and state["summary"]["max_model_len"] == 512
    assert "VLLM::EngineCore" in titles(state).values()

    base = f"http://127.0.0.1:{state['port']}"
    before = parse_metrics(httpx.get(f"{base}/metrics", timeout=10).text, time.monotonic())
    reply = httpx.post(
        f"{base}/v1/completions", timeout=60, json={"model": state["model"], "prompt": "Hello world", "max_tokens": 8}
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["usage"]["completion_tokens"] == 8 and isinstance(body["choices"][0]["text"], str)
    after = parse_metrics(httpx.get(f"{base}/metrics", timeout=10).text, time.monotonic())
    assert after.total(GENERATION_TOKENS) - before.total(GENERATION_TOKENS) == 8
    assert kv_cache_usage_pct(after) is not None
    # What the wedge detector reads, from the real counters: the request got its first token and
    # finished, and the TTFT count less the finished requests is what is still decoding (none).
    c0, c1 = EngineCounters.from_snapshot(before), EngineCounters.from_snapshot(after)
    assert (c1.first_tokens - c0.first_tokens, c1.finished - c0.finished) == (1, 1)
    assert c1.prompt_tokens - c0.prompt_tokens == body["usage"]["prompt_tokens"]
    assert c1.running == 0 and c1.decoding == 0 and c1.prefilling == 0
    # The wedge probe's request is one real vLLM answers (model name from /v1/models).
    probe = probe_completion(base, None, "not-the-served-name", timeout=60)
    assert probe.answered, probe.detail


def test_real_vllm_serve_use_and_stop(profile, env, leftovers, no_shm_leftovers):
    port = int(re.search(r"port = (\d+)", profile.read_text()).group(1))
    argv, kw = sparktui("serve", str(profile), *SERVE_FLAGS, env=env)
    sup = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        state = ready_state(port)
        assert state["argv"][0] == VLLM
        assert state["argv"][1:3] == ["serve", state["model"]] and "--kv-cache-memory-bytes" in state["argv"]
        check_running_server(state)
        state = st.read_state(st.state_path(port)).to_dict()
        assert state["watch"]["wedge"]["state"] in ("idle", "ok") and state["watch"]["wedge"]["probes"] == 0
        ring = Path(state["watch"]["flight_recorder"])
        # One record a second: the last may predate the phase the state file already says.
        records = wait_for(lambda: (r := read_ring(ring)) and r[-1].phase == "ready" and r, 10, what="a ready record")
        assert records[-1].tree_rss and records[-1].tree_rss > 0
        held = shm_of(state)
        sup.send_signal(signal.SIGTERM)  # what systemd does
        assert sup.wait(60) == 0, sup.stderr.read()[-3000:]
    finally:
        if sup.poll() is None:
            sup.kill()
    final = st.read_state(st.state_path(port)).to_dict()
    assert final["exit"]["reason"] == "stopped" and final["exit"]["stop"]["gone"]
    assert_nothing_left(final, held, no_shm_leftovers)


def test_real_vllm_killed_while_engine_core_lives(profile, env, leftovers, no_shm_leftovers):
    port = int(re.search(r"port = (\d+)", profile.read_text()).group(1))
    argv, kw = sparktui("serve", str(profile), *SERVE_FLAGS, "--detach", env=env)
    started = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
    assert started.returncode == 0, started.stderr
    state = ready_state(port)
    state = st.read_state(st.state_path(port)).to_dict()
    engine = next(pid for pid, title in titles(state).items() if title == "VLLM::EngineCore")
    held = shm_of(state)
    assert held, "a running vLLM holds shared memory in /dev/shm"
    argv, kw = sparktui("kill", "--port", str(port), env=env)
    killed = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
    assert killed.returncode == 0, killed.stderr
    final = st.read_state(st.state_path(port)).to_dict()
    assert final["exit"]["reason"] == "killed" and final["exit"]["stop"]["signals"][0]["signal"] == "SIGKILL"
    info = proc.read_stat(engine)
    assert info is None or info.dead
    assert_nothing_left(final, held, no_shm_leftovers)
