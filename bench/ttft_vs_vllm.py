"""Whose TTFT is right, `sparktui bench`'s or `vllm bench serve`'s? Both against one server, with the
wire as the judge (root: a packet socket on loopback).

    sudo python bench/ttft_vs_vllm.py [--port P] [--rounds 3] [--requests 8] [--prompt-tokens 64]
        [--output-tokens 32] [--vllm-executable VLLM] [--json]

The server is the one sparktui runs (or --port): the real vLLM CPU build with the e2e tests' tiny
float16 model is enough. Each round runs, one after the other and in alternating order: `sparktui
bench` (1 user), `vllm bench serve` (1 user, --save-detailed: its per-request TTFTs) and the same
`vllm bench serve` at nice -20 (the scheduler runs its event loop first). Meanwhile a sniffer on
`lo` (AF_PACKET, kernel receive stamps, so the sniffer's own lateness does not count) records when
each request's last byte and its first token chunk crossed the wire: the wire TTFT. vLLM's own
`vllm:time_to_first_token_seconds` (measured in the engine, from the request's arrival there) is
read before and after each run.

Printed per tool: the TTFT it reported, the wire's for the same requests, the server's, and the
tool's lateness over the wire (per request at one user, where the order matches). A tool whose
lateness grows with the machine's load stamps its times late: `vllm bench serve` takes
time.perf_counter() in its asyncio loop when it gets round to a chunk (and its start before the
request is written), so on a loaded box its TTFT carries its own scheduling delays; sparktui's
reader threads read the kernel's receive stamps (runtime/bench/wire.py).

A fourth run, `vllm bench serve, probed`, is the same command inside vLLM's venv through
bench/vllm_loop_probe.py, which stamps inside its process: it splits the lateness into the time from
its start stamp to the request on the wire, from the first token's arrival to its loop's epoll_wait
returning, from there to aiohttp's callback, and from the callback to vLLM's own stamp, with the
loop thread's run delay (runnable but waiting for a CPU) and involuntary switches.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SO_TIMESTAMPNS = 35  # Linux (asm-generic/socket.h)
ETH_P_ALL = 0x0003


def sniff(port: int, out: Path) -> None:
    """Until SIGTERM: one JSON line per HTTP request to `port` on lo, with the kernel's stamps of its
    last request byte (req_last), the response head and the first and last chunk carrying choices."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind(("lo", 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    conns: dict[int, dict] = {}
    with open(out, "w") as f:

        def flush(c: dict) -> None:
            f.write(json.dumps(c) + "\n")

        while not stop:
            try:
                data, anc, _, addr = s.recvmsg(65600, socket.CMSG_SPACE(16))
            except (TimeoutError, InterruptedError):
                continue
            if addr[2] == socket.PACKET_OUTGOING:  # lo shows each packet twice
                continue
            t = next(
                (sec + ns / 1e9 for lvl, kind, raw in anc if lvl == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS
                 for sec, ns in [struct.unpack("@qq", raw[:16])]),
                time.time(),
            )  # fmt: skip
            ip = data[14:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl, total = (ip[0] & 15) * 4, struct.unpack("!H", ip[2:4])[0]
            tcp = ip[ihl:total]
            sport, dport = struct.unpack("!HH", tcp[:4])
            payload = bytes(tcp[(tcp[12] >> 4) * 4 :])
            if not payload:
                continue
            if dport == port:  # client -> server
                c = conns.get(sport)
                if payload.startswith((b"POST ", b"GET ")):
                    if c is not None:
                        flush(c)
                    path = payload.split(b" ", 2)[1].decode(errors="replace")
                    conns[sport] = {"path": path, "req_last": t, "head": None, "first": None, "last": None}
                elif c is not None and c["head"] is None:
                    c["req_last"] = t
            elif sport == port and (c := conns.get(dport)) is not None:
                if payload.startswith(b"HTTP/1.") and c["head"] is None:
                    c["head"] = t
                if b'"choices":[{' in payload:
                    c["first"] = c["first"] or t
                    c["last"] = t
        for c in conns.values():
            flush(c)


def server_ttft(url: str) -> tuple[float, float]:
    """vLLM's own TTFT histogram: (sum s, count)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()

    def total(name: str) -> float:
        return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

    return total("vllm:time_to_first_token_seconds_sum"), total("vllm:time_to_first_token_seconds_count")


def run_tool(tool: str, a, target, plan, folder: Path) -> dict:
    from sparktui.runtime.bench import vllm_driver
    from sparktui.runtime.bench.results import BenchSettings

    if tool == "sparktui":
        argv = [sys.executable, "-m", "sparktui", "bench", "--port", str(target.port), "--json", "--users", "1"]
        argv += ["--prompt-tokens", str(a.prompt_tokens), "--output-tokens", str(a.output_tokens)]
        done = subprocess.run([*argv, "--requests-per-user", str(a.requests)], capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"sparktui bench failed: {done.stderr[-2000:]}")
        run = json.loads(done.stdout)["runs"][0]
        return {"reported_mean_ms": run["mean_ttft_ms"], "reported_median_ms": run["median_ttft_ms"], "each_ms": None}
    settings = BenchSettings(
        users=[1], prompt_tokens=a.prompt_tokens, output_tokens=a.output_tokens, requests_per_user=a.requests
    )
    argv = [*vllm_driver.argv_for(plan, target, settings, 1, folder), "--save-detailed"]
    if tool == "vllm bench serve, nice -20":
        argv = ["nice", "-n", "-20", *argv]
    if tool in (PROBED, PROBED_GROUP):  # the same run inside vLLM's venv, with stamps (bench/vllm_loop_probe.py)
        python = str(Path(plan.executable).parent / "python")
        argv = [python, str(REPO / "bench" / "vllm_loop_probe.py"), str(folder / "probe.jsonl"), *argv[1:]]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if target.api_key:
        env["OPENAI_API_KEY"] = target.api_key
    if tool == PROBED_GROUP:
        env["PROBE_AUTOGROUP_NICE"] = "-20"
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed: {(done.stdout + done.stderr)[-2000:]}")
    result = json.loads((folder / "users-1.json").read_text())
    probe = folder / "probe.jsonl"
    return {
        "reported_mean_ms": result["mean_ttft_ms"],
        "reported_median_ms": result["median_ttft_ms"],
        "each_ms": [1e3 * x for x in result["ttfts"]],
        "probe": [json.loads(line) for line in probe.read_text().splitlines()] if probe.exists() else None,
    }


PROBED = "vllm bench serve, probed"
PROBED_GROUP = "probed, autogroup nice -20"


def where_late(probe: list[dict], wire: list[dict]) -> dict:
    """vLLM's lateness over the wire, request by request, in four parts (ms): its start stamp to the
    request's last byte on the wire; the first token's arrival (kernel stamp) to epoll_wait's return
    in its loop; that return to aiohttp's callback getting the bytes; the callback to vLLM's stamp. And
    the loop thread's run delay (runnable, not running) and involuntary switches from start to callback."""
    parts: dict[str, list[float]] = {k: [] for k in ("before_write", "to_wake", "wake_to_feed", "feed_to_stamp")}
    delays, switched = [], []
    for p, w in zip(probe, wire, strict=True):
        if p["feed"] is None or p["wake"] is None:
            continue
        stamp = p["start"] + p["ttft"]
        parts["before_write"].append(1e3 * (w["req_last"] - p["start"]))
        parts["to_wake"].append(1e3 * (p["wake"] - w["first"]))
        parts["wake_to_feed"].append(1e3 * (p["feed"] - p["wake"]))
        parts["feed_to_stamp"].append(1e3 * (stamp - p["feed"]))
        delays.append(1e3 * p["run_delay"])
        switched.append(p["involuntary"])
    out = {k: {"mean": round(statistics.mean(v), 2), "max": round(max(v), 2)} for k, v in parts.items() if v}
    if delays:
        out["run_delay_ms"] = {"mean": round(statistics.mean(delays), 2), "max": round(max(delays), 2)}
        out["involuntary_switches"] = {"mean": round(statistics.mean(switched), 2), "max": max(switched)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--vllm-executable")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sniff", nargs=2, metavar=("PORT", "OUT"), help=argparse.SUPPRESS)  # the sniffer process
    a = ap.parse_args()
    if a.sniff:
        sniff(int(a.sniff[0]), Path(a.sniff[1]))
        return 0
    if os.geteuid() != 0:
        print("needs root: the wire is read with a packet socket on lo", file=sys.stderr)
        return 2
    from sparktui.runtime.bench import vllm_driver
    from sparktui.runtime.bench.target import resolve_target

    target = resolve_target(a.port)
    plan = vllm_driver.plan(target, None, a.vllm_executable)
    tools = ("sparktui bench", "vllm bench serve", "vllm bench serve, nice -20", PROBED, PROBED_GROUP)
    rows = []
    for rnd in range(a.rounds):
        for tool in tools if rnd % 2 == 0 else tools[::-1]:
            with tempfile.TemporaryDirectory(prefix="sparktui-ttft-") as name:
                folder = Path(name)
                before = server_ttft(target.url)
                sniffer = subprocess.Popen([sys.executable, __file__, "--sniff", str(target.port), str(folder / "w")])
                time.sleep(0.5)
                load = os.getloadavg()[0]
                got = run_tool("sparktui" if tool == "sparktui bench" else tool, a, target, plan, folder)
                time.sleep(0.3)
                sniffer.send_signal(signal.SIGTERM)
                sniffer.wait(10)
                after = server_ttft(target.url)
                wire = [json.loads(line) for line in (folder / "w").read_text().splitlines()]
                measured = sorted(
                    (w for w in wire if w["path"].endswith("/completions") and w["first"] is not None),
                    key=lambda w: w["req_last"],
                )[-a.requests :]  # the warm-up or test request comes first
                wire_ms = [1e3 * (w["first"] - w["req_last"]) for w in measured]
                count = after[1] - before[1]
                row = {
                    "round": rnd,
                    "tool": tool,
                    "load_1m": round(load, 1),
                    "reported_mean_ms": round(got["reported_mean_ms"], 2),
                    "reported_median_ms": round(got["reported_median_ms"], 2),
                    "wire_mean_ms": round(statistics.mean(wire_ms), 2),
                    "wire_median_ms": round(statistics.median(wire_ms), 2),
                    # every request of the run (the warm-up or test request too), as vLLM measured it
                    "server_mean_ms": round(1e3 * (after[0] - before[0]) / count, 2) if count else None,
                    "late_mean_ms": round(got["reported_mean_ms"] - statistics.mean(wire_ms), 2),
                }
                if got["each_ms"] is not None and len(got["each_ms"]) == len(wire_ms):
                    late = [t - w for t, w in zip(got["each_ms"], wire_ms, strict=True)]
                    row["late_each_ms"] = [round(x, 1) for x in late]
                if got.get("probe") and len(got["probe"]) == len(measured):
                    row["where_late_ms"] = where_late(got["probe"], measured)
                rows.append(row)
                if not a.json:
                    print(
                        f"round {rnd} {tool:<27} load {row['load_1m']:>4}: reported mean {row['reported_mean_ms']:7.1f} ms"
                        f"  wire {row['wire_mean_ms']:7.1f} ms  server {row['server_mean_ms']} ms  late "
                        f"{row['late_mean_ms']:+.1f} ms"
                        + (f" (each {row['late_each_ms']})" if "late_each_ms" in row else ""),
                        flush=True,
                    )
                    for part, fig in row.get("where_late_ms", {}).items():
                        print(f"    {part:<22} mean {fig['mean']:8.2f}  max {fig['max']:8.2f}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
