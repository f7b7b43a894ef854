"""Show memory: the unified pool (/proc/meminfo MemAvailable is the truth on a DGX Spark), swap,
memory pressure (PSI) and the GPU through NVML. One sample, or a stream with --watch
(JSON lines with --json)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="store_true", help="keep sampling until Ctrl-C")
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="seconds between samples with --watch (default 1)"
    )
    parser.add_argument("--json", action="store_true", help="JSON (one object per line with --watch)")
    parser.add_argument("--no-gpu", action="store_true", help="skip NVML")


def sample(gpu: bool) -> dict[str, Any]:
    from sparktui.runtime.host.memory import read_gpu, read_memory

    out = {"memory": read_memory().to_dict()}
    if gpu:
        out["gpu"] = read_gpu().to_dict()
    return out


def render(s: dict[str, Any]) -> str:
    from sparktui.core.units import format_gib as f

    m = s["memory"]
    lines = [
        f"memory    available {f(m['mem_available'])} of {f(m['mem_total'])}"
        f"   free {f(m['mem_free'])}   page cache {f(m['page_cache'])}",
        f"swap      {f(m['swap_total'] - m['swap_free'])} used of {f(m['swap_total'])}",
    ]
    if m["psi_some_avg10"] is not None:
        lines.append(f"pressure  some {m['psi_some_avg10']:.2f}%  full {m['psi_full_avg10']:.2f}%  (avg10)")
    g = s.get("gpu")
    if g is not None and not g["available"]:
        lines.append(f"gpu       n/a: {g['reason']}")
    for d in (g or {}).get("gpus", []):
        na = lambda v, unit="": "n/a" if v is None else f"{v:g}{unit}"  # noqa: E731
        lines.append(
            f"gpu {d['index']}     {d['name'] or 'unknown'}   util {na(d['utilization_pct'], '%')}"
            f"   {na(d['temperature_c'], ' °C')}   {na(d['power_w'] and round(d['power_w'], 1), ' W')}"
            f"   SM {na(d['sm_clock_mhz'], ' MHz')}   memory {d['memory_text']}"
        )
        if d["unified"]:
            lines.append("          unified memory: the GPU's pool is host memory (MemAvailable above)")
        for p in d["processes"] or []:
            lines.append(f"          pid {p['pid']:>7}  {f(p['used_bytes'])}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import time

    from sparktui.errors import UserError

    if not 0 < args.interval < math.inf:
        raise UserError(
            f"--interval: got {args.interval}; expected a finite number of seconds > 0, e.g. --interval 0.5"
        )
    try:
        while True:
            s = sample(not args.no_gpu)
            print(json.dumps(s) if args.json else render(s), flush=True)
            if not args.watch:
                return 0
            if not args.json:
                print(flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `sparktui mem --watch | head`
        sys.stderr.close()
        return 0
