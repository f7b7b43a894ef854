"""The stub vLLM must do what real vLLM does (see fixtures/vllm-cpu), or the supervisor tests lie."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, wait_for
from tests.support.stub_vllm import install_stub

pytestmark = pytest.mark.slow  # spawns processes

FAST = {"STUB_VLLM_TIME_SCALE": "0.01", "STUB_VLLM_MAX_LIFE_S": "60"}


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class Stub:
    def __init__(self, tmp_path: Path, **env: str):
        self.port = free_port()
        self.log = tmp_path / "vllm.log"
        exe = install_stub(tmp_path / "bin")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(exe), "serve", "/models/tiny", "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **FAST, **env},
            )
        self.pgid = self.proc.pid

    def text(self) -> str:
        return self.log.read_text()

    def named(self, title: str) -> int:
        def find():
            for pid in group_pids(self.pgid):
                try:
                    if Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0") == title.encode():
                        return pid
                except OSError:
                    pass
            return None

        return wait_for(find, what=title)

    def cleanup(self):
        leftovers = set()
        for pid in group_pids(self.pgid):
            try:
                leftovers |= shm_owned_by(pid)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, FileNotFoundError):
                pass
        self.proc.wait(5)
        for path in leftovers:
            Path(path).unlink(missing_ok=True)


@pytest.fixture
def stub(tmp_path):
    made = []

    def start(**env):
        made.append(Stub(tmp_path, **env))
        return made[-1]

    yield start
    for s in made:
        s.cleanup()


def shm_owned_by(pid: int) -> set[str]:
    names = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("/dev/shm/"):
            names.add(target)
    return names


def test_replays_fixture_serves_health_and_metrics_and_stops_cleanly_on_sigterm(stub, fixtures):
    s = stub()
    wait_for(lambda: healthy(s.port), what="/health 200")
    engine = s.named("VLLM::EngineCore")
    worker = s.named("VLLM::Worker")
    # named the way setproctitle names vLLM's children: cmdline and (15-byte) comm
    assert Path(f"/proc/{engine}/comm").read_text().strip() == "VLLM::EngineCor"
    log = s.text()
    assert f"(EngineCore pid={engine}) INFO" in log and f"(Worker pid={worker}) INFO" in log
    assert "CPU KV cache size: 131,072 tokens, Maximum concurrency for 512 tokens per request: 256.00x" in log
    assert f"Starting vLLM server on http://127.0.0.1:{s.port}" in log
    assert "model='/models/tiny'" in log and "/srv/models/tiny-llama" not in log
    assert "[shutdown]" not in log
    metrics = httpx.get(f"http://127.0.0.1:{s.port}/metrics").text
    assert metrics == (fixtures / "vllm-cpu" / "metrics_after_requests.txt").read_text()
    shm = shm_owned_by(engine) | shm_owned_by(worker)
    assert len(shm) == 2 and all(Path(p).exists() for p in shm)

    os.killpg(s.pgid, signal.SIGTERM)
    assert s.proc.wait(10) == 0
    wait_for(lambda: not group_pids(s.pgid), what="the whole group to exit")
    assert not any(Path(p).exists() for p in shm)
    assert "[shutdown] Process manager: send sigterm to process EngineCore" in s.text()


def test_a_worker_sent_sigterm_again_while_it_cleans_up_still_removes_its_segment(stub):
    """The group's SIGTERM and the engine's own terminate() reach the Worker moments apart: a second
    TERM inside the handler re-entered it, failed on the closed fd and left the /dev/shm file (the
    lead's final runs of the last stops). TERMs all through its handler must leave nothing behind."""
    s = stub()
    wait_for(lambda: healthy(s.port), what="/health 200")
    worker = s.named("VLLM::Worker")
    (segment,) = shm_owned_by(worker)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:  # TERMs all through the worker's handler, not one coalesced burst
        try:
            os.kill(worker, signal.SIGTERM)
        except ProcessLookupError:
            break
    wait_for(lambda: worker not in group_pids(s.pgid), what="the worker to exit")  # group_pids leaves out zombies
    assert not Path(segment).exists()


def test_sigkill_of_the_api_server_alone_orphans_the_engine_like_real_vllm(stub):
    s = stub()
    wait_for(lambda: healthy(s.port), what="/health 200")
    engine = s.named("VLLM::EngineCore")
    shm = shm_owned_by(engine)
    os.kill(s.proc.pid, signal.SIGKILL)
    s.proc.wait(5)
    time.sleep(0.3)
    assert os.path.exists(f"/proc/{engine}") and all(Path(p).exists() for p in shm)
    os.kill(engine, signal.SIGKILL)
    for p in shm:  # SIGKILL leaves the segment behind, as real vLLM does
        assert Path(p).exists()
        Path(p).unlink()


def test_a_stub_a_test_forgot_ends_on_its_own_and_leaves_no_segment(stub):
    """STUB_VLLM_MAX_LIFE_S: every stub process exits after that long; its /dev/shm segment went
    with it only on SIGTERM, so a forgotten stub left 1 MiB of RAM per process."""
    s = stub(STUB_VLLM_MAX_LIFE_S="5")
    worker = s.named("VLLM::Worker")
    engine = s.named("VLLM::EngineCore")

    def both_held() -> set[str] | None:
        found = shm_owned_by(engine) | shm_owned_by(worker)
        return found if len(found) == 2 else None

    shm = wait_for(both_held, what="both segments held")
    assert s.proc.wait(20) == 3  # the safety net's exit
    wait_for(lambda: not group_pids(s.pgid), 20, "the whole group to exit")
    assert not [p for p in shm if Path(p).exists()]


def test_engine_allocates_the_requested_memory_at_the_kv_cache_line(stub):
    s = stub(STUB_VLLM_ALLOC_MIB="96")
    wait_for(lambda: healthy(s.port), what="/health 200")
    engine = s.named("VLLM::EngineCore")

    def rss_kib():
        for line in Path(f"/proc/{engine}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    wait_for(lambda: rss_kib() > 96 * 1024, what="engine RSS above 96 MiB")


def test_failure_log_is_replayed_then_exits_1_without_listening(stub, fixtures):
    failure = fixtures / "vllm-cpu" / "startup_FAIL_default_kv_memutil.log"
    s = stub(STUB_VLLM_LOG=str(failure))
    assert s.proc.wait(15) == 1
    assert not healthy(s.port)
    assert "RuntimeError: Engine core initialization failed" in s.text()
    wait_for(lambda: not group_pids(s.pgid), what="the engine to be torn down")


def test_killed_from_outside_stops_mid_log_and_leaves_the_engine(stub, fixtures):
    truncated = fixtures / "vllm-logs" / "spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log"
    s = stub(STUB_VLLM_LOG=str(truncated), STUB_VLLM_EXIT="SIGKILL", STUB_VLLM_TIME_SCALE="0.001")
    assert s.proc.wait(30) == -signal.SIGKILL
    last = truncated.read_text().rstrip().splitlines()[-1].split(")", 1)[1]  # after "(EngineCore pid=N)"
    assert s.text().rstrip().endswith(last)
    assert s.named("VLLM::EngineCore")  # still alive: nobody stopped the tree


def test_hang_stops_before_listening(stub):
    s = stub(STUB_VLLM_HANG="1")
    wait_for(lambda: "KV cache size" in s.text(), what="replay to reach the KV line")
    time.sleep(0.5)
    assert s.proc.poll() is None and not healthy(s.port)
    assert "Starting vLLM server" not in s.text() and "Application startup complete" not in s.text()


def test_ignore_term_survives_sigterm(stub):
    s = stub(STUB_VLLM_IGNORE_TERM="1")
    wait_for(lambda: healthy(s.port), what="/health 200")
    engine = s.named("VLLM::EngineCore")
    os.killpg(s.pgid, signal.SIGTERM)
    time.sleep(0.5)
    assert s.proc.poll() is None and os.path.exists(f"/proc/{engine}")


def test_version_flag(tmp_path):
    exe = install_stub(tmp_path)
    assert subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout.strip() == "0.32.0+cpu"


def test_completions_move_the_counters_and_the_stats_line_as_vllm_does(stub):
    s = stub(VLLM_LOG_STATS_INTERVAL="0.5", STUB_VLLM_TOKENS_PER_S="40")
    wait_for(lambda: healthy(s.port), 30, what="the stub to serve")
    base = f"http://127.0.0.1:{s.port}"
    body = {"model": "/models/tiny", "prompt": "one two three", "max_tokens": 60}
    reply = httpx.post(f"{base}/v1/completions", json=body, timeout=30).json()
    assert reply["usage"] == {"prompt_tokens": 3, "completion_tokens": 60, "total_tokens": 63}
    metrics = httpx.get(f"{base}/metrics").text
    assert 'vllm:generation_tokens_total{engine="0",model_name="/srv/models/tiny-llama"} 84.0' in metrics  # 24 + 60
    assert 'vllm:prompt_tokens_total{engine="0",model_name="/srv/models/tiny-llama"} 18.0' in metrics  # 15 + 3
    assert 'vllm:time_to_first_token_seconds_count{engine="0",model_name="/srv/models/tiny-llama"} 3.0' in metrics
    line = wait_for(
        lambda: next((x for x in s.text().splitlines() if "[loggers.py:257] Engine 000: Avg prompt" in x), None),
        10,
        what="the stats line",
    )
    assert "Avg generation throughput:" in line and "CPU KV cache usage:" in line


def test_a_wedged_engine_stalls_streams_and_probes_while_health_stays_200(stub):
    s = stub(STUB_VLLM_WEDGE_AFTER_TOKENS="5", STUB_VLLM_TOKENS_PER_S="100")
    wait_for(lambda: healthy(s.port), 30, what="the stub to serve")
    base = f"http://127.0.0.1:{s.port}"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base}/v1/completions", json={"model": "/models/tiny", "prompt": "x", "max_tokens": 50}, timeout=2)
    with pytest.raises(httpx.ReadTimeout):  # a 1-token probe gets nothing either
        httpx.post(f"{base}/v1/completions", json={"model": "/models/tiny", "prompt": "x", "max_tokens": 1}, timeout=2)
    assert healthy(s.port)
    running = [x for x in httpx.get(f"{base}/metrics").text.splitlines() if x.startswith("vllm:num_requests_running{")]
    assert running and running[0].endswith(" 1.0")  # frozen as it was when the engine stopped


def test_multi_node_ranks_meet_at_the_master_port_and_a_headless_rank_serves_no_http(tmp_path: Path) -> None:
    exe = install_stub(tmp_path / "bin")
    master, head_port, worker_port = free_port(), free_port(), free_port()
    multi = ["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(master)]
    env = {**os.environ, **FAST}

    def rank(r: int, port: int, *extra: str) -> subprocess.Popen[bytes]:
        argv = [str(exe), "serve", "/models/tiny", "--host", "127.0.0.1", "--port", str(port), *multi]
        log = (tmp_path / f"rank{r}.log").open("wb")
        return subprocess.Popen(
            [*argv, "--node-rank", str(r), *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    head, worker = rank(0, head_port), rank(1, worker_port, "--headless")
    try:
        wait_for(lambda: healthy(head_port), 30, what="rank 0's API server")
        wait_for(lambda: "Launching headless engine, node rank 1 of 2" in (tmp_path / "rank1.log").read_text(), 30)
        assert not healthy(worker_port) and worker.poll() is None  # a headless rank has no API server
    finally:
        for p in (head, worker):  # SIGTERM: the stub's engine removes its /dev/shm segment, as vLLM's does
            os.killpg(p.pid, signal.SIGTERM)
        for p in (head, worker):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        wait_for(lambda: not group_pids(head.pid) and not group_pids(worker.pid), 15, what="both ranks' trees to end")


def test_multi_node_flags_are_checked_as_vllm_checks_them(tmp_path: Path) -> None:
    exe = install_stub(tmp_path / "bin")
    base = [str(exe), "serve", "/models/tiny", "--port", str(free_port()), "--master-port", str(free_port())]
    uneven = subprocess.run([*base, "--nnodes", "2"], capture_output=True, text=True, timeout=30)
    assert uneven.returncode == 1 and "must evenly divide the total world size (1)" in uneven.stderr
    rank = subprocess.run(
        [*base, "--nnodes", "2", "-tp", "2", "--node-rank", "2"], capture_output=True, text=True, timeout=30
    )
    assert rank.returncode == 1 and "between 0 and 1" in rank.stderr


def test_an_engine_sent_sigterm_while_its_worker_starts_leaves_no_segment() -> None:
    """vLLM's EngineCore handles SIGTERM from its first line (run_engine_core), so a stop while it
    waits for its workers leaves no /dev/shm file; the stub's engine took the default action there
    and left its segment, which a whole CI run then blamed on the test that stopped it."""
    stub_py = Path(__file__).resolve().parents[1] / "support" / "stub_vllm" / "stub.py"
    for _ in range(5):
        engine = subprocess.Popen(
            [sys.executable, str(stub_py), "--stub-role", "engine"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **FAST},
            start_new_session=True,
        )
        try:
            segments: set[str] = set()
            deadline = time.monotonic() + 30
            while not segments and engine.poll() is None and time.monotonic() < deadline:
                segments = shm_owned_by(engine.pid)
                time.sleep(0.002)
            assert segments, "the engine never held its segment"
            assert engine.stdout is not None
            started = select.select([engine.stdout], [], [], 0)[0]  # its worker named: too late
            os.killpg(engine.pid, signal.SIGTERM)
            engine.wait(10)
            wait_for(lambda pgid=engine.pid: not group_pids(pgid), what="the engine's group to exit")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(engine.pid, signal.SIGKILL)
            engine.wait()
        left = [p for p in segments if Path(p).exists()]
        for p in left:
            Path(p).unlink()
        assert not left, f"a TERM while the engine waited for its worker left {left}"
        if not started:
            return
    pytest.skip("the worker was ready each time before the engine's TERM: the window was not hit")
