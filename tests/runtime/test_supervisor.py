"""The supervisor against the stub vLLM: real processes, real signals, real sockets and /dev/shm."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sparktui.core.profiles import load_profile
from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.host.memory import read_memory
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client, launcher, supervisor, sweep
from sparktui.runtime.server import preflight as server_preflight
from tests.support import REPO, hog_mib, shm_held_by, wait_for

pytestmark = pytest.mark.slow  # spawns processes

# The stub serves a model folder that does not exist, so core.fit cannot size it.
NO_FIT = "fit check skipped: model folder /models/tiny does not exist; give the path of a folder that holds config.json"


@pytest.fixture
def cleanup():
    """Whatever a failed test leaves: supervisors by pid, trees by record (identity-checked)."""
    pids: list[int] = []
    yield pids
    for state in st.list_states() if os.environ.get("SPARKTUI_STATE_DIR") else []:
        if state.tree:
            proc.sweep_orphans(state.tree.as_proc_record())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sparktui(args, env, **kw):
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60, **kw
    )


def start_foreground(profile: Path, env, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sparktui", "serve", str(profile), *extra],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def port_of(profile: Path) -> int:
    return load_profile(profile).serve.port


def recorded(port: int) -> dict | None:
    """The state file of `port` as JSON data (what `status --json` prints), or None."""
    state = st.read_state(st.state_path(port))
    return None if state is None else state.to_dict()


def running_state(port: int, timeout=20) -> dict:
    return wait_for(
        lambda: (s := recorded(port)) and s.get("status") == "running" and s.get("metrics") and s,
        timeout,
        "the server to be running with metrics",
    )


def members(state) -> list[proc.ProcessIdentity]:
    return [proc.ProcessIdentity(p, t) for p, t in state["tree"]["members"]]


def engine_pid(state) -> int:
    for ident in members(state):
        try:
            if Path(f"/proc/{ident.pid}/cmdline").read_bytes().rstrip(b"\0") == b"VLLM::EngineCore":
                return ident.pid
        except OSError:
            pass
    raise AssertionError("no VLLM::EngineCore among the recorded members")


def gone(pid: int) -> bool:
    info = proc.read_stat(pid)
    return info is None or info.dead  # a zombie has released everything; PID 1 may reap it late


STUB_SEGMENTS = 2  # the stub's EngineCore and its Worker each hold one /dev/shm segment (stub.run_child)


def tree_shm(state) -> set[str]:
    """The /dev/shm files the tree's members hold, once both of the stub's segments are held: the
    EngineCore names its Worker as soon as it starts it, so the server can be running (and its
    record name the Worker) before the Worker has opened its segment; a snapshot taken then missed
    the Worker's file, which the sweep then rightly removed as the tree's (the "extra psm_*" flake)."""

    def held() -> set[str] | None:
        now = recorded(state["port"])
        files = set().union(*(shm_held_by(i.pid) for i in members(now)))
        return files if len(files) >= STUB_SEGMENTS else None

    return wait_for(held, 10, "the stub's two /dev/shm segments held")


def assert_all_gone(state, shm):
    alive = [i.pid for i in members(state) if i.is_alive()]
    assert not alive, f"processes of the tree still alive: {alive}"
    left = [p for p in shm if Path(p).exists()]
    assert not left, f"/dev/shm leftovers: {left}"


def test_foreground_launch_phases_ready_metrics_then_sigterm_stops_the_tree(make_profile, env, cleanup, fixtures):
    profile = make_profile()
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    state = running_state(port)
    assert state["phase"] == "ready" and state["summary"]["ready"] is True
    assert state["summary"]["kv_cache_tokens"] == 131072 and state["summary"]["max_concurrency"] == 256.0
    kinds = [e["kind"] for e in state["events"]]
    assert "KVCacheSize" in kinds and "StartupComplete" in kinds
    kv = next(e for e in state["events"] if e["kind"] == "KVCacheSize")
    assert kv["device"] == "CPU" and kv["tokens"] == 131072
    assert state["metrics"]["kv_cache_usage_pct"] == 0.0 and state["metrics"]["running"] == 0.0
    assert state["metrics"]["generation_tokens_total"] == 24.0  # the fixture's counter
    assert state["argv"][1:4] == ["serve", "/models/tiny", "--max-model-len"]
    assert "--enforce-eager" in state["argv"] and state["supervisor"]["pid"] == sup.pid
    log = Path(state["log_path"]).read_text()
    assert "CPU KV cache size: 131,072 tokens" in log
    assert Path(state["log_path"]).is_relative_to(Path(env["SPARKTUI_STATE_DIR"]))
    engine = engine_pid(state)
    shm = tree_shm(state)
    assert shm, "the stub's EngineCore and Worker hold /dev/shm segments"

    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 0, sup.stderr.read()
    progress = sup.stderr.read()
    assert "sparktui: phase: kv_cache" in progress and "sparktui: CPU KV cache: 131,072 tokens" in progress
    assert f"sparktui: ready: http://127.0.0.1:{port} answers /health" in progress
    final = recorded(port)
    assert final["status"] == "exited" and final["exit"]["reason"] == "stopped" and final["exit"]["by"] == "SIGTERM"
    assert final["exit"]["stop"]["gone"] is True and not final["exit"]["stop"]["escalated"]
    assert gone(engine)
    assert_all_gone(final, shm)
    assert not st.socket_path(port).exists()
    assert "[shutdown]" in Path(state["log_path"]).read_text()  # vLLM shut down cleanly on SIGTERM


def test_detach_status_and_stop_over_the_socket(make_profile, env, cleanup):
    profile = make_profile()
    port = port_of(profile)
    out = sparktui(["serve", str(profile), "--detach"], env)
    assert out.returncode == 0, out.stderr
    assert f"on http://127.0.0.1:{port}" in out.stdout
    state = running_state(port)
    cleanup.append(state["supervisor"]["pid"])
    # `status` is a snapshot: the way to follow is the log (issue 23, item 11), said with its path
    assert f"follow the log with `tail -f {state['log_path']}`" in out.stdout, out.stdout
    assert f"a snapshot with `sparktui status --port {port}`" in out.stdout, out.stdout
    # a new session: the caller's terminal going away does not touch it
    assert proc.read_stat(state["supervisor"]["pid"]).session == state["supervisor"]["pid"]
    root = Path(env["SPARKTUI_STATE_DIR"])
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert port in st.live_ports()  # the command socket: abstract, answered only for this user

    status = sparktui(["status", "--json"], env)
    assert status.returncode == 0, status.stderr
    listed = json.loads(status.stdout)
    assert [s["port"] for s in listed] == [port] and listed[0]["alive"] and listed[0]["phase"] == "ready"
    human = sparktui(["status"], env).stdout
    assert f"{port}" in human and "  ready  " in human and "kv 131,072 tokens" in human

    shm = tree_shm(state)
    stopped = sparktui(["stop", "--port", str(port)], env)
    assert stopped.returncode == 0, stopped.stderr
    assert "exited (stopped" in stopped.stdout
    final = recorded(port)
    assert final["exit"]["reason"] == "stopped" and final["exit"]["by"] == "socket"
    assert_all_gone(final, shm)
    wait_for(
        lambda: not proc.ProcessIdentity(state["supervisor"]["pid"], state["supervisor"]["start_time"]).is_alive(),
        what="the supervisor to exit",
    )
    assert "no server is running" in sparktui(["status"], env).stdout


def test_kill_through_the_python_api_removes_tree_and_shm_leftovers(make_profile, env, cleanup):
    profile = load_profile(make_profile())
    state = launcher.launch(profile).to_dict()
    cleanup.append(state["supervisor"]["pid"])
    state = running_state(profile.serve.port)
    assert client.read(profile.serve.port).to_dict()["alive"]
    assert client.attach().to_dict()["phase"] == "ready"
    shm = tree_shm(state)
    assert shm
    disarmed = client.set_guard(profile.serve.port, armed=False).to_dict()
    assert disarmed["guard"]["armed"] is False and disarmed["guard"]["state"] == "disarmed"
    assert client.set_guard(armed=True).to_dict()["guard"]["state"] == "watching"
    assert [e["kind"] for e in recorded(profile.serve.port)["events"]][-2:] == [
        "GuardDisarmed",
        "GuardArmed",
    ]
    final = client.kill(profile.serve.port).to_dict()
    assert final["exit"]["reason"] == "killed"
    report = final["exit"]["stop"]
    assert report["signals"][0]["signal"] == "SIGKILL" and report["gone"]
    assert sorted(report["shm_removed"]) == sorted(Path(p).name for p in shm)  # SIGKILL leaves them; swept
    assert_all_gone(final, shm)


def test_stop_escalates_to_sigkill_when_vllm_ignores_sigterm(make_profile, env, cleanup):
    profile = load_profile(make_profile(guard="grace-s = 0.5", STUB_VLLM_IGNORE_TERM="1"))
    state = launcher.launch(profile).to_dict()
    cleanup.append(state["supervisor"]["pid"])
    state = running_state(profile.serve.port)
    shm = tree_shm(state)
    final = client.stop(profile.serve.port).to_dict()
    report = final["exit"]["stop"]
    assert report["escalated"] is True and [s["signal"] for s in report["signals"]][:1] == ["SIGTERM"]
    assert "SIGKILL" in [s["signal"] for s in report["signals"]]
    assert_all_gone(final, shm)


def test_supervisor_killed_then_vllm_is_gone(make_profile, env, cleanup):
    profile = make_profile()
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    state = running_state(port)
    engine = engine_pid(state)
    shm = tree_shm(state)
    sup.kill()  # SIGKILL: no chance to clean up
    sup.wait(5)
    wait_for(lambda: not any(i.is_alive() for i in members(state)), 15, "the tree to die with its supervisor")
    assert gone(engine)
    final = wait_for(
        lambda: (s := recorded(port))["status"] == "exited" and s,
        10,
        "the reaper to record the end",
    )
    assert final["exit"]["reason"] == "supervisor_died"
    assert_all_gone(state, shm)


def test_orphans_of_a_lost_supervisor_are_swept_at_the_next_start(make_profile, env, cleanup):
    profile = make_profile()
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    state = running_state(port)
    engine = engine_pid(state)
    reaper = proc.ProcessIdentity(state["reaper"]["pid"], state["reaper"]["start_time"])
    assert proc.signal_process(reaper, signal.SIGKILL)  # reaper and supervisor both gone, as on a crash
    wait_for(lambda: not reaper.is_alive(), what="the reaper to die")
    sup.kill()
    sup.wait(5)
    # PDEATHSIG took the API server down; vLLM's EngineCore lives on, as it does with real vLLM
    wait_for(
        lambda: not proc.ProcessIdentity(state["tree"]["pid"], state["tree"]["start_time"]).is_alive(),
        what="PDEATHSIG to kill the API server",
    )
    time.sleep(0.3)
    assert not gone(engine)
    assert [s.status for s in st.list_states()] == ["lost"]
    assert "lost" in sparktui(["status"], env).stdout

    swept = sweep.sweep_lost_servers()  # what every launch does first
    assert [s.port for s in swept] == [port]
    wait_for(lambda: gone(engine), 10, "the orphan to be killed")
    final = recorded(port)
    assert final["status"] == "exited" and final["exit"]["reason"] == "supervisor_died"


def test_failed_start_is_diagnosed_and_the_tree_is_cleaned(make_profile, env, cleanup, fixtures):
    failure = fixtures / "vllm-cpu" / "startup_FAIL_default_kv_memutil.log"
    profile = make_profile(STUB_VLLM_LOG=str(failure))
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    assert sup.wait(30) == 1
    err = sup.stderr.read()
    assert "vLLM failed (free_memory)" in err and "--gpu-memory-utilization" in err
    final = recorded(port)
    assert final["phase"] == "failed" and final["exit"]["reason"] == "failed"
    assert final["exit"]["failure"]["kind"] == "free_memory" and final["exit"]["returncode"] == 1
    assert not any(i.is_alive() for i in members(final))


def test_killed_from_outside_leaves_no_orphan_engine(make_profile, env, cleanup, fixtures):
    truncated = fixtures / "vllm-logs" / "spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log"
    profile = make_profile(STUB_VLLM_LOG=str(truncated), STUB_VLLM_EXIT="SIGKILL", STUB_VLLM_TIME_SCALE="0.001")
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    assert sup.wait(60) == 1
    final = recorded(port)
    assert final["exit"]["failure"]["kind"] == "killed" and final["exit"]["returncode"] == -signal.SIGKILL
    assert final["exit"]["stop"]["gone"]  # the EngineCore the stub left behind was swept
    assert not any(i.is_alive() for i in members(final))


def test_a_tree_killed_whole_from_outside_leaves_no_shm(make_profile, env, cleanup):
    """The OOM killer takes every process of the tree: vLLM 'exited' with nothing left to stop,
    and the /dev/shm files its members held must go all the same (they were removed only when
    some member outlived the API server and had to be killed)."""
    profile = make_profile()
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    state = running_state(port)
    shm = tree_shm(state)
    root = proc.ProcessIdentity(state["tree"]["pid"], state["tree"]["start_time"])
    # the root last, once the rest is dead: the supervisor then finds nothing of the tree alive
    for ident in [i for i in members(state) if i != root] + [root]:
        proc.signal_process(ident, signal.SIGKILL)
        wait_for(lambda i=ident: not i.is_alive(), 10, f"pid {ident.pid} to die")
    assert sup.wait(30) == 1
    final = recorded(port)
    assert final["exit"]["returncode"] == -signal.SIGKILL, final["exit"]
    assert final["exit"]["stop"] and sorted(final["exit"]["stop"]["shm_removed"]) == sorted(Path(p).name for p in shm)
    assert_all_gone(final, shm)


def test_a_worker_that_dies_after_ready_is_a_failure_with_its_kind(make_profile, env, cleanup):
    """vLLM's worker dies while serving (SIGILL); the API server then exits 0 as vLLM's watchdog
    ends uvicorn. That is a failure, not a clean exit: the record, inspect-log and status say so."""
    profile = make_profile(STUB_VLLM_WORKER_DIES_AFTER_S="0.5")
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    sup.wait(60)
    err = sup.stderr.read()
    assert "vLLM failed (worker_died)" in err, err
    final = recorded(port)
    assert final["exit"]["returncode"] == 0
    assert final["phase"] == "failed" and final["exit"]["reason"] == "failed"
    failure = final["exit"]["failure"]
    assert failure["kind"] == "worker_died" and "SIGILL" in failure["message"] and "VllmWorker-0" in failure["message"]
    assert not any(i.is_alive() for i in members(final))
    inspected = sparktui(["inspect-log", final["log_path"]], env)
    assert "worker_died" in inspected.stdout and "SIGILL" in inspected.stdout, inspected.stdout
    status = sparktui(["status", "--all"], env)
    assert "worker_died" in status.stdout, status.stdout


# ---------------------------------------------------------------- preflight


def test_refuses_a_port_already_in_use(make_profile, env):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        profile = make_profile(port=listener.getsockname()[1])
        out = sparktui(["serve", str(profile)], env)
    assert out.returncode == 2
    assert out.stderr.startswith(f"sparktui: --port {port_of(profile)}: something is already listening")
    assert not list((Path(env["SPARKTUI_STATE_DIR"]) / "servers").glob("*.json"))


def test_refuses_a_second_server_on_the_same_port(make_profile, env, cleanup):
    profile = load_profile(make_profile())
    state = launcher.launch(profile).to_dict()
    cleanup.append(state["supervisor"]["pid"])
    with pytest.raises(UserError, match=f"--port {profile.serve.port}: sparktui already runs a server there"):
        launcher.launch(profile).to_dict()
    client.stop(profile.serve.port).to_dict()


def test_refuses_utilization_above_090_on_unified_memory_unless_forced(make_profile, env):
    path = make_profile(serve_extra="gpu-memory-utilization = 0.95")
    out = sparktui(["serve", str(path)], env)
    assert out.returncode == 2 and "--gpu-memory-utilization 0.95: above 0.9 on unified memory" in out.stderr
    assert "--force" in out.stderr
    profile = load_profile(path)
    # A machine without page cache to warn about: the only warning left is the skipped fit.
    sample = read_memory(psi=False)
    no_cache = {"MemTotal": sample.mem_total, "MemAvailable": sample.mem_available, "MemFree": sample.mem_available}
    assert server_preflight.preflight(profile, force=True, meminfo=no_cache).warnings == [NO_FIT]
    lowered = server_preflight.effective_serve(profile, ["--gpu-memory-utilization", "0.5"])  # CLI flags win
    assert lowered.gpu_memory_utilization == 0.5 and lowered.max_model_len == 512
    assert server_preflight.preflight(profile, lowered, meminfo=no_cache).warnings == [NO_FIT]


def test_warns_on_network_host_without_api_key_and_on_page_cache(make_profile):
    profile = load_profile(make_profile())
    exposed = profile.serve.replace(host="0.0.0.0")
    gib = 1 << 30
    meminfo = {"MemTotal": 120 * gib, "MemAvailable": 100 * gib, "MemFree": 30 * gib}
    with pytest.raises(UserError, match=r"--host 0\.0\.0\.0: the server would be reachable from the network"):
        server_preflight.preflight(profile, exposed, meminfo=meminfo)
    warnings = server_preflight.preflight(profile, exposed, meminfo=meminfo, force=True).warnings
    assert any(
        w.startswith("--host 0.0.0.0: the server would be reachable from the network without an API key")
        and w.endswith("(--force given)")
        for w in warnings
    )
    cache = next(w for w in warnings if w.startswith("MemFree is 30.0 GiB but MemAvailable is 100.0 GiB"))
    assert "echo 3 | sudo tee /proc/sys/vm/drop_caches" in cache
    keyed = exposed.replace(api_key="sk-test")
    calm = {"MemTotal": 120 * gib, "MemAvailable": 100 * gib, "MemFree": 98 * gib}
    assert server_preflight.preflight(profile, keyed, meminfo=calm).warnings == [NO_FIT]


def test_api_key_reaches_vllm_by_environment_only(make_profile, env, cleanup):
    profile = load_profile(make_profile())
    profile.serve = profile.serve.replace(api_key="sk-secret-123")
    state = launcher.launch(profile).to_dict()
    cleanup.append(state["supervisor"]["pid"])
    state = running_state(profile.serve.port)
    root = state["tree"]["pid"]
    assert b"sk-secret-123" not in Path(f"/proc/{root}/cmdline").read_bytes()
    assert b"VLLM_API_KEY=sk-secret-123" in Path(f"/proc/{root}/environ").read_bytes().split(b"\0")
    assert "sk-secret-123" not in json.dumps(state)
    url = f"http://127.0.0.1:{profile.serve.port}/v1/models"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer sk-secret-123"}).status_code == 200
    client.stop(profile.serve.port).to_dict()


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_guard_trips_when_the_engine_eats_memory_and_stops_the_tree(make_profile, env, cleanup):
    # Lines just below today's MemAvailable; the stub's EngineCore then takes 3 GiB at the KV line,
    # 2.4 GiB past the term line: other programs freeing memory meanwhile cannot hide the fall.
    now = mem_available_gib()
    guard = f"warn-below-gib = {now - 0.3:.2f}\nterm-below-gib = {now - 0.6:.2f}\nkill-below-gib = {now - 8:.2f}\ngrace-s = 2"
    profile = make_profile(guard=guard, STUB_VLLM_ALLOC_MIB=str(hog_mib(3072)), STUB_VLLM_ALLOC_RATE_MIB_S="3000")
    port = port_of(profile)
    sup = start_foreground(profile, env)
    cleanup.append(sup.pid)
    assert sup.wait(60) == supervisor.GUARD_EXIT, sup.stderr.read()
    assert "memory guard tripped: term line" in sup.stderr.read()
    final = recorded(port)
    assert final["exit"]["reason"] == "guard" and final["status"] == "exited"
    trip = final["trip"]
    assert trip["line"] == "term" and trip["gone"] is True
    assert abs(trip["threshold_gib"] - round(now - 0.6, 2)) < 0.01 and trip["reason"] in ("below", "predicted")
    assert trip["mem_available_gib"] < now - 0.3  # it did fall: the trip is the allocation's doing
    assert trip["signalled"][0]["signal"] == "SIGTERM"
    assert any(e["kind"] == "GuardTrip" for e in final["events"])
    assert not any(i.is_alive() for i in members(final))


def test_stop_and_kill_without_a_server_say_so(env):
    # nothing to stop is what a user who wants it stopped has: exit 0 for stop and kill, with or
    # without --port or --all, as `stop --all` always did (`stop` alone exited 2); status still needs one
    for command in ("stop", "kill"):
        for where in ([], ["--port", "8123"], ["--all"]):
            out = sparktui([command, *where], env)
            assert out.returncode == 0 and out.stderr == "", (command, where, out.stderr)
            assert out.stdout.startswith("nothing to stop: ") and out.stdout.count("\n") == 1, out.stdout
    assert "no server is running" in sparktui(["stop"], env).stdout
    assert "no server recorded on port 8123" in sparktui(["kill", "--port", "8123"], env).stdout
    out = sparktui(["status", "--port", "8123"], env)
    assert out.returncode == 2 and out.stderr.startswith("sparktui: ") and "Traceback" not in out.stderr


def test_restart_relaunches_the_same_profile(make_profile, env, cleanup):
    profile = load_profile(make_profile(serve_extra="max-num-seqs = 4"))
    first = launcher.launch(profile).to_dict()
    cleanup.append(first["supervisor"]["pid"])
    first = running_state(profile.serve.port)
    second = launcher.restart(profile.serve.port).to_dict()
    cleanup.append(second["supervisor"]["pid"])
    assert second["supervisor"]["pid"] != first["supervisor"]["pid"] and second["profile"] == profile.name
    assert not any(i.is_alive() for i in members(first))
    second = running_state(profile.serve.port)
    assert "--max-num-seqs" in second["argv"] and second["argv"][second["argv"].index("--max-num-seqs") + 1] == "4"
    assert client.stop(profile.serve.port).to_dict()["exit"]["reason"] == "stopped"


def test_fit_preflight_judges_the_host_it_launches_on(make_profile):
    """A Spark profile launched on a smaller host is checked against that host, and says so."""
    profile = load_profile(make_profile())
    assert profile.machine == "dgx-spark"
    qwen = profile.serve.replace(model="Qwen/Qwen3-32B", max_model_len=8192)  # ~61 GiB of bf16 weights
    gib = 1 << 30
    small = {"MemTotal": 24 * gib, "MemAvailable": 22 * gib, "MemFree": 21 * gib}
    with pytest.raises(
        UserError, match=re.escape("no memory left for the KV cache: request 21.60 GiB − weights 61.03 GiB")
    ):
        server_preflight.preflight(profile, qwen, meminfo=small)
    forced = server_preflight.preflight(profile, qwen, force=True, meminfo=small)
    assert forced.warnings[0].startswith("the profile is planned for dgx-spark (119.6 GiB) but this host has 24.0 GiB")
    spark = {"MemTotal": int(121.7 * gib), "MemAvailable": 117 * gib, "MemFree": 116 * gib}
    on_spark = server_preflight.preflight(profile, qwen, meminfo=spark)
    assert on_spark.warnings == [] and on_spark.fit["verdict"] == "fits"


def test_preflight_counts_the_per_cpu_free_lists_as_tight_not_as_free(make_profile):
    """Just-freed pages on the per-CPU lists (PerCpuFree) let a launch through that MemAvailable alone
    would refuse, but as tight, since vLLM's own start-up check reads MemAvailable."""
    profile = load_profile(make_profile())
    qwen = profile.serve.replace(model="Qwen/Qwen3-32B", max_model_len=8192, gpu_memory_utilization=0.8)
    gib = 1 << 30
    spark = {"MemTotal": int(121.7 * gib), "MemAvailable": 96 * gib, "MemFree": 96 * gib}
    with pytest.raises(UserError, match="is less than the request"):
        server_preflight.preflight(profile, qwen, meminfo=spark)
    freed = server_preflight.preflight(profile, qwen, meminfo={**spark, "PerCpuFree": 4 * gib})
    assert freed.fit is not None and freed.fit["verdict"] == "tight"
    assert freed.fit["budget"]["mem_available"] == 96 * gib and freed.fit["budget"]["per_cpu_free"] == 4 * gib
    (tight,) = [w for w in freed.warnings if w.startswith("fit: tight:")]
    assert "4.00 GiB just freed on the kernel's per-CPU lists" in tight


def test_a_supervisor_that_claimed_its_port_never_asks_itself(make_profile, env):
    """Between its claim and its first answer a supervisor's socket listens but nobody answers:
    its own preflight (list_states, the pool) must not wait on it, while any other process sees it."""
    profile = load_profile(str(make_profile()))
    sup = supervisor.Supervisor(profile)
    sup.claim_port()
    try:
        assert profile.serve.port not in st.live_ports()
        others = subprocess.run(
            [sys.executable, "-c", "from sparktui.runtime.records import state; print(state.live_ports())"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert str(profile.serve.port) in others.stdout
    finally:
        assert sup.commands.server is not None
        sup.commands.server.close()
        st.HELD_HERE.discard(profile.serve.port)


def test_a_launch_keeps_vllms_own_figures_and_the_next_fit_uses_them(make_profile, env, cleanup, tmp_path):
    """At the KV cache line the supervisor files the start-up's split (weights, graphs, KV; the rest is
    activation + non-torch) in the state folder's calibrations.json (0600); `sparktui fit` of the same
    profile then says its terms were measured on this box. The stub replays a real Spark start-up."""
    folder = tmp_path / "gemma-3-27b-it"
    folder.mkdir()
    bench = __import__("tests.core.test_fit", fromlist=["load_bench"]).load_bench()
    (folder / "config.json").write_text(json.dumps(bench.GEMMA3_27B))
    log = REPO / "tests" / "fixtures" / "vllm-logs" / "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log"
    profile = make_profile(
        model=str(folder),
        # a source build after 0.21 wrote the log: the profile names the rules to fit with
        serve_extra='gpu-memory-utilization = 0.85\nkv-cache-dtype = "fp8"\nmax-num-batched-tokens = 4096\n'
        'vllm-version = "0.21.0"',
        STUB_VLLM_LOG=str(log),
    )
    with profile.open("a") as handle:  # this box, for the launch and the fit alike
        handle.write('[machine]\nname = "auto"\n')
    sup = start_foreground(profile, env, "--force")  # 51 GiB of weights do not fit this test machine
    cleanup.append(sup.pid)
    running_state(port_of(profile), timeout=60)
    store = Path(env["SPARKTUI_STATE_DIR"]) / "calibrations.json"
    assert wait_for(store.exists, 20)
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    (entry,) = json.loads(store.read_text())["entries"]
    assert entry["source"] == "measured" and entry["figures"]["kv_memory"] == int(41.66 * 1024**3)
    fitted = sparktui(["fit", "--json", str(profile)], env)
    data = json.loads(fitted.stdout)
    assert set(data["kv_memory_source"].values()) == {"measured"}, fitted.stderr
    assert "measured on this box" in data["calibration"][0]
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 0


HOLD_SPAWN = """
import os, pathlib, time
hold = os.environ.pop("HOLD_SPAWN", None)  # popped: the reaper and vLLM's tree are not held
if hold:
    from sparktui.runtime.host import proc
    spawn = proc.spawn
    def held(*args, **kwargs):
        pathlib.Path(hold + ".reached").touch()
        while os.path.exists(hold):
            time.sleep(0.02)
        return spawn(*args, **kwargs)
    proc.spawn = held
"""


def test_a_supervisor_before_vllm_starts_is_proven_by_its_reaper_and_stopped(make_profile, env, cleanup, tmp_path):
    """Its record has no tree yet: it names the reaper, which carries the record's mark, so stop
    proves the supervisor by it (a fake with such a record is refused: tests/faults/test_forged_record.py)."""
    from sparktui.runtime.host import provenance
    from sparktui.runtime.server import fallback

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(HOLD_SPAWN)
    hold = tmp_path / "hold"
    hold.touch()
    profile = make_profile()
    port = port_of(profile)
    held_env = {**env, "HOLD_SPAWN": str(hold), "PYTHONPATH": f"{tmp_path / 'site'}:{env.get('PYTHONPATH', '')}"}
    sup = start_foreground(profile, held_env)
    cleanup.append(sup.pid)
    try:
        wait_for(Path(f"{hold}.reached").exists, 30, "the supervisor to reach vLLM's spawn")
        state = st.read_state(st.state_path(port))
        assert state is not None and state.tree is None and state.reaper is not None, state
        assert state.mark is not None and provenance.valid_mark(state.mark) == state.mark
        assert state.mark in provenance.marks_in(provenance.environ_of(state.reaper.pid))
        fallback.refuse_unproven_supervisor(state)  # proven by its reaper: no error
        stop = subprocess.Popen(
            [sys.executable, "-m", "sparktui", "stop", "--port", str(port)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(2)  # it vouched for the record above (no tree) and waits for the supervisor's answer
        assert stop.poll() is None, stop.communicate()
    finally:
        hold.unlink()
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0 and "Traceback" not in err, (out, err)
    assert sup.wait(30) == 0, sup.stderr.read() if sup.stderr else ""
    final = recorded(port)
    assert final is not None and final["exit"]["reason"] == "stopped" and final["mark"] == final["tree"]["mark"]


HOLD_REAPER = """
import os, pathlib, time
hold = os.environ.pop("HOLD_REAPER", None)  # popped: the reaper and vLLM's tree are not held
if hold:
    from sparktui.runtime.server import reaper
    where, init = os.environ.pop("HOLD_REAPER_WHERE"), reaper.Reaper.__init__
    def wait():
        pathlib.Path(hold + ".reached").touch()
        while os.path.exists(hold):
            time.sleep(0.02)
    def held(self, *args, **kwargs):
        if where == "before":
            wait()
        init(self, *args, **kwargs)
        if where == "after":
            wait()
    reaper.Reaper.__init__ = held
"""


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_supervisor_whose_record_names_no_reaper_yet_is_not_refused(make_profile, env, cleanup, tmp_path, where):
    """Its first record names no reaper: stop re-reads it until the reaper is named (held before the
    reaper starts, let go within REAPER_WAIT_S), or proves it by the started reaper's mark before
    the save that names it (held after, longer than REAPER_WAIT_S). A fake is refused: test_forged_record."""
    from sparktui.runtime.server import fallback

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(HOLD_REAPER)
    hold = tmp_path / "hold"
    hold.touch()
    profile = make_profile()
    port = port_of(profile)
    site = f"{tmp_path / 'site'}:{env.get('PYTHONPATH', '')}"
    held_env = {**env, "HOLD_REAPER": str(hold), "HOLD_REAPER_WHERE": where, "PYTHONPATH": site}
    sup = start_foreground(profile, held_env)
    cleanup.append(sup.pid)
    try:
        wait_for(Path(f"{hold}.reached").exists, 30, "the supervisor to reach its reaper's start")
        state = st.read_state(st.state_path(port))
        assert state is not None and state.tree is None and state.reaper is None and state.mark, state
        stop = subprocess.Popen(
            [sys.executable, "-m", "sparktui", "stop", "--port", str(port)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(0.3 if where == "before" else fallback.REAPER_WAIT_S + 1)
        assert stop.poll() is None, stop.communicate()
    finally:
        hold.unlink()
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0 and "Traceback" not in err and "cannot be proven" not in err, (out, err)
    assert sup.wait(30) == 0, sup.stderr.read() if sup.stderr else ""
    final = recorded(port)
    assert final is not None and final["exit"]["reason"] == "stopped", final
