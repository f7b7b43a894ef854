"""How far sparktui's speed prediction is from what was measured, on the machine this runs on.

    python3 bench/speed_accuracy.py [--history FILE] [--run] [--bandwidth GBS] [--users 1,2]

1. The guide's DGX Spark rows: predicted single-user decode (core/speed.py, GB10 at 273 GB/s)
   against the published figure, with the error; then the published measurements of
   tests/fixtures/speed/published.json: the FIT set (bench/fit_speed.py fitted the per-layer
   costs on it) and the disjoint HELD-OUT set, predicted against measured per record, the
   roofline, and both sets' errors side by side (a figure above the roofline is flagged, not scored);
   then the POST-FREEZE set (held out as well: records found after the model was frozen, by the
   rule written before them, published.json post_freeze_rule) and both held-out sets together;
   then the UNSEEN set (tests/fixtures/speed/unseen.json: collected by a rule committed before any of
   its figures was looked at, with the model untouched), scored as its own row.
2. This machine: its memory bandwidth, measured here by copying a 256 MiB buffer (CPU bandwidth
   stands in for the Spark's), then every measured level in `sparktui bench`'s history
   (<state dir>/bench/history.jsonl, or --history) beside what core/speed.py predicts for the
   same model, users, prompt and output on this bandwidth: predicted, measured, error.
   --run first measures one: it builds the tiny Llama of the e2e tests with the real vLLM CPU
   build (SPARKTUI_TEST_VLLM), serves it with `sparktui serve --detach` in a temporary state dir,
   runs `sparktui bench --users 1,2 --output-tokens 64`, and stops it (a few minutes, ~2 GB).

The per-layer costs in core/speed.py are a GB10 GPU's (CUDA graphs, Marlin/CUTLASS kernels); a
tiny model on vLLM's CPU backend is bound by Python and the CPU attention kernels instead, so
expect the prediction there to be far too fast: the figure printed is that gap, measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sparktui.core import speed as sp  # noqa: E402
from sparktui.core.bench_history import MeasuredRun, parse_history  # noqa: E402
from sparktui.core.modelspec import load_model_spec, spec_from_config  # noqa: E402

CONFIGS = ROOT / "tests" / "fixtures" / "model-configs"


def copy_bandwidth(size: int = 256 << 20, rounds: int = 5) -> float:
    """Bytes/s moved by a large memcpy (read + write), the best of a few rounds."""
    src = bytearray(os.urandom(1 << 20)) * (size >> 20)
    dst = bytearray(size)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - start)
    return 2 * size / best


def guide_rows() -> None:
    def cfg(name: str) -> dict:
        return json.loads((CONFIGS / name).read_text())

    specs = {
        "Qwen3.5-35B-A3B NVFP4": spec_from_config(
            cfg("Qwen__Qwen3.5-35B-A3B.json"),
            name="Qwen3.5-35B-A3B-NVFP4",
            source="bench",
            hf_quant=cfg("nvidia__Qwen3.6-35B-A3B-NVFP4__hf_quant_config.json"),
        ),
        "Qwen3.5-122B-A10B NVFP4": load_model_spec("nvidia/Qwen3.5-122B-A10B-NVFP4"),
        "70B dense NVFP4": spec_from_config(
            cfg("meta-llama__Llama-3.3-70B-Instruct.json"),
            name="Llama-3.3-70B-NVFP4",
            source="bench",
            hf_quant={"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}},
        ),
    }
    print("DGX Spark (GB10, 273 GB/s): the guide's single-user vLLM rows")
    print(f"  {'row':<26} {'guide':>9} {'predicted':>10} {'roofline':>9} {'error':>7}")
    for row in sp.GUIDE_ROWS:
        est = sp.estimate(specs[row.label], sp.GB10, kv_bytes=sp.kv_bytes_for(specs[row.label], None))
        mid = (row.low + row.high) / 2
        error = (est.decode_tok_s - mid) / mid
        print(
            f"  {row.label:<26} {row.low:>4g}–{row.high:<4g} {est.decode_tok_s:>10.1f} {est.roofline_tok_s:>9.1f} "
            f"{error:>+7.0%}" + ("" if row.reachable else "  (above the roofline: see GUIDE_ROWS)")
        )
    print()


def published_sets() -> None:
    """The fit set, the held-out set and the post-freeze set of tests/fixtures/speed/published.json,
    side by side, and the two held-out sets together."""
    import speed_records as recs

    summary: dict[str, list[float]] = {}
    flagged_by: dict[str, int] = {}
    by_source: dict[tuple[str, str], list[float]] = {}  # (set, source): scored |errors|
    by_users: dict[tuple[str, bool], list[float]] = {}  # (set, one user?): scored |errors|
    beyond: dict[str, list[str]] = {}  # set: scored one-user plain figures above the measured-bandwidth roofline
    for part, title in (
        ("fit", "FIT set (costs fitted on its single-user records, the routing spread on its multi-user ones)"),
        ("held_out", "HELD-OUT set (never read by bench/fit_speed.py)"),
        ("post_freeze", "POST-FREEZE set (held out too: found after the model was frozen, by post_freeze_rule)"),
        ("unseen", "UNSEEN set (held out too: unseen.json, collected by the rule committed before its figures)"),
    ):
        print(f"DGX Spark, published vLLM decode per user: {title}")
        records = recs.load(part)
        if not records:
            print("  no records")
        else:
            print(
                f"  {'record':<50} {'vLLM':>5} {'users':>5} {'measured':>8} {'predicted':>9} {'roofline':>8} "
                f"{'error':>6}"
            )
        scored, flagged = [], 0
        for r in records:
            est = recs.predict(r)
            predicted = recs.per_user(r, est)
            error = predicted / r.tok_s - 1
            flag = ""
            if isinstance(r.speculative, dict):
                measured = r.speculative.get("acceptance_length") or r.speculative.get("acceptance_rate")
                what = "acceptance length" if r.speculative.get("acceptance_length") else "acceptance rate"
                flag = f"  {r.speculative['method']}-{r.speculative['num_speculative_tokens']}" + (
                    f" (the source's {what} {measured})" if measured else ""
                )
            # the rule: scored when below the plain-decode roofline or its speculative settings are
            # known; null is "stated off" (SOURCES.md rule 7), so only an "unknown" above the roofline is left out
            if not recs.scored(r, est):
                flag += "  above the roofline, speculation not stated: not scored"
                flagged += 1
            else:
                if r.users == 1 and r.speculative is None and sp.above_roofline(r.low, est):
                    flag += "  above the roofline of this layout, speculation stated off: scored"
                if r.speculative == "unknown":  # in scope (below the roofline), but say how close it is
                    share = r.tok_s / est.roofline_tok_s if r.users == 1 else None
                    flag += "  speculation not stated" + (f", {share:.0%} of the roofline" if share else "")
                share = recs.measured_read_share(r, est)
                if share is not None and share > 1:
                    flag += f"  {share:.0%} of the roofline at {recs.MEASURED_READ_GBS:g} GB/s measured"
                    beyond.setdefault(part, []).append(f"{r.id} {share:.1%}")
                scored.append(abs(error))
                by_source.setdefault((part, r.source), []).append(abs(error))
                by_users.setdefault((part, r.users == 1), []).append(abs(error))
            print(
                f"  {r.id:<50} {r.series or '?':>5} {r.users:>5} {r.tok_s:>8.1f} {predicted:>9.1f} "
                f"{est.roofline_tok_s:>8.1f} {error:>+6.0%}{flag}"
            )
        summary[part], flagged_by[part] = scored, flagged
        print()
    # "held out, all" stays the two sets the done-when was first read on; the unseen set is its own row
    summary["held out, all"] = summary["held_out"] + summary["post_freeze"]
    flagged_by["held out, all"] = flagged_by["held_out"] + flagged_by["post_freeze"]
    print(
        f"  {'':<13} {'median |error|':>15} {'within 20%':>11} {'share':>6} {'within 35%':>11} {'scored':>7} "
        f"{'not scored':>11}"
    )
    for part, scored in summary.items():
        median = statistics.median(scored) if scored else float("nan")
        w20 = sum(e <= 0.20 for e in scored)
        share = f"{w20 / len(scored):.0%}" if scored else "-"
        print(
            f"  {part:<13} {median:>15.0%} {w20:>11} {share:>6} {sum(e <= 0.35 for e in scored):>11} "
            f"{len(scored):>7} {flagged_by[part]:>11}"
        )
    print(
        "  within 20%, one user | more users: "
        + ", ".join(
            f"{part} {sum(e <= 0.20 for e in by_users.get((part, True), []))}/{len(by_users.get((part, True), []))}"
            f" | {sum(e <= 0.20 for e in by_users.get((part, False), []))}/{len(by_users.get((part, False), []))}"
            for part in ("fit", "held_out", "post_freeze", "unseen")
        )
    )
    # one source can hold many records (a sweep): the held-out sets source by source as well
    print(f"\n  held out, by source {'':<30} {'median |error|':>15} {'within 20%':>11} {'scored':>7}")
    for (part, source), errors in by_source.items():
        if part != "fit":
            print(
                f"  {part + ' ' + source:<50} {statistics.median(errors):>15.0%} "
                f"{sum(e <= 0.20 for e in errors):>11} {len(errors):>7}"
            )
    medians = {key: statistics.median(errors) for key, errors in by_source.items() if key[0] != "fit"}
    parts = [(p, [m for (q, _), m in medians.items() if q == p]) for p in ("held_out", "post_freeze", "unseen")]
    parts.append(("held_out + post_freeze", [m for (q, _), m in medians.items() if q != "unseen"]))
    print(
        "  sources whose median is within 20%: "
        + ", ".join(f"{p} {sum(m <= 0.20 for m in ms)}/{len(ms)}" for p, ms in parts)
    )
    print("  a record whose speculation is not stated is scored when it lies below its plain-decode roofline")
    print(
        f"  scored one-user figures above the plain-decode roofline at a GB10's measured {recs.MEASURED_READ_GBS:g} "
        "GB/s read rate (no plain decode of the record's layout reads faster; still scored by the issue's rule): "
        + ("; ".join(f"{part} {', '.join(ids)}" for part, ids in beyond.items()) or "none")
    )
    print()


def measure_tiny(vllm: Path, workdir: Path, users: str) -> Path:
    """Serve the e2e tests' tiny Llama with the real vLLM CPU build, bench it; the history file."""
    model = workdir / "tiny-llama"
    python = vllm.parent / "python"
    subprocess.run([str(python), str(ROOT / "tests/e2e/make_tiny_model.py"), str(model)], check=True, timeout=300)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    profile = workdir / "tiny.toml"
    profile.write_text(
        f'[serve]\nmodel = "{model}"\nport = {port}\ngpu-memory-utilization = 0.5\nenforce-eager = true\n'
        f'kv-cache-memory-bytes = "64M"\nmax-model-len = 512\n\n[machine]\nname = "auto"\n\n'
        f'[runner]\nexecutable = "{vllm}"\n'
    )
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(workdir / "state")}
    sparktui = [sys.executable, "-m", "sparktui"]
    subprocess.run([*sparktui, "serve", str(profile), "--detach"], check=True, env=env, cwd=ROOT, timeout=60)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the tiny model did not become ready in 300 s")
            time.sleep(1)
        subprocess.run(
            [*sparktui, "bench", "--port", str(port), "--users", users, "--prompt-tokens", "64",
             "--output-tokens", "64", "--requests-per-user", "2"],
            check=True, env=env, cwd=ROOT, timeout=600,
        )  # fmt: skip
    finally:
        subprocess.run([*sparktui, "stop", "--port", str(port)], env=env, cwd=ROOT, timeout=120)
    return workdir / "state" / "bench" / "history.jsonl"


def compare(runs: list[MeasuredRun], hardware: sp.Hardware) -> None:
    if not runs:
        print("  no measured runs: run `sparktui bench` against a server first, or pass --run")
        return
    print(f"  {'model':<34} {'users':>5} {'measured':>9} {'predicted':>10} {'error':>8}")
    errors = []
    for run in runs:
        try:
            spec = load_model_spec(run.model_path or run.model)
        except Exception as exc:  # a model no longer on disk: say so and go on
            print(f"  {run.model[-34:]:<34} skipped: {exc}")
            continue
        prompt = int(run.prompt_tokens or sp.DEFAULT_PROMPT_TOKENS)
        est = sp.estimate(
            spec, hardware, context=prompt + (run.output_tokens or 0) // 2, prompt_tokens=prompt,
            users=(run.users,), kv_bytes=sp.kv_bytes_for(spec, None),
        )  # fmt: skip
        row = est.for_users(run.users)
        predicted = row.per_user_tok_s if row else est.decode_tok_s
        error = (predicted - run.decode_tok_s) / run.decode_tok_s
        errors.append(abs(error))
        name = (run.model_path or run.model).rstrip("/").split("/")[-1]
        print(f"  {name[-34:]:<34} {run.users:>5} {run.decode_tok_s:>9.1f} {predicted:>10.1f} {error:>+8.0%}")
    if errors:
        print(f"  mean absolute error {sum(errors) / len(errors):.0%} over {len(errors)} level(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=Path, help="a bench history file (default: the state dir's)")
    parser.add_argument("--run", action="store_true", help="measure the tiny model with the real vLLM CPU build first")
    parser.add_argument("--bandwidth", type=float, help="this machine's bandwidth in GB/s (default: measured)")
    parser.add_argument("--users", default="1,2", help="--run: the bench's user levels")
    args = parser.parse_args()

    guide_rows()
    published_sets()
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else copy_bandwidth()
    cores = os.cpu_count() or 1
    # the compute figure only matters where compute bounds (long prompts, big batches): a guess
    hardware = sp.Hardware(f"this CPU ({cores} cores)", bandwidth, 20e9 * cores, "measured copy bandwidth")
    how = "given" if args.bandwidth else "measured: 256 MiB memcpy, read + write"
    print(f"This machine: {bandwidth / 1e9:.1f} GB/s ({how}), {cores} CPU cores")
    history = args.history
    if args.run:
        vllm = os.environ.get("SPARKTUI_TEST_VLLM")
        if not vllm:
            raise SystemExit("--run needs SPARKTUI_TEST_VLLM=/path/to/vllm-venv/bin/vllm (the CPU build)")
        work = Path(tempfile.mkdtemp(prefix="sparktui-speed-"))
        history = measure_tiny(Path(vllm), work, args.users)
    if history is None:
        from sparktui import paths

        history = paths.bench_history_path()
    lines = history.read_text().splitlines() if history.is_file() else []
    print(f"measured runs from {history}:")
    compare(parse_history(lines), hardware)


if __name__ == "__main__":
    main()
