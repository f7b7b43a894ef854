"""A stand-in for `vllm serve` that behaves like real vLLM 0.32.0 (CPU build), stdlib only.

It replays a real fixture log with the fixture's relative timing (scaled), prints vLLM's own lines
to stdout and the rest (uvicorn, warnings, tqdm, glog) to stderr as vLLM does, spawns
`VLLM::EngineCore` (and its `VLLM::Worker`) named the way setproctitle names them (cmdline and
comm), and serves /health, /metrics, /version, /v1/models and /v1/(chat/)completions (streamed
as vLLM streams them when asked), and /v1/embeddings for a pooling model (STUB_VLLM_EMBED); the
API's model name is --served-model-name when given, as vLLM's on --host/--port once the log reaches "Application startup
complete.". Like real vLLM, a SIGKILL of the API server alone leaves the EngineCore alive,
holding its memory and its /dev/shm segment.

Behaviour knobs (environment):
  STUB_VLLM_LOG           fixture log to replay (default vllm-cpu/startup_final_eager.log).
                          A log without "Application startup complete." is a failure: replayed,
                          then exit 1 (as vLLM does when the engine fails to start).
  STUB_VLLM_METRICS       fixture /metrics text (default vllm-cpu/metrics_after_requests.txt)
  STUB_VLLM_TIME_SCALE    multiply the fixture's gaps by this (default 1.0; tests use ~0.02)
  STUB_VLLM_ALLOC_MIB     the EngineCore allocates (and touches) this many MiB when the log
                          reaches the KV-cache line
  STUB_VLLM_ALLOC_RATE_MIB_S  allocate at this rate instead of at once
  STUB_VLLM_LEAK_SHM      "PATH:MIB": the EngineCore fills a shared-memory file of MIB at PATH when
                          it starts and never removes it (as NCCL's or a killed library's files stay)
  STUB_VLLM_HANG          "1": stop before the server starts listening and hang there
  STUB_VLLM_IGNORE_TERM   "1": every stub process ignores SIGTERM (only SIGKILL stops it)
  STUB_VLLM_EXIT          after replaying a failure log, exit with this code (default 1);
                          "SIGKILL" kills the whole stub as if from outside (the log just stops)
  STUB_VLLM_WORKER_DIES_AFTER_S  this long after "Application startup complete." the Worker dies of
                          SIGILL, and the stub does what vLLM 0.32 does then: the EngineCore logs
                          "Worker proc VllmWorker-0 died unexpectedly (exit code: -4), shutting down
                          executor." (v1/executor/multiproc_executor.py start_worker_monitor), the
                          API server logs "AsyncLLM output_handler failed." with EngineDeadError
                          (v1/engine/async_llm.py), its watchdog ends uvicorn
                          (entrypoints/launchers/launcher.py terminate_if_errored) and it exits 0
  STUB_VLLM_EMBED         "1": serve /v1/embeddings as a pooling ("embed") model does; otherwise it is
                          404, as vLLM 0.32 registers the route only for one (pooling/factories.py)
  STUB_VLLM_MAX_LIFE_S    safety net: every stub process exits after this long (default 600)
  STUB_VLLM_TTFT_S        completions: seconds to the first token after the prefill (default 0.02)
  STUB_VLLM_TOKENS_PER_S  completions: tokens per second after it (default 200)

Completions (streamed or not) run through a small engine model whose counters /metrics shows the
way vLLM 0.32 keeps them: a request is `running` from admission; its prompt is prefilled in
chunks of 2048 tokens (max_num_batched_tokens on GB10), each chunk taking 16-token KV blocks
(`kv_cache_usage_perc` rises); `prompt_tokens_total` and the TTFT histogram move only when the
prefill ends and the first token comes out; each token adds to `generation_tokens_total`; a
finished request adds to `request_success_total`.
  STUB_VLLM_PREFILL_TOKENS_S  prefill speed, prompt tokens/s (default 0: a prefill takes no time)
  STUB_VLLM_WEDGE_AFTER_TOKENS  after this many generated tokens the engine stops stepping, as a
                          wedged EngineCore does: streams stall mid-way, new requests get no
                          token, /metrics freezes (running requests and all), /health stays 200
Multi-node (mp backend): --nnodes/--node-rank/--master-addr/--master-port are checked as vLLM
checks them; rank 0 listens on the master address and port and the other ranks connect there
(STUB_VLLM_RENDEZVOUS_S, default 60: how long they try); with --headless the stub starts its engine, logs up to the point where the API server
would start, and serves no HTTP (a headless rank has no API server).
Ray (--distributed-executor-backend ray, --tensor-parallel-size N): the EngineCore joins the Ray
cluster that RAY_ADDRESS names as a real Ray client and waits for a placement group of N GPU
bundles, as vLLM's Ray executor does (join_ray); the startup log goes on only once Ray placed them
  STUB_VLLM_PG_WAIT_S     how long to wait for the placement group (default 1800, vLLM's)
A prompt's token count is its whitespace-separated words (or the length of a token-id list).
While there is throughput, vLLM's stats line is logged every VLLM_LOG_STATS_INTERVAL s (default 10).
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve()
FIXTURES = HERE.parents[2] / "fixtures"  # tests/fixtures
DEFAULT_LOG = FIXTURES / "vllm-cpu" / "startup_final_eager.log"
DEFAULT_METRICS = FIXTURES / "vllm-cpu" / "metrics_after_requests.txt"
READY = "Application startup complete."
LISTENING = ("Starting vLLM server on", "Uvicorn running on")

# "(APIServer pid=20603) INFO 11-29 19:23:59 [file.py:1] msg" and "W1129 19:23:59.35 ..." (glog)
VLLM_TIME = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
GLOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)")
PREFIX_PID = re.compile(r"\((\w[\w-]*) pid=(\d+)\)")
VLLM_LINE = re.compile(
    r"^(?:\x1b\[[\d;]*m)*(?:\(\w[\w-]* pid=\d+\) )?(?:\x1b\[[\d;]*m)*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d "
)


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value else default


def set_process_title(title: str) -> None:
    """What setproctitle does: overwrite argv in place (→ /proc/PID/cmdline) and set comm."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME: comm keeps 15 bytes
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])  # stat fields 48 and 49
    data = title.encode()[: arg_end - arg_start - 1]
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(arg_start)
        mem.write(data + b"\0" * (arg_end - arg_start - len(data)))


OWN_SEGMENTS: list[Path] = []  # this process's /dev/shm files: the safety net removes them too


def arm_safety_net() -> None:
    def expire(*_: object) -> None:
        for path in OWN_SEGMENTS:  # a stub a test forgot leaves no RAM behind either
            path.unlink(missing_ok=True)
        os._exit(3)

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(int(env_float("STUB_VLLM_MAX_LIFE_S", 600)))


def ignore_term_requested() -> bool:
    return os.environ.get("STUB_VLLM_IGNORE_TERM") == "1"


# ---------------------------------------------------------------- EngineCore / Worker (children)


LINK_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")


def join_ray(world_size: int) -> int:
    """What vLLM 0.32's Ray executor does in its EngineCore (v1/executor/ray_utils.py
    initialize_ray_cluster, _wait_until_pg_ready; ray_executor.py _init_workers_ray): join the
    running Ray cluster as a client (ray.init(address=None) reads RAY_ADDRESS), insist on a GPU on
    this node, ask for a placement group of world_size {"GPU": 1} bundles (PACK, the first pinned
    to this node's VLLM_HOST_IP), wait for it as long as it takes, then start one worker actor per
    bundle and check that one landed on this node. Real Ray decides where they go. Returns the
    pid of the worker on this node."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    def log(text: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        sys.stderr.write(f"(EngineCore pid={os.getpid()}) INFO {stamp} [ray_utils.py:607] {text}\n")
        sys.stderr.flush()

    ray.init(address=None, log_to_driver=False, logging_level="ERROR")
    current_ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
    node_id = ray.get_runtime_context().get_node_id()
    here = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
    if here.get("Resources", {}).get("GPU", 0) < 1:
        raise ValueError(
            f"Current node has no GPU available. current_node_resource={here.get('Resources')}. vLLM engine cannot "
            f"start without GPU. Make sure you have at least 1 GPU available in a node {node_id=} {current_ip=}."
        )
    specs: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world_size)]
    specs[0][f"node:{current_ip}"] = 0.001
    log("No current placement group found. Creating a new placement group.")
    pg = placement_group(specs, strategy="PACK")
    started, interval = time.time(), 10.0
    deadline = started + env_float("STUB_VLLM_PG_WAIT_S", 1800.0)  # vLLM's PG_WAIT_TIMEOUT
    ready_ref = pg.ready()
    while time.time() < deadline:
        done, _ = ray.wait([ready_ref], timeout=min(interval, max(0.1, deadline - time.time())))
        if done:
            break
        interval *= 2
        log(
            f"Waiting for creating a placement group of specs for {int(time.time() - started)} seconds. "
            f"specs={specs}. Check `ray status` and `ray list nodes` to see if you have enough resources, and make "
            "sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified "
            "in each node if you are running on a multi-node."
        )
    else:
        raise ValueError(f"Cannot provide a placement group of {specs=} within {int(time.time() - started)} seconds.")

    def link_env() -> str:
        """The link environment this process saw (what the tests check each rank got)."""
        return " ".join(f"{k}={os.environ.get(k, '')}" for k in LINK_ENV)

    log(f"driver link env: {link_env()}")

    @ray.remote(num_cpus=0, num_gpus=1)
    class RayWorkerWrapper:
        def where(self) -> tuple[str, int, str]:
            return ray.util.get_node_ip_address(), os.getpid(), ray.get_runtime_context().get_node_id()

        def env(self) -> str:
            return link_env()

    workers = [
        RayWorkerWrapper.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_capture_child_tasks=True, placement_group_bundle_index=i
            )
        ).remote()
        for i in range(world_size)
    ]
    placed = ray.get([w.where.remote() for w in workers])
    envs = ray.get([w.env.remote() for w in workers])
    for rank, ((ip, pid, _), env) in enumerate(zip(placed, envs, strict=True)):
        log(f"rank {rank}: RayWorkerWrapper pid={pid} on node {ip}")
        log(f"rank {rank}: link env: {env}")
    all_ips = {ip for ip, _, _ in placed} | {current_ip}
    nodes = {node for _, _, node in placed}
    if len(nodes) != len(all_ips):  # ray_executor.py _init_workers_ray
        raise RuntimeError(
            f"Every node should have a unique IP address. Got {len(nodes)} nodes with node ids {sorted(nodes)} and "
            f"{len(all_ips)} unique IP addresses {all_ips}. Please check your network configuration. If you set "
            "`VLLM_HOST_IP` environment variable, make sure it is unique for each node."
        )
    local = [pid for ip, pid, _ in placed if ip == current_ip]
    if not local:
        raise ValueError(
            "Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or "
            f"running the driver on a GPU node. driver_ip={current_ip} worker_ips={[ip for ip, _ in placed]}"
        )
    join_ray.workers = workers  # type: ignore[attr-defined]  # held: an actor lives while its handle does
    return local[0]


def run_child(role: str, ray_world_size: int = 0) -> None:
    """EngineCore or Worker: hold memory and a /dev/shm segment until SIGTERM; outlive the parent.
    An EngineCore of the Ray executor (ray_world_size) places its workers over Ray instead."""
    arm_safety_net()
    set_process_title("VLLM::EngineCore" if role == "engine" else "VLLM::Worker")
    children: list[subprocess.Popen] = []

    def on_term(signum, frame):
        # vLLM's run_engine_core handles TERM from its first line: a stop while it starts (waiting for
        # its workers) leaves no /dev/shm file either. The group's TERM and the engine's terminate()
        # reach a Worker moments apart: a second TERM must not re-enter this handler.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for path in OWN_SEGMENTS:
            path.unlink(missing_ok=True)
        for child in children:
            child.terminate()
            child.wait()
        os._exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term_requested() else on_term)
    shm_path = Path("/dev/shm") / f"psm_{secrets.token_hex(4)}"
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the file and its note, together
    fd = os.open(shm_path, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
    OWN_SEGMENTS.append(shm_path)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.ftruncate(fd, 1 << 20)
    shm = mmap.mmap(fd, 1 << 20)
    shm[:5] = b"stub\0"
    leak = os.environ.get("STUB_VLLM_LEAK_SHM")
    if role == "engine" and leak:
        leak_path, _, leak_mib = leak.rpartition(":")
        leak_fd = os.open(leak_path, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
        os.posix_fallocate(leak_fd, 0, int(leak_mib) << 20)  # tmpfs pages: shared memory, resident
        os.close(leak_fd)
    held: list[mmap.mmap] = []
    worker = None
    ray_worker_pid = 0
    if role == "engine" and ray_world_size:
        try:
            ray_worker_pid = join_ray(ray_world_size)
        except Exception as exc:  # vLLM's EngineCore logs the cause and exits
            sys.stderr.write(f"(EngineCore pid={os.getpid()}) ERROR {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            shm.close()
            os.close(fd)
            shm_path.unlink(missing_ok=True)
            os._exit(1)
    elif role == "engine":
        worker = subprocess.Popen(
            [sys.executable, str(HERE), "--stub-role", "worker"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        children.append(worker)
        # As vLLM's EngineCore, report ready only once the worker is (its /dev/shm segment held):
        # naming it before let a test see a running server whose Worker held nothing yet.
        assert worker.stdout is not None
        worker.stdout.readline()
        worker.stdout.close()

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # like vLLM's children: the parent handles ^C
    if role == "worker":
        # segment held and SIGTERM handled (a TERM before this left the file): vLLM's engine waits
        # for its workers' READY
        print("ready", flush=True)
    if worker is not None or ray_worker_pid:
        print(worker.pid if worker is not None else ray_worker_pid, flush=True)  # the API server names it

    for line in sys.stdin:  # commands from the API server; EOF (parent gone) → just live on
        command = line.split()
        if command and command[0] == "alloc":
            allocate(int(command[1]), env_float("STUB_VLLM_ALLOC_RATE_MIB_S", 0.0), held)
    while True:
        time.sleep(3600)


def allocate(mib: int, rate_mib_s: float, held: list) -> None:
    chunk = 16
    for _ in range(0, mib, chunk):
        block = mmap.mmap(-1, chunk << 20)
        block.write(b"\x01" * (chunk << 20))  # touch every page: real resident memory
        held.append(block)
        if rate_mib_s > 0:
            time.sleep(chunk / rate_mib_s)


# ---------------------------------------------------------------- API server (the `vllm` process)


class Replay:
    def __init__(self, log_path: Path, model: str, host: str, port: int):
        self.lines = log_path.read_text(errors="replace").splitlines()
        self.model, self.host, self.port = model, host, port
        text = "\n".join(self.lines)
        found = re.search(r"'model': '([^']+)'", text) or re.search(r"model='([^']+)'", text)
        self.fixture_model = found.group(1) if found else None
        found = re.search(r"https?://[\w.]+:(\d+)", text)
        self.fixture_addr = found.group(0) if found else None
        self.pid_map: dict[str, int] = {}
        roles = {}
        for name, pid in PREFIX_PID.findall(text):
            roles.setdefault(pid, name)
        self.fixture_pids = roles  # fixture pid → role name

    def rewrite(self, line: str) -> str:
        if self.fixture_model:
            line = line.replace(self.fixture_model, self.model)
        if self.fixture_addr:
            line = line.replace(self.fixture_addr, f"http://{self.host}:{self.port}")
        for old, new in self.pid_map.items():
            line = re.sub(rf"\b{old}\b", str(new), line)
        return line


def line_time(line: str) -> float | None:
    m = VLLM_TIME.search(line) or GLOG_TIME.search(line)
    if not m:
        return None
    _mo, day, hh, mm, ss = (int(g) for g in m.groups())
    return ((day * 24 + hh) * 60 + mm) * 60 + ss


def emit(line: str) -> None:
    fd = 1 if VLLM_LINE.match(line) else 2
    try:
        os.write(fd, (line + "\n").encode())
    except OSError:
        pass


# ---------------------------------------------------------------- the engine model behind /v1/completions

CHUNK_TOKENS = 2048  # max_num_batched_tokens: one prefill step takes at most this many tokens
BLOCK_TOKENS = 16


class Engine:
    """Counters as vLLM's scheduler and output processor keep them (see the module docstring)."""

    def __init__(self, kv_tokens: int) -> None:
        self.lock = threading.Lock()
        self.blocks_total = max(1, kv_tokens // BLOCK_TOKENS)
        self.blocks_used = 0
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft: list[float] = []
        self.finished = 0
        self.ttft_s = env_float("STUB_VLLM_TTFT_S", 0.02)
        self.tokens_s = env_float("STUB_VLLM_TOKENS_PER_S", 200.0)
        self.prefill_tokens_s = env_float("STUB_VLLM_PREFILL_TOKENS_S", 0.0)
        wedge = os.environ.get("STUB_VLLM_WEDGE_AFTER_TOKENS", "")
        self.wedge_after = int(wedge) if wedge else None
        self.wedged = threading.Event()
        self.frozen: dict[str, float] | None = None  # the counters as they were when it wedged

    def step_gate(self) -> None:
        """Every engine step passes here; a wedged engine never lets one through again."""
        if self.wedged.is_set():
            while True:
                time.sleep(3600)

    def _blocks(self, tokens: int) -> int:
        return math.ceil(tokens / BLOCK_TOKENS)

    def run(self, prompt_tokens: int, max_tokens: int, emit_token) -> tuple[int, str]:
        """Serve one request; emit_token(text) per token. Returns (tokens generated, finish reason)."""
        arrived = time.monotonic()
        held = 0
        with self.lock:
            self.step_gate_locked()
            self.running += 1
        try:
            done = 0
            while done < prompt_tokens:  # chunked prefill: KV blocks are taken chunk by chunk
                chunk = min(CHUNK_TOKENS, prompt_tokens - done)
                if self.prefill_tokens_s > 0:
                    time.sleep(chunk / self.prefill_tokens_s)
                self.step_gate()
                done += chunk
                with self.lock:
                    grown = self._blocks(done) - held
                    self.blocks_used += grown
                    held += grown
            generated = 0
            prefilled = time.monotonic()
            while generated < max_tokens:  # token n at prefill end + TTFT + (n - 1) / rate
                time.sleep(max(0.0, prefilled + self.ttft_s + generated / self.tokens_s - time.monotonic()))
                self.step_gate()
                with self.lock:
                    self.step_gate_locked()
                    if generated == 0:  # the prefill ends with the first token
                        self.prompt_tokens += prompt_tokens
                        self.ttft.append(time.monotonic() - arrived)
                    self.generation_tokens += 1
                    generated += 1
                    grown = self._blocks(prompt_tokens + generated) - held
                    self.blocks_used += grown
                    held += grown
                    if self.wedge_after is not None and self.generation_tokens >= self.wedge_after:
                        self.frozen = self.counters()
                        self.wedged.set()
                emit_token(" stub")
            return generated, "length"
        finally:
            with self.lock:
                if not self.wedged.is_set():
                    self.running -= 1
                    self.finished += 1
                    self.blocks_used -= held

    def step_gate_locked(self) -> None:
        if self.wedged.is_set():
            self.lock.release()
            try:
                self.step_gate()
            finally:
                self.lock.acquire()

    def counters(self) -> dict[str, float]:
        return {
            "running": self.running,
            "kv": self.blocks_used / self.blocks_total,
            "prompt": self.prompt_tokens,
            "generation": self.generation_tokens,
            "finished": self.finished,
            "ttft": list(self.ttft),
        }

    def render(self, base: str) -> bytes:
        """The fixture's /metrics with this engine's counters added to its samples."""
        with self.lock:
            c = self.frozen if self.frozen is not None else self.counters()
        ttft: list[float] = c["ttft"]
        out = []
        for line in base.splitlines():
            name, _, value = line.rpartition(" ")
            if line.startswith("#") or not name:
                out.append(line)
                continue
            metric = name.split("{", 1)[0]
            v = float(value)
            if metric == "vllm:num_requests_running":
                v += c["running"]
            elif metric == "vllm:kv_cache_usage_perc":
                v += c["kv"]
            elif metric == "vllm:prompt_tokens_total":
                v += c["prompt"]
            elif metric == "vllm:generation_tokens_total":
                v += c["generation"]
            elif metric == "vllm:request_success_total" and 'finished_reason="length"' in name:
                v += c["finished"]
            elif metric == "vllm:time_to_first_token_seconds_count":
                v += len(ttft)
            elif metric == "vllm:time_to_first_token_seconds_sum":
                v += sum(ttft)
            elif metric == "vllm:time_to_first_token_seconds_bucket":
                le = re.search(r'le="([^"]+)"', name)
                bound = float(le.group(1)) if le else math.inf
                v += sum(1 for t in ttft if t <= bound)
            else:
                out.append(line)
                continue
            out.append(f"{name} {v!r}")
        return ("\n".join(out) + "\n").encode()


def prompt_token_count(prompt: object) -> int:
    if isinstance(prompt, list):
        return len(prompt) if all(isinstance(t, int) for t in prompt) else sum(prompt_token_count(p) for p in prompt)
    return max(1, len(str(prompt).split()))


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    metrics = b""
    metrics_text = ""
    model = ""
    max_model_len = 2048
    engine: Engine | None = None

    def log_message(self, fmt, *args):  # uvicorn's access-log format
        emit(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1]} OK')

    def reply(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorised(self) -> bool:
        key = os.environ.get("VLLM_API_KEY")
        return not key or self.headers.get("Authorization") == f"Bearer {key}"

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"")
        elif self.path == "/metrics":
            body = self.engine.render(self.metrics_text) if self.engine is not None else self.metrics
            self.reply(200, body, "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/version":
            self.reply(200, b'{"version":"0.32.0+cpu"}')
        elif self.path == "/v1/models" and self.authorised():
            card = {"id": self.model, "object": "model", "owned_by": "vllm", "max_model_len": self.max_model_len}
            self.reply(200, json.dumps({"object": "list", "data": [card]}).encode())
        elif self.path.startswith("/v1/"):
            self.reply(401, b'{"error":"Unauthorized"}')
        else:
            self.reply(404, b'{"detail":"Not Found"}')

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            request = {}
        if self.path == "/v1/embeddings" and os.environ.get("STUB_VLLM_EMBED") == "1":
            self.embeddings(request)
            return
        chat = self.path == "/v1/chat/completions"
        if not (self.path == "/v1/completions" or chat) or not self.authorised():
            self.reply(401 if self.path.startswith("/v1/") else 404, b"{}")
        elif request.get("model") not in (None, self.model):
            message = f"The model `{request.get('model')}` does not exist."
            error = {"error": {"message": message, "type": "NotFoundError", "param": "model", "code": 404}}
            self.reply(404, json.dumps(error).encode())
        elif request.get("stream"):
            self.stream(request, chat)
        else:
            prompt_tokens = prompt_token_count(self.prompt_of(request, chat))
            texts: list[str] = []
            generated, finish = self.engine.run(prompt_tokens, int(request.get("max_tokens") or 16), texts.append)
            choice = {
                "index": 0,
                "text": "".join(texts),
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            body = {
                "id": f"cmpl-{secrets.token_hex(8)}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": generated,
                    "total_tokens": prompt_tokens + generated,
                },
            }
            self.reply(200, json.dumps(body).encode())

    def embeddings(self, request: dict) -> None:
        """vLLM 0.32's EmbeddingResponse (pooling/embed/protocol.py): one vector per input."""
        if not self.authorised():
            self.reply(401, b'{"error":"Unauthorized"}')
            return
        if request.get("model") not in (None, self.model):
            message = f"The model `{request.get('model')}` does not exist."
            error = {"error": {"message": message, "type": "NotFoundError", "param": "model", "code": 404}}
            self.reply(404, json.dumps(error).encode())
            return
        inputs = request.get("input") or ""
        inputs = inputs if isinstance(inputs, list) else [inputs]
        tokens = sum(prompt_token_count(i) for i in inputs)
        data = [{"index": i, "object": "embedding", "embedding": [0.0] * 8} for i in range(len(inputs))]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0, "prompt_tokens_details": None}
        body = {"id": f"embd-{secrets.token_hex(8)}", "object": "list", "created": int(time.time()),
                "model": self.model, "data": data, "usage": usage}  # fmt: skip
        self.reply(200, json.dumps(body).encode())

    @staticmethod
    def prompt_of(request: dict, chat: bool) -> object:
        if chat and request.get("messages"):
            return request["messages"][-1].get("content", "")
        return request.get("prompt") or ""

    def stream(self, request: dict, chat: bool) -> None:
        """SSE as vLLM streams: `data: {chunk}` per token (usage on each with continuous_usage_stats),
        a usage chunk with include_usage, then `data: [DONE]`. The connection closes at the end."""
        prompt_tokens = prompt_token_count(self.prompt_of(request, chat))
        max_tokens = int(request.get("max_tokens") or 16)
        options = request.get("stream_options") or {}
        include_usage, continuous = bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
        base = {"id": f"cmpl-{secrets.token_hex(8)}", "created": int(time.time()), "model": self.model}
        base["object"] = "chat.completion.chunk" if chat else "text_completion"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.end_headers()
        sent = [0]

        def token(text: str) -> None:
            n = sent[0] = sent[0] + 1
            finish = "length" if n == max_tokens else None
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            chunk = {**base, "choices": [choice]}
            if continuous:
                chunk["usage"] = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": n,
                    "total_tokens": prompt_tokens + n,
                }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

        try:
            self.engine.run(prompt_tokens, max_tokens, token)
            if include_usage:
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": max_tokens,
                    "total_tokens": prompt_tokens + max_tokens,
                }
                self.wfile.write(f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class Server(ThreadingHTTPServer):
    request_queue_size = 2048  # uvicorn's default backlog (socketserver's 5 drops connections under load)


class MultiNode:
    """vLLM's mp multi-node flags (--nnodes/-n, --node-rank/-r, --master-addr, --master-port,
    --headless), checked as vLLM 0.32's arg_utils checks them. A headless rank starts its engine
    and serves no HTTP (no API server), as vLLM's run_headless does."""

    def __init__(self, argv: list[str]):
        self.nnodes, self.node_rank, self.headless = 1, 0, "--headless" in argv
        self.master_addr, self.master_port = "127.0.0.1", 0
        self.executor = "mp"
        world_size = 1
        for i, arg in enumerate(argv):
            key, _, inline = arg.partition("=")
            value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
            if key in ("--nnodes", "-n"):
                self.nnodes = int(value)
            elif key in ("--node-rank", "-r"):
                self.node_rank = int(value)
            elif key == "--master-addr":
                self.master_addr = value
            elif key == "--master-port":
                self.master_port = int(value)
            elif key in ("--tensor-parallel-size", "-tp"):
                world_size = int(value)
            elif key == "--distributed-executor-backend":
                self.executor = value
        self.world_size = world_size
        self.store: socket.socket | None = None  # rank 0's rendezvous listener (torch's TCPStore in vLLM)
        if self.nnodes > 1 and world_size % self.nnodes:
            sys.stderr.write(
                f"ValueError: `--nnodes {self.nnodes}` must evenly divide the total world size ({world_size}). "
                "Adjust `--nnodes`, `--tensor-parallel-size` or `--pipeline-parallel-size`.\n"
            )
            sys.exit(1)
        if not 0 <= self.node_rank < self.nnodes:
            sys.stderr.write(
                f"ValueError: Invalid node rank: `--node-rank` must be between 0 and {self.nnodes - 1}; "
                f"got `--node-rank {self.node_rank}`.\n"
            )
            sys.exit(1)

    def rendezvous(self) -> None:
        """Rank 0 listens on --master-addr:--master-port for the other ranks; the others connect and
        stay connected (they fail, as vLLM does, when rank 0 never answers)."""
        if self.nnodes < 2:
            return
        if self.node_rank == 0:
            self.store = socket.create_server((self.master_addr, self.master_port))
            threading.Thread(target=self._accept, daemon=True).start()
            return
        deadline = time.monotonic() + env_float("STUB_VLLM_RENDEZVOUS_S", 60)
        while True:
            try:
                self.store = socket.create_connection((self.master_addr, self.master_port), timeout=2)
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    sys.stderr.write(f"RuntimeError: rendezvous with {self.master_addr}:{self.master_port}: {exc}\n")
                    sys.exit(1)
                time.sleep(0.2)

    def _accept(self) -> None:
        held = []
        assert self.store is not None
        while True:
            conn, _ = self.store.accept()
            held.append(conn)


def parse_serve_args(argv: list[str]) -> tuple[str, str, int, int]:
    if not argv or argv[0] != "serve" or len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: vllm serve MODEL [options]\n")
        sys.exit(2)
    model, host, port, max_model_len = argv[1], "0.0.0.0", 8000, 2048  # vLLM's defaults; 2048: the fixture's
    rest = argv[2:]
    for i, arg in enumerate(rest):
        key, _, inline = arg.partition("=")
        value = inline or (rest[i + 1] if i + 1 < len(rest) else "")
        if key == "--host":
            host = value
        elif key == "--port":
            port = int(value)
        elif key == "--max-model-len":
            max_model_len = int(value)
    return model, host, port, max_model_len


def served_model_name(argv: list[str], model: str) -> str:
    """The name the API answers to: --served-model-name's first, else the model (vLLM's rule)."""
    for i, arg in enumerate(argv):
        key, _, inline = arg.partition("=")
        if key == "--served-model-name":
            return inline or (argv[i + 1] if i + 1 < len(argv) else model)
    return model


def serve(argv: list[str]) -> None:
    arm_safety_net()
    model, host, port, max_model_len = parse_serve_args(argv)
    multi = MultiNode(argv)
    multi.rendezvous()
    ray_world_size = multi.world_size if multi.executor == "ray" else 0
    log_path = Path(os.environ.get("STUB_VLLM_LOG") or DEFAULT_LOG)
    replay = Replay(log_path, model, host, port)
    replay.pid_map = {pid: os.getpid() for pid, role in replay.fixture_pids.items() if role == "APIServer"}
    scale = env_float("STUB_VLLM_TIME_SCALE", 1.0)
    hang = os.environ.get("STUB_VLLM_HANG") == "1"
    alloc_mib = int(env_float("STUB_VLLM_ALLOC_MIB", 0))
    succeeds = any(READY in line for line in replay.lines)
    has_kv_line = any("KV cache size" in line for line in replay.lines)
    shutdown_at = next((i for i, line in enumerate(replay.lines) if "[shutdown]" in line), len(replay.lines))
    ready_at = next((i for i, line in enumerate(replay.lines) if READY in line), None)

    engine: subprocess.Popen | None = None
    stub_worker_pid = [0]
    httpd: ThreadingHTTPServer | None = None
    stopping = threading.Event()

    def start_engine() -> None:
        nonlocal engine
        engine = subprocess.Popen(
            [
                sys.executable,
                str(HERE),
                "--stub-role",
                "engine",
                *(["--ray", str(ray_world_size)] if ray_world_size else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        worker_pid = engine.stdout.readline().strip()
        if not worker_pid and engine.wait() != 0:  # the engine failed to start (its cause is logged)
            stamp = time.strftime("%m-%d %H:%M:%S")
            sys.stderr.write(
                f"(APIServer pid={os.getpid()}) ERROR {stamp} [core_client.py:600] RuntimeError: Engine core "
                "initialization failed. See root cause above. Failed core proc(s): {}\n"
            )
            sys.exit(1)
        stub_worker_pid[0] = int(worker_pid) if worker_pid.isdigit() else 0
        for pid, role in replay.fixture_pids.items():
            if role.startswith("EngineCore"):
                replay.pid_map[pid] = engine.pid
            elif role in ("Worker", "VllmWorker-0") and worker_pid:
                replay.pid_map[pid] = int(worker_pid)

    def shutdown(signum, frame):
        if stopping.is_set():
            return
        stopping.set()
        for line in replay.lines[shutdown_at:]:
            emit(replay.rewrite(line))
        if engine is not None and engine.poll() is None:
            engine.terminate()
            try:
                engine.wait(5)
            except subprocess.TimeoutExpired:
                engine.kill()
        os._exit(0)

    if ignore_term_requested():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)

    last_time = None
    end = ready_at + 1 if succeeds else len(replay.lines)
    for line in replay.lines[:end]:
        t = line_time(line)
        if t is not None and last_time is not None and t > last_time:
            time.sleep((t - last_time) * scale)
        if t is not None:
            last_time = t
        if engine is None and re.search(r"\((EngineCore\w*|Worker|VllmWorker-\d+) pid=", line):
            start_engine()
        if hang and any(marker in line for marker in LISTENING):
            while True:
                time.sleep(3600)
        if alloc_mib and engine is not None and ("KV cache size" in line or not has_kv_line):
            engine.stdin.write(f"alloc {alloc_mib}\n")
            engine.stdin.flush()
            alloc_mib = 0
        if READY in line and multi.headless:
            emit(
                f"INFO {time.strftime('%m-%d %H:%M:%S')} [serve.py:205] Launching headless engine, node rank "
                f"{multi.node_rank} of {multi.nnodes}, master {multi.master_addr}:{multi.master_port}"
            )
            while True:  # no API server: the engine runs until SIGTERM
                time.sleep(3600)
        if READY in line:
            Handler.metrics = Path(os.environ.get("STUB_VLLM_METRICS") or DEFAULT_METRICS).read_bytes()
            Handler.metrics_text = Handler.metrics.decode()
            kv = re.search(r"KV cache size: ([\d,]+) tokens", "\n".join(replay.lines))
            Handler.engine = Engine(int(kv.group(1).replace(",", "")) if kv else 131072)
            Handler.model = served_model_name(argv, model)
            Handler.max_model_len = max_model_len
            httpd = Server((host, port), Handler)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        emit(replay.rewrite(line))

    if not succeeds:
        code = os.environ.get("STUB_VLLM_EXIT", "1")
        if code == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)  # like the OOM killer: the engine lives on
        if engine is not None:  # vLLM tears its engine down when startup fails
            engine.terminate()
            engine.wait()
        sys.exit(int(code))
    dies_after = os.environ.get("STUB_VLLM_WORKER_DIES_AFTER_S")
    if dies_after is not None and engine is not None:
        threading.Thread(target=worker_dies, args=(float(dies_after), engine, stub_worker_pid[0]), daemon=True).start()
    log_stats(Handler.engine, "CPU" if "CPU KV cache" in "\n".join(replay.lines) else "GPU")


def worker_dies(after_s: float, engine: subprocess.Popen, worker_pid: int) -> None:
    """The worker dies of SIGILL while serving; the lines vLLM 0.32 prints then, and exit 0."""
    time.sleep(after_s)
    if worker_pid:
        os.kill(worker_pid, signal.SIGILL)
    stamp = time.strftime("%m-%d %H:%M:%S")
    api = f"(APIServer pid={os.getpid()})"
    emit(
        f"(EngineCore_DP0 pid={engine.pid}) ERROR {stamp} [multiproc_executor.py:316] Worker proc VllmWorker-0 "
        "died unexpectedly (exit code: -4), shutting down executor."
    )
    for text in (
        "AsyncLLM output_handler failed.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/vllm/v1/engine/async_llm.py", line 862, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
        "for the root cause.",
    ):
        emit(f"{api} ERROR {stamp} [async_llm.py:906] {text}")
    emit(f"{api} INFO {stamp} [launcher.py:304] [shutdown] API server: shutting down FastAPI HTTP server")
    engine.terminate()
    engine.wait()
    os._exit(0)


def log_stats(engine: Engine | None, device: str) -> None:
    """vLLM's periodic stats line (v1/metrics/loggers.py LoggingStatLogger.log), every
    VLLM_LOG_STATS_INTERVAL seconds (vLLM's own variable, default 10). At INFO only when there was
    throughput in this interval or the last: an idle, a wedged or a long-prefilling engine (prompt
    tokens count when a prefill ends) goes quiet."""
    interval = env_float("VLLM_LOG_STATS_INTERVAL", 10.0)
    last_prompt = last_generation = 0.0
    before = engine.counters() if engine is not None else None
    while True:
        time.sleep(interval)
        if engine is None or before is None:
            continue
        with engine.lock:
            now = engine.frozen if engine.frozen is not None else engine.counters()
        prompt = (now["prompt"] - before["prompt"]) / interval
        generation = (now["generation"] - before["generation"]) / interval
        before = now
        idle = not any((prompt, generation, last_prompt, last_generation))
        last_prompt, last_generation = prompt, generation
        if idle:
            continue
        stamp = time.strftime("%m-%d %H:%M:%S")
        emit(
            f"(APIServer pid={os.getpid()}) INFO {stamp} [loggers.py:257] Engine 000: "
            f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {generation:.1f} tokens/s, "
            f"Running: {now['running']:.0f} reqs, Waiting: 0 reqs, {device} KV cache usage: {now['kv'] * 100:.1f}%, "
            "Prefix cache hit rate: 0.0%"
        )


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--stub-role"]:
        run_child(argv[1], int(argv[3]) if argv[2:3] == ["--ray"] else 0)
    elif argv[:1] in (["--version"], ["-v"]):
        print("0.32.0+cpu")
    else:
        serve(argv)


if __name__ == "__main__":
    main()
