"""What does `sparktui route` cost: the swap, and the front's own latency.

    python bench/route.py [--vllm PATH/bin/vllm --model DIR] [--swaps 3] [--requests 40] [--tokens 32] [--json]

Two profiles that each fit alone but not together (gpu-memory-utilization 0.5 each), behind one
route. Against the stub vLLM (tests/support/stub_vllm) unless --vllm and --model name a real one
(then in two groups: a CPU build with --kv-cache-memory-bytes 64M reserves so little that both fit).

1. Swap time: with A up and idle, a streamed request for B, from the request to B's first token
   (stop A's tree, the leak gate's wait, start B, the first token), --swaps times alternating A and B.
   Beside it, each server's own start time (its supervisor's record: launch → ready) and the route's
   own split of the swap (drain, stop, memory, start).
2. The front's added latency, side by side in one run: the same requests to B directly and through
   the route, alternating batches, at 1 and 16 concurrent clients:
   - per request: a non-streamed completion of 1 token (median and p95 of the difference);
   - per streamed token: the time per output token of a --tokens stream (median over streams), and
     its first token;
   - the route process's own CPU time per non-streamed request (/proc/PID/stat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.stub_vllm import install_stub  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_profiles(tmp: Path, args: argparse.Namespace) -> dict[str, tuple[Path, int]]:
    out = {}
    for name in ("alpha", "beta"):
        port = free_port()
        if args.vllm:
            serve = (
                f'model = "{args.model}"\nenforce-eager = true\nkv-cache-memory-bytes = "64M"\nmax-model-len = 512\n'
                f'dtype = "{args.dtype}"\n'
            )
            runner, env, machine = f'executable = "{args.vllm}"\n', "", '[machine]\nname = "auto"\n'
        else:
            serve = 'model = "/models/tiny"\nmax-model-len = 512\nenforce-eager = true\n'
            runner = f'executable = "{install_stub(tmp / "bin")}"\n'
            env = f'[env]\nSTUB_VLLM_TIME_SCALE = "{args.stub_scale}"\nSTUB_VLLM_MAX_LIFE_S = "1800"\n'
            env += f'STUB_VLLM_TTFT_S = "0.0"\nSTUB_VLLM_TOKENS_PER_S = "{args.stub_tok_s}"\n'
            machine = ""
        path = tmp / f"{name}.toml"
        path.write_text(
            f"[serve]\n{serve}port = {port}\ngpu-memory-utilization = 0.5\n{machine}[runner]\n{runner}{env}"
        )
        out[name] = (path, port)
    return out


def server_record(state_dir: Path, port: int) -> dict:
    return json.loads((state_dir / "servers" / f"{port}.json").read_text())


async def first_token(client: httpx.AsyncClient, url: str, model: str, tokens: int = 4) -> tuple[float, list[float]]:
    """(seconds to the first token, [time per output token after it]) of one streamed completion."""
    body = {"model": model, "prompt": "Hello world", "max_tokens": tokens, "stream": True, "temperature": 0}
    t0 = time.perf_counter()
    arrivals = []
    async with client.stream("POST", url + "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{model}: {resp.status_code} {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                arrivals.append(time.perf_counter())
    # time per output token after the first: robust to tokens that arrive together in one read
    tpot = (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1) if len(arrivals) > 1 else 0.0
    return arrivals[0] - t0, [tpot]


async def one_request(client: httpx.AsyncClient, url: str, model: str) -> float:
    t0 = time.perf_counter()
    resp = await client.post(url + "/v1/completions", json={"model": model, "prompt": "Hello world", "max_tokens": 1})
    if resp.status_code != 200:
        raise RuntimeError(f"{model}: {resp.status_code} {resp.text[:300]}")
    return time.perf_counter() - t0


async def clients(n: int, per_client: int, work) -> list:  # type: ignore[no-untyped-def]
    results: list = []

    async def one() -> None:
        for _ in range(per_client):
            results.append(await work())

    await asyncio.gather(*(one() for _ in range(n)))
    return results


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime, every thread


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    args: argparse.Namespace, route_url: str, servers: dict[str, tuple[Path, int]], state_dir: Path
) -> dict:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    out: dict = {"swaps": [], "overhead": {}}
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        cold, _ = await first_token(client, route_url, "alpha")
        out["cold_start_alpha_s"] = cold
        order = ["beta", "alpha"] * args.swaps
        for model in order[: args.swaps]:
            await asyncio.sleep(0.5)
            ttft, _ = await first_token(client, route_url, model)
            await asyncio.sleep(0.8)  # the route writes its record at most every 0.5 s
            record = json.loads((state_dir / "route" / f"{args.listen}.json").read_text())
            swap = record["history"][-1]
            own = server_record(state_dir, servers[model][1])
            out["swaps"].append({
                "to": model,
                "request_to_first_token_s": ttft,
                "server_start_s": own["ready_at"] - own["started_at"],
                "route_split_s": {k: round(swap[k], 3) for k in ("drain_s", "stop_s", "memory_s", "start_s", "total_s")},
            })  # fmt: skip
        model = order[args.swaps - 1]
        direct = f"http://127.0.0.1:{servers[model][1]}"
        for n in (1, 16):
            per_client = max(1, args.requests // n)
            lat: dict[str, list[float]] = {"direct": [], "route": []}
            gap: dict[str, list[float]] = {"direct": [], "route": []}
            ftt: dict[str, list[float]] = {"direct": [], "route": []}
            cpu = 0.0
            for _ in range(args.rounds):  # alternating batches: both see the same machine
                for side, url in (("direct", direct), ("route", route_url)):
                    before = cpu_seconds(args.route_pid)
                    lat[side] += await clients(n, per_client, lambda u=url: one_request(client, u, model))
                    if side == "route":
                        cpu += cpu_seconds(args.route_pid) - before
                    streams = await clients(n, max(1, per_client // 4),
                                            lambda u=url: first_token(client, u, model, args.tokens))  # fmt: skip
                    ftt[side] += [f for f, _ in streams]
                    gap[side] += [g for _, gs in streams for g in gs]
            out["overhead"][str(n)] = {
                "requests": len(lat["route"]),
                "request_p50_ms": {s: 1000 * statistics.median(v) for s, v in lat.items()},
                "request_p95_ms": {s: 1000 * pct(v, 0.95) for s, v in lat.items()},
                "first_token_p50_ms": {s: 1000 * statistics.median(v) for s, v in ftt.items()},
                "tpot_p50_ms": {s: 1000 * statistics.median(v) for s, v in gap.items()},
                "streams": len(gap["route"]),
                "route_cpu_ms_per_request": 1000 * cpu / max(1, len(lat["route"])),
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm", help="a real vllm executable (default: the stub)")
    parser.add_argument("--model", help="the model folder for --vllm")
    parser.add_argument("--dtype", default="float32",
                        help="--dtype for --vllm (the CPU build's bf16 path dies with SIGILL on some CPUs)")  # fmt: skip
    parser.add_argument("--swaps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=48, help="requests per concurrency level and side, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per streamed request")
    parser.add_argument("--stub-scale", default="0.05", help="the stub's start-up replay speed (its log's gaps ×)")
    parser.add_argument("--stub-tok-s", default="200", help="the stub's decode speed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if bool(args.vllm) != bool(args.model):
        parser.error("--vllm and --model go together")
    args.listen = free_port()
    with tempfile.TemporaryDirectory(prefix="sparktui-bench-route-") as tmp_name:
        tmp = Path(tmp_name)
        state_dir = tmp / "state"
        servers = write_profiles(tmp, args)
        route_file = tmp / "route.toml"
        route_file.write_text(f'[route]\nlisten = "127.0.0.1:{args.listen}"\nqueue-timeout-s = 900\n'
                              + "".join(f'[route.models.{n}]\nprofile = "{p}"\n' for n, (p, _) in servers.items())
                              # a real CPU vLLM with --kv-cache-memory-bytes reserves little: both would fit
                              + ('[route.groups]\none = ["alpha"]\ntwo = ["beta"]\n' if args.vllm else ""))  # fmt: skip
        env = {**os.environ, "SPARKTUI_STATE_DIR": str(state_dir), "SPARKTUI_CONFIG_DIR": str(tmp / "config")}
        env.pop("SPARKTUI_ROUTE_API_KEY", None)
        route = subprocess.Popen([sys.executable, "-m", "sparktui", "route", "--file", str(route_file)], env=env,
                                 cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        url = f"http://127.0.0.1:{args.listen}"
        args.route_pid = route.pid
        try:
            end = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > end or route.poll() is not None:
                    raise SystemExit(f"the route did not start: {route.stderr.read() if route.stderr else ''}")
                time.sleep(0.1)
            os.environ["SPARKTUI_STATE_DIR"] = str(state_dir)
            result = asyncio.run(measure(args, url, servers, state_dir))
        finally:
            route.send_signal(signal.SIGTERM)
            route.wait(120)
    result["server"] = (
        "vllm " + args.model if args.vllm else f"stub (start-up replay ×{args.stub_scale}, {args.stub_tok_s} tok/s)"
    )
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"server: {result['server']}")
    print(f"cold start of alpha through the route (request → first token): {result['cold_start_alpha_s']:.2f} s")
    for s in result["swaps"]:
        split = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in s["route_split_s"].items())
        print(f"swap to {s['to']}: request → first token {s['request_to_first_token_s']:.2f} s; "
              f"its server's own start {s['server_start_s']:.2f} s; route's split (s): {split}")  # fmt: skip
    for n, o in result["overhead"].items():
        d = {
            k: o[k]["route"] - o[k]["direct"]
            for k in ("request_p50_ms", "request_p95_ms", "first_token_p50_ms", "tpot_p50_ms")
        }
        print(f"{n:>2} clients, {o['requests']} requests and {o['streams']} streams of {args.tokens} tokens per side:")
        for k, v in d.items():
            print(f"   {k:<20} direct {o[k]['direct']:8.3f} ms   route {o[k]['route']:8.3f} ms   added {v:+.3f} ms")
        print(f"   the route's own CPU per request: {o['route_cpu_ms_per_request']:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
