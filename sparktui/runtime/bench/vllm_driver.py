"""`sparktui bench --vllm`: vLLM's own load generator, `vllm bench serve`, from the installation that
serves the model, run against it level by level, and its result file read back.

Each level is one `vllm bench serve` run: --max-concurrency = users, --num-prompts = users ×
requests per user, random prompts of --random-input-len tokens and --ignore-eos outputs of
--random-output-len, --request-rate inf, --save-result into a private temporary folder. The key
goes by environment (OPENAI_API_KEY is what vllm/benchmarks/lib/endpoint_request_func.py reads),
never argv. Figures are vLLM's, under vLLM's names; sparktui only reads the file.

Beside the client's figures, each level carries the server's own TTFT: vLLM's histogram
vllm:time_to_first_token_seconds read from /metrics just before and just after the run
(core.metrics.server_ttft), as server_mean_ttft_ms, server_median_ttft_ms, server_p99_ttft_ms and
server_ttft_requests (which counts other clients' requests too, if any came meanwhile).
`vllm bench serve` first sends one test request (its ready check) that its own figures leave out;
where that vLLM can skip it (READY_CHECK_SKIP_FROM) sparktui does, having checked /v1/models
itself, so both sides count the same requests; on an older or unknown vLLM the server's count
has that one request more (server_ttft_test_request says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktui.core.metrics import MetricsError, MetricsSnapshot, parse_metrics, server_ttft
from sparktui.core.vllm_rules import find_version
from sparktui.errors import UserError
from sparktui.files import read_regular
from sparktui.runtime.bench.results import BenchSettings
from sparktui.runtime.bench.target import Target
from sparktui.runtime.launch.runner import resolve_native_executable

# What one level keeps of the result file: the figures, not the per-request lists.
KEPT = (
    "duration",
    "completed",
    "failed",
    "max_concurrency",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *(f"{k}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for k in ("mean", "median", "std", "p99")),
)
LEVEL_TIMEOUT_S = 3600.0
# vllm/benchmarks/serve.py benchmark(): from 0.11.0, `if ready_check_timeout_sec > 0:` guards the
# initial test request, so --ready-check-timeout-sec 0 skips it; 0.10.2 always sends it (and with 0
# fails at once: wait_for_endpoint gives up before its first try). Read in both wheels.
READY_CHECK_SKIP_FROM = (0, 11)


def skips_ready_check(version: str | None) -> bool:
    """Whether this vLLM's `vllm bench serve` can leave out its initial test request."""
    found = find_version(version or "")
    return found is not None and (found.major, found.minor) >= READY_CHECK_SKIP_FROM


@dataclass(frozen=True)
class VllmBenchPlan:
    executable: str  # the `vllm` that serves the model (or the one given)
    model: str  # the served model name requests use
    tokenizer: str  # where vllm bench serve finds the tokenizer (the model path)
    version: str | None = None  # that vLLM's version, when known (skips_ready_check)


def plan(target: Target, model: str | None, executable: str | None) -> VllmBenchPlan:
    """Which `vllm` to run and with what model: the server's own when sparktui started it."""
    state = target.state or {}
    argv = [str(a) for a in state.get("argv") or []]
    if executable is None:
        if argv and "serve" in argv:
            head = argv[: argv.index("serve")]
            if len(head) != 1 or os.path.basename(head[0]) in ("docker", "podman"):
                raise UserError(
                    "--vllm runs `vllm bench serve` from the installation that serves the model, and this "
                    "server runs in a container; run `docker exec <container> vllm bench serve …` there, "
                    "or name a local vLLM with --vllm-executable"
                )
            executable = head[0]
        else:
            executable = resolve_native_executable("vllm")
    exe = resolve_native_executable(executable)
    cards = _models(target)
    served = model or (state.get("model") if state.get("model") in cards else next(iter(cards), None))
    if served is None or served not in cards:
        raise UserError(
            f"--model {served}: the server does not serve it; it serves {', '.join(cards) or 'nothing yet'}"
        )
    # the tokenizer: the path sparktui served, else what vLLM lists as the model's root
    tokenizer = state.get("model") or cards[served] or served
    return VllmBenchPlan(exe, str(served), str(tokenizer), _version_of(exe, state, argv))


def _version_of(exe: str, state: dict[str, Any], argv: list[str]) -> str | None:
    """The version of the `vllm` at `exe`: its venv's metadata, else the server's own when `exe`
    is the executable that server runs."""
    from sparktui.runtime.launch.vllm_version import from_site_packages

    found = from_site_packages(Path(exe).resolve().parent.parent)
    if found is not None:
        return found[0]
    if argv and "serve" in argv and resolve_native_executable(argv[0]) == exe:
        version = state.get("vllm_version")
        return str(version) if version else None
    return None


def _models(target: Target) -> dict[str, str | None]:
    """Served model name → its root (the path vLLM loaded), from /v1/models."""
    import httpx

    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        reply = httpx.get(f"{target.url}/v1/models", headers=headers, timeout=10, trust_env=False)
        cards = reply.json().get("data", []) if reply.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        raise UserError(f"{target.url}/v1/models did not answer: is the server running?") from None
    return {str(c["id"]): c.get("root") for c in cards if isinstance(c, dict) and c.get("id")}


def argv_for(p: VllmBenchPlan, target: Target, settings: BenchSettings, users: int, out: Path) -> list[str]:
    chat = settings.api == "chat"
    return [
        p.executable,
        "bench",
        "serve",
        "--backend",
        "openai-chat" if chat else "openai",
        "--base-url",
        target.url,
        "--endpoint",
        "/v1/chat/completions" if chat else "/v1/completions",
        "--model",
        p.model,
        "--tokenizer",
        p.tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(settings.prompt_tokens),
        "--random-output-len",
        str(settings.output_tokens),
        "--ignore-eos",
        "--num-prompts",
        str(users * settings.requests_per_user),
        "--max-concurrency",
        str(users),
        "--request-rate",
        "inf",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--disable-tqdm",
        *(["--ready-check-timeout-sec", "0"] if skips_ready_check(p.version) else []),
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        f"users-{users}.json",
    ]


SERVER_TTFT_KEYS = (
    "server_ttft_requests",
    "server_mean_ttft_ms",
    "server_median_ttft_ms",
    "server_p99_ttft_ms",
    "server_ttft_window",
)


def metrics_snapshot(target: Target) -> MetricsSnapshot | None:
    """The server's /metrics now (None when it does not answer or is not Prometheus text)."""
    import time

    import httpx

    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        reply = httpx.get(f"{target.url}/metrics", headers=headers, timeout=10, trust_env=False)
        if reply.status_code != 200:
            return None
        return parse_metrics(reply.text, time.monotonic())
    except (httpx.HTTPError, MetricsError):
        return None


RESULT_LIMIT = 64 << 20  # a level's result: its figures, and per-request lists when asked for


def read_result(result: Path) -> dict[str, Any]:
    """A level's result file as `vllm bench serve` wrote it; UserError naming it when it is not a
    regular file of sane size (read_regular: a FIFO never hangs the bench) or not a JSON object."""
    try:
        data = json.loads(read_regular(result, RESULT_LIMIT, "`vllm bench serve` result file"))
    except (ValueError, RecursionError) as exc:
        raise UserError(f"`vllm bench serve` wrote a result file that is not JSON ({result}): {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"`vllm bench serve` wrote a result file that is not a JSON object ({result})")
    return data


def run_level(p: VllmBenchPlan, target: Target, settings: BenchSettings, users: int) -> dict[str, Any]:
    """One level; vLLM's figures under its own names, plus `users`. UserError when it fails."""
    with tempfile.TemporaryDirectory(prefix="sparktui-vllm-bench-") as folder:  # 0700
        out = Path(folder)
        argv = argv_for(p, target, settings, users, out)
        env = dict(os.environ)
        env.pop("OPENAI_API_KEY", None)
        if target.api_key:
            env["OPENAI_API_KEY"] = target.api_key
        before = metrics_snapshot(target)
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=LEVEL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"`vllm bench serve` at {users} users ran past {LEVEL_TIMEOUT_S:.0f} s") from None
        after = metrics_snapshot(target) if before is not None else None
        result = out / f"users-{users}.json"
        if done.returncode != 0 or not os.path.lexists(result):
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
            raise UserError(f"`vllm bench serve` at {users} users failed (exit {done.returncode}):\n{tail}")
        data = read_result(result)
    row: dict[str, Any] = {"users": users}
    row.update({key: data.get(key) for key in KEPT})
    server = server_ttft(before, after) if after is not None else None
    row.update(server.to_ms() if server is not None else dict.fromkeys(SERVER_TTFT_KEYS))
    row["server_ttft_test_request"] = not skips_ready_check(p.version)
    return row
