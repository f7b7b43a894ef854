"""Summarise a vLLM log: version, model, memory figures, whether start-up completed, and why it failed."""

from __future__ import annotations

import argparse
import io
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a vLLM log file (what `vllm serve` printed), or - for standard input")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _read_summary(path: str):
    from sparktui.core.vllm_log import summarize
    from sparktui.errors import UserError

    if path == "-":
        # newline="\n": a progress bar's carriage returns stay inside its line, as in a file
        return summarize(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n"))
    try:
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
            return summarize(fh)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot read log file {path!r}: {reason}; give the path of a vLLM log file") from None


def _format(summary) -> str:
    d = summary.to_dict()

    def show(value, unit=""):
        return "-" if value is None else f"{value}{unit}"

    tokens = d["kv_cache_tokens"]
    rows = [
        ("version", show(d["version"])),
        ("model", show(d["model"])),
        ("max model len", show(d["max_model_len"] and f"{d['max_model_len']:,}")),
        ("weights", show(d["weights_gib"], " GiB")),
        ("KV cache memory", show(d["available_kv_gib"], " GiB")),
        ("KV cache size", "-" if tokens is None else f"{tokens:,} tokens ({summary.kv_cache_device})"),
        ("max concurrency", show(d["max_concurrency"], "x")),
        ("ready", "yes" if d["ready"] else "no"),
        ("phase", summary.phase if summary.phase != "failed" else f"failed during {summary.reached.replace('_', ' ')}"),
    ]
    lines = [f"{name:<16} {value}" for name, value in rows]
    failure = d["failure"]
    lines.append(f"{'failure':<16} {'-' if failure is None else failure['kind']}")
    if failure:
        lines.append(f"{'':<16} {failure['message']}")
        lines.append(f"{'fix':<16} {failure['hint']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    summary = _read_summary(args.file)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(_format(summary))
    return 0
