"""What `sparktui bench` itself costs: its CPU per request and per token, and how late its own
event loop ran, against the timed test server (tests/support/timed_server.py) at a known speed.

    python bench/bench_client_cost.py [--users 1,4,16] [--rate 50] [--ttft 0.1] [--output 128] [--requests 3]

The server streams every request at --rate tok/s after --ttft; the figures printed per level are
the benchmark's own: CPU seconds per request and per token (this process, all threads), the most
its event loop woke late (a starved client stamps tokens late by as much), and how far its TTFT
and per-user decode tok/s land from the truth. On a DGX Spark (20 cores) the client should stay
well under a few % of one core at the guide's speeds (e.g. 5 users x 50 tok/s).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparktui.runtime.bench.results import BenchSettings
from sparktui.runtime.bench.run import run_bench
from sparktui.runtime.bench.target import Target
from tests.support.timed_server import running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="1,4,16")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--ttft", type=float, default=0.1)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--requests", type=int, default=3)
    args = parser.parse_args()
    settings = BenchSettings(
        users=[int(u) for u in args.users.split(",")],
        prompt_tokens=64,
        output_tokens=args.output,
        requests_per_user=args.requests,
    )
    with running(ttft=args.ttft, rate=args.rate) as (url, _):
        target = Target(url, int(url.rsplit(":", 1)[1]), None, None, None)
        report = run_bench(target, settings)
    print(f"timed server: TTFT {args.ttft} s, {args.rate} tok/s per request, {args.output} tokens per request")
    print("users  cpu ms/request  cpu µs/token  cpu % of a core  loop late max ms  TTFT err  decode err")
    for level in report.runs:
        cpu = level.client_cpu_s_per_request or 0.0
        per_token = cpu * level.requests / max(level.output_tokens, 1)
        core = cpu * level.requests / level.wall_s * 100 if level.wall_s else 0.0
        ttft_err = (level.ttft_p50_s or 0.0) / args.ttft - 1
        decode_err = (level.decode_tok_s_per_user or 0.0) / args.rate - 1
        print(
            f"{level.users:>5}  {cpu * 1000:>14.2f}  {per_token * 1e6:>12.1f}  {core:>15.1f}  "
            f"{(level.client_lag_max_s or 0.0) * 1000:>16.1f}  {ttft_err:>+8.1%}  {decode_err:>+10.1%}"
        )


if __name__ == "__main__":
    main()
