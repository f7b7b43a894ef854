"""Will this `vllm serve` configuration start, and what KV cache and concurrency will it get?

  sparktui fit [PROFILE] [--model M] [vllm serve flags…] [--machine dgx-spark|auto|GIB] [--json]
  sparktui fit [--vllm-version X.Y[.Z]] -- vllm serve MODEL [flags…] [--config FILE.yaml]

PROFILE may be an eugr/spark-vllm-docker or sparkrun recipe, or a vLLM --config file (.yaml): what
was read is shown first, with every key the fit does not model.

Which vLLM: --vllm-version, else the profile's vllm-version, else what the profile's runner has
installed (its venv, `vllm --version`, its container image's tag, or its last log), else the newest
rules sparktui knows (said in the notes).

Exit status: 0 fits or tight, 1 won't start or unsafe, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ACCEPTS_EXTRA_ARGS = True
MEMINFO = Path("/proc/meminfo")
# as the fit panel says them (ui/widgets/fitpanel.py VERDICT_TEXT) and the README writes them
VERDICT_WORDS = {"fits": "FITS", "tight": "TIGHT", "wont_start": "WON'T START", "unsafe": "UNSAFE"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = (
        "sparktui fit [PROFILE|RECIPE.yaml] [--model M] [vllm serve flags…] [--machine dgx-spark|auto|GIB] "
        "[--mem-available GIB] [--vllm-version X.Y[.Z]] [--json]\n"
        "       sparktui fit [options] -- vllm serve MODEL [flags…]"
    )
    parser.add_argument(
        "--vllm-version",
        metavar="X.Y[.Z]",
        help="the vLLM that will run (0.10 to 0.33); the fit follows its rules "
        "(default: the profile's, or detected from its runner, or the newest known)",
    )
    parser.add_argument(
        "--model",
        help="model: a local folder, a Hugging Face repo id (its config is fetched when it is not "
        "downloaded), or a catalog name (overrides the profile's)",
    )
    parser.add_argument(
        "--machine", help="dgx-spark (default), auto (this machine, from /proc/meminfo) or a GPU memory size in GiB"
    )
    parser.add_argument(
        "--mem-available",
        metavar="GIB",
        help="MemAvailable now, in GiB (default: /proc/meminfo for auto, an idle Spark otherwise)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="never ask the Hugging Face Hub for a model that is not downloaded (as HF_HUB_OFFLINE=1)",
    )
    parser.add_argument(
        "--bandwidth",
        metavar="GBS",
        help="memory bandwidth in GB/s for the speed estimate (default: $SPARKTUI_BANDWIDTH_GBS, or 273 "
        "for a DGX Spark; no estimate for other machines unless given)",
    )
    parser.add_argument(
        "--context",
        metavar="TOKENS",
        help="tokens each user's sequence holds while decoding, for the speed estimate (default: 1,024, "
        "or --max-model-len when shorter); a long context reads more KV cache per token",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--grid",
        action="store_true",
        help="also fit a grid of --max-num-seqs (1–50 and the current) × --max-model-len (4k–128k up to the "
        "model's limit, and the current), for the current KV cache dtype and fp8 (JSON: 'grid')",
    )
    parser.add_argument("--list-models", action="store_true", help="list the built-in model catalog and exit")
    parser.add_argument(
        "--calibrate-from",
        metavar="LOG",
        help="take vLLM's own figures (weights, CUDA graphs, KV memory; the rest is activation + non-torch) "
        "from the log of a start-up with these flags, keep them for this box, and fit with them",
    )


def _split(extra: list[str]) -> tuple[str | None, list[str], list[str] | None]:
    """(profile, vLLM flags, pasted command after --)."""
    pasted = None
    if "--" in extra:
        i = extra.index("--")
        extra, pasted = extra[:i], extra[i + 1 :]
    profile = None
    if extra and not extra[0].startswith("-"):
        profile, extra = extra[0], extra[1:]
    return profile, extra, pasted


def _pop_model(flags: list[str]) -> tuple[str | None, list[str]]:
    out, model, i = [], None, 0
    while i < len(flags):
        tok = flags[i]
        if tok == "--model":
            if i + 1 >= len(flags):
                from sparktui.errors import UserError

                raise UserError("--model: missing its value; expected a folder, a repo id or a catalog name")
            model, i = flags[i + 1], i + 2
            continue
        if tok.startswith("--model="):
            model = tok.split("=", 1)[1]
        else:
            out.append(tok)
        i += 1
    return model, out


def build_config(args: argparse.Namespace, env: dict[str, str] | None = None):
    """(ServeConfig, machine name, where the vLLM version came from) from the profile, the
    flags and the pasted command. The
    environment the server would get (the profile's [env], a pasted command's NAME=value prefix)
    is added to `env` when given."""
    from sparktui.core.command_line import read_pasted, split_command
    from sparktui.core.config import parse_serve_command, utilization_left_to_vllm
    from sparktui.errors import UserError

    profile_arg, flags, pasted = _split(list(args.extra))
    pasted_config = None
    args.left_to_vllm = []
    machine_name = "dgx-spark"
    base: list[str] = []
    version: str | None = None  # vllm_version is sparktui's own: not in the argv
    source = ""
    profile = None
    image = None  # the image a pasted `docker run` starts vLLM in
    model, flags = _pop_model(flags)
    model = args.model or model
    args.recipe, args.config_file = None, None
    if profile_arg:
        from sparktui.core.profiles import load_profile

        profile = load_profile(profile_arg, model=model)  # a recipe's model when a vLLM config file names none
        args.recipe = profile.recipe
        base = profile.serve.to_argv()
        machine_name = profile.machine
        if profile.serve.vllm_version:
            version, source = profile.serve.vllm_version, f"profile {profile.name}"
        if env is not None:
            env.update(profile.env)
    if pasted is not None:
        if base:
            raise UserError("give a profile or a pasted `vllm serve …` command, not both")
        if len(pasted) == 1 and any(c.isspace() for c in pasted[0]):
            # `fit -- '… && vllm serve … > vllm.log 2>&1 &'`: the line quoted whole, so the shell
            # leaves its operators alone; read it as F4 reads a paste (it was taken for a model name)
            pasted = split_command(pasted[0])
        line = read_pasted(pasted)
        pasted, image = line.words, line.image
        if env is not None:
            env.update(line.env)
        pasted_config = parse_serve_command(pasted)
        args.config_file = config_file_read(pasted)
        base = pasted_config.to_argv()
        if pasted_config.vllm_version:
            version, source = pasted_config.vllm_version, "--vllm-version"
    if model:
        base = [model, *base[1:]]
    if not base:
        raise UserError("no model: give a profile, --model M, or `-- vllm serve MODEL …`")
    if flags and not flags[0].startswith("-"):
        raise UserError(f"unexpected argument {flags[0]!r}: give one profile, first; vLLM flags start with --")
    config = parse_serve_command([*base, *flags])
    if config.vllm_version:
        version, source = config.vllm_version, "--vllm-version"
    if getattr(args, "vllm_version", None):
        version, source = args.vllm_version, "--vllm-version"
    if version is None and profile is not None:
        from sparktui.runtime.launch.vllm_version import detect

        found = detect(profile)
        version, source = found.version, found.source if found.version else found.describe()
    if version is None and image is not None:
        from sparktui.runtime.launch.vllm_version import from_image

        tagged = from_image(image, inspect=False)  # the tag says (vllm/vllm-openai:v0.20.0, NGC 26.01)
        if tagged is not None:
            version, source = tagged
    log_version = calibration_log_version(args)
    if version is None and log_version is not None:
        version, source = log_version, f"the log {args.calibrate_from}"  # before a pasted utilization is read
    elif version is not None and log_version is not None and not _same_release(version, log_version):
        # a calibration is keyed by, and holds for, the vLLM that measured it (graphs, profile and
        # non-torch accounting change between releases)
        raise UserError(
            f"--calibrate-from: {args.calibrate_from} was written by vLLM {log_version}, but {source} says "
            f"{version}; give the log of a start-up of {version}, or leave the version to the log"
        )
    if version is not None:
        config = config.replace(vllm_version=version)
    if (
        pasted_config is not None
        and "gpu_memory_utilization" not in parse_serve_command(["m", *flags]).model_fields_set
    ):
        # a pasted command is fitted as vLLM runs it: a utilization it leaves out is that vLLM's default
        left = utilization_left_to_vllm(pasted_config, config.vllm_version)
        if left is not None:
            config = config.replace(gpu_memory_utilization=left[0])
            args.left_to_vllm = [f"utilization {left[1]}"]
    return config, str(args.machine or machine_name), source


def _same_release(a: str, b: str) -> bool:
    from sparktui.core.calibration import release_version

    return release_version(a) == release_version(b)


def calibration_log_version(args: argparse.Namespace) -> str | None:
    """The vLLM release that wrote --calibrate-from LOG (a source build's '0.1.devN' names none)."""
    from sparktui.core.calibration import release_version

    figures = calibration_figures(args)
    version = None if figures is None else release_version(figures.version)
    return None if version is None else str(version)


def calibration_figures(args: argparse.Namespace) -> Any:
    """What --calibrate-from LOG says (None without the flag): the file read and its figures parsed once,
    kept on args, for the version and the calibration, whichever asks first."""
    from sparktui.commands.inspect_log import read_log_text
    from sparktui.core.calibration import read_log_figures
    from sparktui.errors import UserError

    log = getattr(args, "calibrate_from", None)
    if not log:
        return None
    if getattr(args, "calibrate_figures", None) is None:
        try:
            args.calibrate_figures = read_log_figures(read_log_text(log, "--calibrate-from"))
        except UserError as exc:
            raise UserError(f"--calibrate-from {log}: {exc}") from None
    return args.calibrate_figures


def config_file_read(pasted: list[str]) -> list[str] | None:
    """`vllm serve … --config FILE`: the lines saying what the file gave (vLLM's own reading)."""
    if "--config" not in pasted:
        return None
    import shlex
    from pathlib import Path

    from sparktui.core.vllm_config_file import config_file_args

    path = Path(pasted[pasted.index("--config") + 1]).expanduser()
    return [
        f"config     {path} (vllm serve --config; flags on the command line win): {shlex.join(config_file_args(path))}"
    ]


def read_lines(args: argparse.Namespace) -> list[str]:
    """What a recipe, a --config file or vLLM's own defaults gave the fit, shown above it."""
    recipe = getattr(args, "recipe", None)
    lines = recipe.lines() if recipe is not None else []
    return lines + (getattr(args, "config_file", None) or []) + (getattr(args, "left_to_vllm", None) or [])


def _row(label: str, n_bytes: float, source: str | None = None) -> str:
    return f"  {label:<44}{n_bytes / 1024**3:>9.2f}" + (f"  {source}" if source else "")


def render(result, spec, config, measured=None) -> str:
    from sparktui.core.modelspec.build import online_quantized
    from sparktui.core.modelspec.dtype import served_dtype

    # the model as the fit counted it (core.fit does the same): --dtype float32 doubled the weights
    # while this line still said the checkpoint's bfloat16
    served = served_dtype(online_quantized(spec, config.quantization), config.dtype)
    b = result.budget
    kv_label = "= KV cache (--kv-cache-memory-bytes)" if config.kv_cache_memory_bytes else "= KV cache"
    src = result.kv_memory_source  # per term: measured (a launch here), calibrated (a log) or predicted
    lines = [
        f"sparktui fit — {spec.name} on {result.machine}",
        f"model      {served.num_layers} layers, {served.dtype}"
        + (f", {served.quantization}" if served.quantization else "")
        + f"; weights {result.weights_bytes / 1024**3:.2f} GiB ({served.weights_source}); from {spec.source}",
        "",
        f"  {'budget':<44}{'GiB':>9}" + ("  source" if src else ""),
        _row("total visible to CUDA", b["total"]),
        _row(f"requested ({config.gpu_memory_utilization:g} × total)", b["requested"]),
        _row("− weights", b["weights"], src.get("weights")),
        _row("− activation peak", b["activation_peak"], src.get("activation_peak")),
        _row("− non-torch memory", b["non_torch"], src.get("non_torch")),
        _row("− CUDA graphs (estimate)", b["cuda_graphs"], src.get("cuda_graphs")),
        _row(kv_label, b["kv_cache"]),
        _row("CUDA context (outside the request)", b["cuda_context"]),
    ]
    if "sampler_at_run_time" in b:
        lines.append(_row("sampler at run time (outside the request)", b["sampler_at_run_time"]))
    if "os_left" in b:
        lines.append(_row(f"left for the OS (of {b['mem_total'] / 1024**3:.1f} GiB MemTotal)", b["os_left"]))
    if "mem_available" in b:
        lines.append(_row("MemAvailable before start", b["mem_available"]))
    if "per_cpu_free" in b:
        lines.append(_row("+ just freed, on per-CPU lists", b["per_cpu_free"]))
    if "vllm_free_memory" in b:
        lines.append(_row("free memory as this vLLM sees it (cudaMemGetInfo ≈ MemFree)", b["vllm_free_memory"]))
    if result.memory_working:
        lines += ["", "KV memory  how it was estimated (vLLM measures the non-torch and CUDA-graph terms at start-up)"]
        lines += [f"  {w}" for w in result.memory_working]
    lines += ["", f"KV cache   {result.kv_cache_dtype}, block {result.block_size} tokens"]
    lines += [f"  {w}" for w in result.working]
    lines.append(f"  = {result.kv_bytes_per_token:,} B per token ({result.kv_bytes_per_token / 1024:.0f} KiB)")
    lines.append(
        f"  → {result.kv_blocks:,} blocks, {result.kv_cache_tokens:,} tokens, maximum concurrency "
        f"{result.max_concurrency:.2f}× for {result.max_model_len:,} tokens per request"
    )
    lines += ["", f"vLLM       {result.vllm_version} ({result.vllm_version_source}); the rules this fit used:"]
    lines += [f"  - {r['key']} [{r['versions']}]: {r['summary']}" for r in result.vllm_rules]
    lines += ["", f"verdict    {VERDICT_WORDS.get(result.verdict, result.verdict.upper())}"]
    lines += [f"  - {r}" for r in result.reasons]
    if result.suggestions:
        lines += ["", "suggestions"] + [f"  - {s.text}" for s in result.suggestions]
    if result.notes:
        lines += ["", "notes"] + [f"  - {n}" for n in result.notes]
    lines += render_speed(result.speed, measured)
    flags = model_flags(spec, config)
    if flags:
        lines += ["", "flags this model may need (suggestions: add the ones you want)"]
        lines += [f"  {' '.join(f.argv()):<44} {f.why}" for f in flags]
    return "\n".join(lines)


def model_flags(spec, config) -> list:
    from sparktui.core.model_flags import suggest_flags

    return suggest_flags(spec, config)


def render_speed(est, measured=None) -> list[str]:
    """The speed section: one user, a few batch sizes, TTFT, and what the estimate assumes."""
    from sparktui.core.speed import describe_range, measured_line

    if est is None:
        return [
            "",
            "speed      not predicted: sparktui knows the bandwidth of a DGX Spark only (give --bandwidth GB/s)",
        ]
    lines = [
        "",
        f"speed      predicted on {est.hardware}" + (f", {est.calibration}" if est.calibration else ""),
        f"  one user   {describe_range(est)} at {est.context:,} tokens of context "
        f"(roofline {est.roofline_tok_s:.0f} tok/s, {est.efficiency:.0%} of it)",
        f"  TTFT       {est.ttft_s:.2f} s for a {est.prompt_tokens:,}-token prompt (prefill ≈{est.prefill_tok_s:,.0f} tok/s)",
        f"  {'users':>9}  {'tok/s each':>10}  {'aggregate':>9}  bound",
    ]
    lines += [f"  {u.users:>9}  {u.per_user_tok_s:>10.1f}  {u.aggregate_tok_s:>9.0f}  {u.bound}" for u in est.users]
    if measured:
        lines += [f"  {measured_line(run, predicted)}" for run, predicted in measured[-3:]]
    lines += [f"  assumes: {a}" for a in est.assumes]
    return lines


def history_runs() -> list:
    """Every run in `sparktui bench`'s history in the state dir (none if absent or unreadable)."""
    from sparktui import paths
    from sparktui.core.bench_history import history_lines, parse_history
    from sparktui.errors import UserError

    try:
        return parse_history(history_lines(paths.bench_history_path()))
    except (UserError, OSError) as exc:
        print(f"sparktui: warning: {exc}; the speed estimate leaves its measured runs out", file=sys.stderr)
        return []


def host_meminfo(machine_name: str) -> str | None:
    """This host's /proc/meminfo (MEMINFO) when `machine_name` uses it (core.machine.reads_host): `auto`
    needs it; a Spark takes this host's total when the host is one, and is planned for when unread."""
    from sparktui.core.machine import reads_host
    from sparktui.errors import UserError

    if not reads_host(machine_name):
        return None
    try:
        return MEMINFO.read_text()
    except OSError as exc:
        if machine_name.strip().lower() == "auto":
            raise UserError(f"--machine auto: cannot read {MEMINFO}: {exc.strerror}") from None
        return None


def host_mem_total() -> int | None:
    """This host's MemTotal (bench history measured here applies to a machine of its size)."""
    from sparktui.core.machine import Machine
    from sparktui.errors import UserError

    try:
        host = Machine.from_meminfo(MEMINFO.read_text())
    except (OSError, UserError):
        return None
    return host.mem_total if host is not None else None


def _context(text: str | None, max_model_len: int) -> int | None:
    from sparktui.errors import UserError

    if text is None:
        return None
    try:
        tokens = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise UserError(f"--context {text}: expected a whole number of tokens such as 32768")
    if tokens > max_model_len:
        raise UserError(
            f"--context {text}: more than --max-model-len {max_model_len:,}; raise --max-model-len or lower --context"
        )
    return tokens


def apply_speed(result, spec, config, machine, bandwidth: str | None, context: str | None = None) -> list:
    """Set result.speed as core.fit_speed decides it (--bandwidth, --context, this host's bench
    history); returns the measured runs used, each with what the uncorrected model predicted for it."""
    from sparktui.core.fit_speed import bandwidth_setting, speed_for_fit

    runs = history_runs()  # read (and warned about) whether or not they apply to this machine
    speed = speed_for_fit(
        result.served_spec or spec,  # the weights as served (--dtype, drafter), as the fit's own figure
        config,
        machine,
        max_model_len=result.max_model_len,
        max_concurrency=result.max_concurrency,
        bandwidth_gbs=bandwidth_setting(bandwidth, os.environ),
        context=_context(context, result.max_model_len),
        host_mem_total=None if machine.name == "auto" else host_mem_total(),
        history=lambda: runs,
    )
    result.speed = speed.estimate
    return list(speed.measured)


def run(args: argparse.Namespace) -> int:
    from sparktui.core.fit import fit
    from sparktui.core.machine import host_for, machine_from_name
    from sparktui.core.modelspec import catalog_names, load_serving_spec
    from sparktui.core.units import GiB
    from sparktui.errors import UserError
    from sparktui.runtime.hub import HubFetcher

    if args.list_models:
        print("\n".join(catalog_names()))
        return 0
    env: dict[str, str] = {}
    config, machine_name, version_source = build_config(args, env)
    meminfo = host_meminfo(machine_name)
    machine = machine_from_name(machine_name, host_for(machine_name, meminfo))
    if machine.name != "auto":  # a Spark's reading gives its total; its MemAvailable stays the idle one
        meminfo = None
    mem_available = None
    if args.mem_available is not None:
        try:
            mem_available = int(float(args.mem_available) * GiB)
        except ValueError:
            raise UserError(
                f"--mem-available: got {args.mem_available!r}; expected a size in GiB such as 110"
            ) from None
        if mem_available <= 0:
            raise UserError(f"--mem-available: got {args.mem_available!r}; expected a positive size in GiB")
    fetcher = HubFetcher(offline=bool(getattr(args, "offline", False)))
    spec = load_serving_spec(config.model, config.speculation, fetcher=fetcher)
    allow_long = env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in ("1", "true", "yes")
    config, calibration = find_calibration(args, config, spec, machine)
    free_lists = 0
    if meminfo is not None and mem_available is None:  # this host's reading: as preflight counts it
        from sparktui.runtime.host.memory import read_per_cpu_free

        free_lists = read_per_cpu_free()
    result = fit(
        config,
        spec,
        machine,
        mem_available=mem_available,
        vllm_version_source=version_source,
        allow_long_max_model_len=allow_long,
        calibration=calibration,
        free_lists=free_lists,
        speed=False,  # apply_speed estimates it once, with --bandwidth, --context and the bench history
    )
    others = sorted(name for name in env if name != "VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    if others:  # names only: values may be secrets
        result.notes.append(f"environment not modelled (passed to vLLM as it is): {', '.join(others)}")
    measured = apply_speed(result, spec, config, machine, args.bandwidth, args.context)
    grid = None
    if getattr(args, "grid", False):
        from sparktui.core.grid import build_grid

        def run_fit(cell_config: Any) -> Any:
            # the grid shows verdicts, no speed: a cell's estimate would go unread
            return fit(cell_config, spec, machine, mem_available=mem_available, free_lists=free_lists,
                       vllm_version_source=version_source, allow_long_max_model_len=allow_long,
                       speed=False)  # fmt: skip

        grid = build_grid(config, spec, machine, result, run_fit)
    if args.json:
        data = result.to_dict()
        if measured and data.get("speed"):
            data["speed"]["measured"] = [
                {"users": run.users, "measured_tok_s": run.decode_tok_s, "predicted_tok_s": round(predicted, 2),
                 "vllm_version": run.vllm_version}
                for run, predicted in measured
            ]  # fmt: skip
        data["model_flags"] = [f.to_dict() for f in model_flags(spec, config)]
        if grid is not None:
            data["grid"] = grid.to_dict()
        if args.recipe is not None:
            data["recipe"] = args.recipe.to_dict()
        if args.config_file:
            data["config_file"] = args.config_file
        if args.left_to_vllm:
            data["left_to_vllm"] = args.left_to_vllm
        cluster = cluster_fit(args, config, spec, machine, mem_available)
        if cluster is not None:
            data["cluster"] = cluster.to_dict()
        json.dump(data, sys.stdout, indent=1)
        print()
    else:
        if read_lines(args):
            print("\n".join([*read_lines(args), ""]))
        print(render(result, spec, config, measured))
        if grid is not None:
            from sparktui.core.grid import render_grid

            print("\n".join(["", "trade-off grid (each cell a fit with those flags)", *render_grid(grid)[1:]]))
        cluster = cluster_fit(args, config, spec, machine, mem_available)
        if cluster is not None:
            print(render_cluster(cluster))
    verdict = result.verdict if cluster is None else cluster.verdict
    return 0 if verdict in ("fits", "tight") else 1


def find_calibration(args: argparse.Namespace, config: Any, spec: Any, machine: Any) -> tuple[Any, Any]:
    """(config, the Calibration to fit with): from --calibrate-from LOG (kept for this box), else
    the newest launch of this model, vLLM version and machine recorded here, if any."""
    import datetime

    from sparktui.core.calibration import best_match
    from sparktui.core.fit_key import calibration_key, calibration_of_log
    from sparktui.runtime import calibrations

    log = getattr(args, "calibrate_from", None)
    if not log:
        key = calibration_key(config, spec, machine)
        return config, best_match(calibrations.load(), key.model, key.vllm_version, key.machine, key.flags)
    calibration = calibration_of_log(
        config,
        spec,
        machine,
        calibration_figures(args),
        where=str(log),
        source="calibrated",
        date=datetime.date.today().isoformat(),
    )
    try:
        calibrations.record(calibration)
    except OSError as exc:
        print(f"sparktui: could not keep the calibration ({exc.strerror}); this fit uses it", file=sys.stderr)
    return config, calibration


def cluster_fit(args: argparse.Namespace, config: Any, spec: Any, machine: Any, mem_available: int | None) -> Any:
    """The fit per node when the profile has a [cluster] (two Sparks serving one model), else None."""
    from sparktui.core.cluster import fit_cluster
    from sparktui.core.profiles import load_profile

    profile_arg = _split(list(args.extra))[0]
    cluster = load_profile(profile_arg, model=config.model).cluster if profile_arg else None
    return None if cluster is None else fit_cluster(config, spec, machine, cluster, mem_available)


def render_cluster(cluster: Any) -> str:
    from sparktui.core.fit import VERDICTS

    head, limiting = cluster.nodes[0].result.verdict, cluster.limiting
    lines = [
        "",
        f"cluster    {cluster.verdict.replace('_', ' ')}: one rank per node; the head also runs the API server",
        f"           {cluster.limit_text()}",
    ]
    for node in cluster.nodes:
        r = node.result
        extra = f", +{node.extra_bytes / 1024**3:.2f} GiB beside vLLM" if node.extra_bytes else ""
        held = limiting.result.kv_cache_tokens
        held_note = f" (vLLM holds it to {held:,})" if r.kv_cache_tokens > held else ""
        lines.append(
            f"  {node.role:<7}{node.host:<20}{r.verdict.replace('_', ' '):<11}weights {r.weights_bytes / 1024**3:.2f} GiB, "
            f"KV {r.kv_cache_tokens:,} tokens{held_note}{extra}"
        )
        # the head's reasons, the node whose KV every rank gets, and any node judged worse than the head
        said = node.role == "head" or node is limiting or VERDICTS.index(r.verdict) > VERDICTS.index(head)
        lines.extend(f"           {reason}" for reason in r.reasons if r.verdict != "fits" and said)
    return "\n".join(lines)
