"""Benchmark the running server: stream real requests at each number of concurrent users and
report TTFT, inter-token latency, decode tok/s per user and in aggregate, the lowest MemAvailable,
the peak KV-cache usage and (where NVML reports power) joules per token. By default the server
sparktui started, with the API key it was started with. `--sweep` raises the users until a target
breaks and reports the most users that meet both. Every run is kept in the state dir's history
(`--history` lists it)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from sparktui.commands.argtypes import tcp_port
from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.runtime.bench.history import HistoryRecord
    from sparktui.runtime.bench.results import BenchProgress, BenchReport, LevelResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, help="the server on this port (default: the one sparktui runs)")
    parser.add_argument("--users", default=None, help="concurrent users per level, comma-separated (default 1,5)")
    parser.add_argument("--prompt-tokens", type=int, default=256, help="prompt length in tokens (default 256)")
    parser.add_argument("--output-tokens", type=int, default=128, help="tokens generated per request (default 128)")
    parser.add_argument("--requests-per-user", type=int, default=2, help="requests each user sends (default 2)")
    parser.add_argument("--model", help="the served model name to ask for (default: the one the server serves)")
    parser.add_argument("--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions")
    parser.add_argument("--sweep", action="store_true", help="raise the users until a target breaks")
    parser.add_argument("--target-tok-s", type=float, help="sweep: decode tok/s each user must get")
    parser.add_argument("--target-ttft-s", type=float, help="sweep: TTFT p95 not to exceed, in seconds")
    parser.add_argument("--max-users", type=int, default=64, help="sweep: stop climbing here (default 64)")
    parser.add_argument(
        "--depth",
        help="prefill/decode at these context depths (tokens, comma-separated, e.g. 0,4096,32768): one user, "
        "prompt-processing and generation tok/s per depth, as llama-benchy reports them",
    )
    parser.add_argument(
        "--vllm",
        action="store_true",
        help="run vLLM's own `vllm bench serve` (from the installation serving the model) at each level instead",
    )
    parser.add_argument("--vllm-executable", help="with --vllm: this `vllm` instead of the server's own")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--history", action="store_true", help="list past runs instead of running one")
    parser.add_argument("--profile", help="with --history: only this profile's runs")


def _depths(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        depths = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        depths = []
    if not depths or any(d < 0 for d in depths):
        raise UserError(f"--depth {text}: expected token counts of 0 or more separated by commas, e.g. 0,4096,32768")
    return depths


def _users(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        users = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        users = []
    if not users or any(u < 1 for u in users):
        raise UserError(f"--users {text}: expected positive whole numbers separated by commas, e.g. 1,5,10")
    return users


def run(args: argparse.Namespace) -> int:
    from sparktui.runtime.bench.history import append_history, read_history

    if args.history:
        return _show_history(read_history(), args.profile, as_json=args.json)
    from sparktui.runtime.bench.limits import validate
    from sparktui.runtime.bench.results import BenchSettings, SweepTargets
    from sparktui.runtime.bench.run import run_bench
    from sparktui.runtime.bench.target import resolve_target

    users = _users(args.users)
    sweep = None
    if args.sweep:
        if args.target_tok_s is None or args.target_ttft_s is None:
            raise UserError("--sweep needs both targets: --target-tok-s X (per user) and --target-ttft-s Y (p95)")
        sweep = SweepTargets(tok_s=args.target_tok_s, ttft_s=args.target_ttft_s, max_users=args.max_users, ladder=users)
    elif args.target_tok_s is not None or args.target_ttft_s is not None:
        raise UserError("--target-tok-s and --target-ttft-s are for a sweep: add --sweep")
    settings = BenchSettings(
        users=users or [1, 5],
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        requests_per_user=args.requests_per_user,
        api="chat" if args.chat else "completions",
        model=args.model,
        depths=_depths(args.depth),
    )
    validate(settings, sweep)
    if args.vllm_executable and not args.vllm:
        raise UserError("--vllm-executable is for --vllm: add --vllm")
    if args.vllm and settings.depths is not None:
        raise UserError("--vllm runs vllm bench serve's levels: drop --depth, or run --depth without --vllm")
    if args.vllm and sweep is not None:
        raise UserError("--vllm runs fixed levels: drop --sweep, or run the sweep without --vllm")
    target = resolve_target(args.port)
    if args.vllm:
        return _run_vllm(target, settings, args.model, args.vllm_executable, as_json=args.json)
    progress = _progress_line if sys.stderr.isatty() else None
    report = run_bench(target, settings, sweep=sweep, progress=progress)
    if progress is not None:
        print(file=sys.stderr)
    append_history(report)
    if args.json:
        print(json.dumps(report.public(), indent=1))
    else:
        _print_report(report)
    if report.partial:
        print(
            f"sparktui: the run ended early: {report.error}; the results so far are kept, marked partial",
            file=sys.stderr,
        )
        return 2
    return 0


def _run_vllm(target: Any, settings: Any, model: str | None, executable: str | None, *, as_json: bool) -> int:
    from sparktui.runtime.bench import vllm_driver

    plan = vllm_driver.plan(target, model, executable)
    rows = []
    for users in settings.users:
        if not as_json:
            print(f"vllm bench serve: {_n_users(users)} …", file=sys.stderr, flush=True)
        rows.append(vllm_driver.run_level(plan, target, settings, users))
    if as_json:
        report = {"tool": "vllm bench serve", "executable": plan.executable, "model": plan.model, "runs": rows}
        print(json.dumps({**report, "settings": settings.model_dump(mode="json")}, indent=1))
        return 0
    print(f"{target.url}  model {plan.model}  `{plan.executable} bench serve` (vLLM's own figures)")
    print(
        f"{'users':>5}  {'TTFT med/p99 ms':>16}  {'server TTFT mean/med/p99 ms':>27}  {'TPOT med ms':>11}  "
        f"{'ITL med ms':>10}  {'req/s':>6}  {'out tok/s':>9}  {'failed':>6}"
    )
    for r in rows:
        ttft = f"{_num(r['median_ttft_ms'], '{:.1f}')}/{_num(r['p99_ttft_ms'], '{:.1f}')}"
        server = "/".join(
            _num(r[k], "{:.1f}") for k in ("server_mean_ttft_ms", "server_median_ttft_ms", "server_p99_ttft_ms")
        )
        print(
            f"{r['users']:>5}  {ttft:>16}  {server:>27}  {_num(r['median_tpot_ms'], '{:.1f}'):>11}  "
            f"{_num(r['median_itl_ms'], '{:.1f}'):>10}  {_num(r['request_throughput'], '{:.2f}'):>6}  "
            f"{_num(r['output_throughput'], '{:.1f}'):>9}  {r['failed'] or 0:>6}"
        )
    print(
        "server TTFT: vLLM's own histogram (vllm:time_to_first_token_seconds) over the run, from the request's "
        "arrival in vLLM to its first token; median and p99 are interpolated within vLLM's buckets"
    )
    for r in rows:
        if r["server_ttft_requests"] is None:
            print(f"  {_n_users(r['users'])}: /metrics did not answer, so no server-side TTFT")
        elif r["server_ttft_test_request"] and r["server_ttft_requests"] == (r["completed"] or 0) + 1:
            print(f"  {_n_users(r['users'])}: the server's figures include vllm bench serve's initial test request")
        elif r["server_ttft_requests"] != r["completed"]:
            print(
                f"  {_n_users(r['users'])}: the server counted {r['server_ttft_requests']} first tokens for "
                f"{r['completed']} completed requests (other clients during the run, or a restart)"
            )
    return 0


def _progress_line(p: BenchProgress) -> None:
    text = f"level {p.level}: {p.users} users, {p.done}/{p.total} requests"
    print(f"\r{text:<60}", end="", file=sys.stderr, flush=True)


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


HEADER = (
    f"{'users':>5}  {'TTFT p50/p95 s':>15}  {'ITL p50/p95 ms':>15}  {'tok/s/user':>10}  {'aggregate':>9}  "
    f"{'req':>4}  {'err':>3}  {'min avail':>9}  {'peak KV':>7}  {'J/tok':>6}"
)


def level_row(r: LevelResult) -> str:
    from sparktui.core.bench_checks import implausible

    why = implausible(r.decode_tok_s_per_user, r.aggregate_tok_s, r.itl_p50_s)
    ttft = f"{_num(r.ttft_p50_s, '{:.3f}')}/{_num(r.ttft_p95_s, '{:.3f}')}"
    itl = f"{_num(r.itl_p50_s and r.itl_p50_s * 1000, '{:.1f}')}/{_num(r.itl_p95_s and r.itl_p95_s * 1000, '{:.1f}')}"
    return (
        f"{r.users:>5}  {ttft:>15}  {itl:>15}  {_num(r.decode_tok_s_per_user, '{:.1f}'):>10}  "
        f"{_num(r.aggregate_tok_s, '{:.1f}'):>9}  {r.requests:>4}  {r.errors:>3}  "
        f"{_num(r.min_mem_available_gib, '{:.1f} GiB'):>9}  {_num(r.peak_kv_usage and r.peak_kv_usage * 100, '{:.1f}%'):>7}  "
        f"{_num(r.joules_per_token, '{:.2f}'):>6}"
        + ("  partial" if r.partial else "")
        + "".join(f"\n       not a decode speed: {w}" for w in why[:1])
    )


def _print_report(report: BenchReport) -> None:
    s, cfg = report.server, report.settings
    print(
        f"{s.url}  {s.profile or '(not started by sparktui)'}  model {s.model}  vLLM {s.vllm_version or '?'}  "
        f"guard {'armed' if s.guard_armed else 'n/a' if s.guard_armed is None else 'DISARMED'}"
    )
    print(
        f"{cfg.prompt_tokens} prompt + {cfg.output_tokens} output tokens, {cfg.requests_per_user} requests per user, "
        f"/v1/{'chat/' if cfg.api == 'chat' else ''}completions"
    )
    if cfg.depths:
        print(f"{'depth':>7}  {'prompt tok':>10}  {'TTFT p50 s':>10}  {'pp tok/s':>9}  {'tg tok/s':>8}  {'err':>3}")
        for r in report.runs:
            prompt = _num(r.prompt_tokens_mean, "{:.0f}")
            print(
                f"{r.depth or 0:>7}  {prompt:>10}  {_num(r.ttft_p50_s, '{:.3f}'):>10}  "
                f"{_num(r.pp_tok_s, '{:.0f}'):>9}  {_num(r.tg_tok_s, '{:.1f}'):>8}  {r.errors:>3}"
            )
        return
    print(HEADER)
    for r in report.runs:
        print(level_row(r))
        for message in r.error_messages:
            print(f"       error: {message}")
    if report.sweep is not None:
        w = report.sweep
        target = f"≥ {w.target_tok_s:g} tok/s per user and TTFT p95 ≤ {w.target_ttft_s:g} s"
        if w.best_users is None:
            print(f"sweep: not even {w.tried[0] if w.tried else 1} user meets {target} ({', '.join(w.broken_by)})")
        elif w.broke_at is None:
            print(f"sweep: every level up to {_n_users(w.best_users)} meets {target} (--max-users {w.max_users})")
        else:
            print(
                f"sweep: at most {_n_users(w.best_users)} {'meets' if w.best_users == 1 else 'meet'} {target}; "
                f"{_n_users(w.broke_at)} break it ({', '.join(w.broken_by)})"
            )


def _show_history(records: list[HistoryRecord], profile: str | None, *, as_json: bool) -> int:
    if profile is not None:
        records = [r for r in records if r.key.profile == profile]
    if as_json:
        print(json.dumps({"history": [r.model_dump(mode="json") for r in records]}, indent=1))
        return 0
    if not records:
        print("no benchmark runs recorded yet" + (f" for profile {profile}" if profile else ""))
        return 0
    for record in records:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.recorded_at))
        key = record.key
        print(
            f"{when}  {key.profile or '-'}  {key.model}  vLLM {key.vllm_version or '?'}  "
            f"{' '.join(key.flags) or '(no flags)'}" + ("  PARTIAL: " + (record.error or "") if record.partial else "")
        )
        levels = [_level_summary(r) for r in record.runs]
        print("    " + " | ".join(levels) if levels else "    (no level finished)")
    return 0


def _n_users(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def _level_summary(r: LevelResult) -> str:
    parts: list[Any] = [f"{_n_users(r.users)}: {_num(r.decode_tok_s_per_user, '{:.1f}')} tok/s each"]
    parts.append(f"{_num(r.aggregate_tok_s, '{:.1f}')} total")
    parts.append(f"TTFT {_num(r.ttft_p50_s, '{:.2f}')} s")
    return ", ".join(parts)
