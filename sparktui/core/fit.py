"""Will `vllm serve` with these flags start on this machine, and what will it get?

Pure arithmetic over a ModelSpec and a ServeConfig, mirroring vLLM's start-up
(v1/worker/gpu_worker.py determine_available_memory, v1/core/kv_cache_utils.py) for the vLLM
version that will run: where versions differ, core/vllm_rules.py says how, with its sources.

    requested   = ceil(total × gpu_memory_utilization)       refused if free memory < requested
    KV memory   = requested − weights − activation peak − non-torch − CUDA-graph estimate
                  (or --kv-cache-memory-bytes as given)
    KV blocks   = KV memory // bytes per block (one block of every layer in the largest group)
    concurrency = blocks / blocks one max_model_len request takes (summed over layer groups)
    KV tokens   = int(concurrency × max_model_len)           (vLLM ≥ 0.20.1; older: see vllm_rules)

A fit takes well under a millisecond (0.15–0.2 ms for the catalog models on the 2-core dev box), so
the TUI can run it on every keystroke.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any

from sparktui.core.calibration import TERMS, Calibration, differences, machine_key
from sparktui.core.config import ServeConfig, flag_by_field
from sparktui.core.fit_key import term_flags
from sparktui.core.fit_settings import (
    FitSettings,
    GraphEstimate,
    activation_bytes,
    cudagraph_estimate,
    drafter_pass_bytes,
    encoder_term,
    moe_workspace_per_token,
    nvfp4_moe_padding,
    profile_activation,
    rules_of,
    settings_from,
    v1_sampler_pass_bytes,
)
from sparktui.core.fit_speed import speed_for_fit
from sparktui.core.kv_plan import DEFAULT_BLOCK_SIZE, KvPlan, kv_dtype_bytes, plan_kv
from sparktui.core.machine import (
    Machine,
    dgx_spark,
    machine_from_name,
)
from sparktui.core.modelspec import ModelSpec, online_quantized
from sparktui.core.modelspec.drafters import dflash_as_built
from sparktui.core.modelspec.dtype import served_dtype
from sparktui.core.modelspec.multimodal import language_model_only, zero_limit_towers
from sparktui.core.record import record
from sparktui.core.speed import SpeedEstimate
from sparktui.core.startup_refusals import startup_refusals
from sparktui.core.units import GB, GiB
from sparktui.core.vllm_free_memory import cuda_free_figure, free_memory_note
from sparktui.core.vllm_rules import (
    CUDAGRAPH_FIRST_CAPTURE,
    DISCRETE_NON_TORCH,
    FLASHINFER_FULL_FIRST_CAPTURE,
    FLASHINFER_FULL_PER_GRAPH,
    INSTANTTENSOR_NON_TORCH,
    UMA_NON_TORCH,
    UMA_RELAUNCH,
    VllmRules,
)

VERDICTS = ("fits", "tight", "wont_start", "unsafe")


# --------------------------------------------------------------------------- the fit


@record
class Suggestion:
    """One piece of advice; `changes` (ServeConfig field -> value) is the edit it stands for,
    {} when it is advice rather than one edit. Apply with `config.replace(**changes)`."""

    text: str
    changes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "set": {flag_by_field(k).name: v for k, v in self.changes.items()}}


@record(frozen=False)
class FitResult:
    """The fit's verdict for one configuration, with its memory budget, KV figures and advice."""

    verdict: str
    reasons: list[str]
    suggestions: list[Suggestion]
    budget: dict[str, int]
    weights_bytes: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    kv_blocks: int = 0
    kv_bytes_per_request: int = 0  # KV one request of max_model_len takes (whole blocks, every group)
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_dtype: str = "auto"
    working: list[str] = field(default_factory=list)
    memory_working: list[str] = field(default_factory=list)  # how the KV memory was estimated
    kv_cache_bytes_low: int = 0  # KV memory at the ends of vLLM's measured figures' spread
    kv_cache_bytes_high: int = 0
    longest_max_model_len: int = 0
    machine: str = ""
    cuda_total: dict[str, int | str] = field(default_factory=dict)  # assumed, low, high, basis (Machine.total_dict)
    model: str = ""
    notes: list[str] = field(default_factory=list)
    vllm_version: str = ""
    vllm_version_source: str = ""  # where the version came from ("--vllm-version", a venv, assumed)
    # the version-dependent rules this fit used: key, span, value, summary, source (vllm_rules.Rule)
    vllm_rules: list[dict[str, str]] = field(default_factory=list)
    speed: SpeedEstimate | None = None  # None where sparktui does not know the machine's bandwidth
    # per budget term: "measured" (a launch on this box), "calibrated" (--calibrate-from LOG) or "predicted"
    kv_memory_source: dict[str, str] = field(default_factory=dict)
    calibration: list[str] = field(default_factory=list)  # which launch, and the terms whose flags changed
    # the spec as vLLM builds it for these flags (--dtype, the drafter, the towers left out): what the
    # speed is predicted on; not in to_dict
    served_spec: ModelSpec | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "machine": self.machine,
            "cuda_total": dict(self.cuda_total),
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "vllm_rules": [dict(r) for r in self.vllm_rules],
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "suggestions": [x.to_dict() for x in self.suggestions],
            "budget": dict(self.budget),
            "weights_bytes": self.weights_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_blocks": self.kv_blocks,
            "kv_bytes_per_request": self.kv_bytes_per_request,
            "block_size": self.block_size,
            "max_model_len": self.max_model_len,
            "max_concurrency": round(self.max_concurrency, 4),
            "longest_max_model_len": self.longest_max_model_len,
            "kv_working": list(self.working),
            "kv_memory_working": list(self.memory_working),
            "kv_cache_bytes_low": self.kv_cache_bytes_low,
            "kv_cache_bytes_high": self.kv_cache_bytes_high,
            "notes": list(self.notes),
            "kv_memory_source": dict(self.kv_memory_source),
            "calibration": list(self.calibration),
            "predicted_decode_tok_s": round(self.speed.decode_tok_s, 1) if self.speed else None,
            "predicted_ttft_s": round(self.speed.ttft_s, 3) if self.speed else None,
            "speed": self.speed.to_dict() if self.speed else None,
        }


# how the V1 sampler pass runs top-k / top-p (vllm_rules v1_sampler_top_k_top_p; fit_settings.v1_sampler_pass_bytes)
_V1_SAMPLER_PATHS = {
    "sort_copy": "sorted in fp32 (7 copies with bf16 logits)",
    "triton_from_8": "in a Triton kernel from 8 requests (3.5 fp32 copies and its buffer), else sorted (6)",
    "triton": "in a Triton kernel (3.5 fp32 copies and its buffer)",
}


def _g(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _kv_left(kv_memory: int) -> str:
    """The KV memory the terms leave: never below nothing (a KV cache has no negative size); when the
    terms pass the request, by how much, so the working still adds up."""
    if kv_memory >= 0:
        return _g(kv_memory)
    return f"{_g(0)}: the other terms pass the request by {_g(-kv_memory)}"


@record
class _Core:
    """The numbers one configuration produces, before verdicts."""

    requested: int
    weights: int
    activation: int
    non_torch: int
    graphs: int
    kv_memory: int
    plan: KvPlan
    blocks: int
    tokens: int
    concurrency: float
    kv_bytes: int
    kv_name: str
    fixed: int  # everything inside the request except the KV cache
    kv_low: int = 0  # the KV memory with vLLM's own measurements at the ends of the spread seen
    kv_high: int = 0
    memory_working: tuple[str, ...] = ()
    unreserved: int = 0  # what the server may take beyond its request at run time (V2 sampler)
    span: bool = False  # the KV range also spans the machine's CUDA totals


def _plan(spec: ModelSpec, s: FitSettings, kv_bytes: float) -> KvPlan:
    """The KV plan for these settings: one place that spells out plan_kv's arguments."""
    return plan_kv(
        spec,
        kv_bytes,
        s.block_size,
        s.tp,
        s.max_num_batched_tokens,
        s.prefix_caching,
        s.num_spec,
        s.mtp,
        s.rules,
        s.async_scheduling,
        s.mamba_ssm_dtype,
    )


def rank_weights(spec: ModelSpec, s: FitSettings) -> int:
    """What one tensor-parallel rank loads (before kernel padding): the weights (and the MTP / drafter
    weights when speculating) split across the ranks, the rope caches whole on each (ModelSpec.rope_cache_bytes)."""
    sharded = spec.weights_bytes - spec.rope_cache_bytes + (spec.mtp_weights_bytes if s.mtp else 0)
    weights = sharded // s.tp + spec.rope_cache_bytes
    if s.rules.value("mrope_cache_positions") == "x1_qwen3_vl":  # a quarter of the × 4 M-RoPE cache
        weights -= spec.mrope_cache_bytes * 3 // 4
    return weights


def _core(
    spec: ModelSpec,
    s: FitSettings,
    machine: Machine,
    utilization: float | None = None,
    kv_cache_dtype: str | None = None,
    max_len: int | None = None,
    explain: bool = True,
    measured: dict[str, int] | None = None,
) -> _Core:
    """`measured`: the terms (calibration.TERMS) a launch of the same key measured on this box,
    used in place of the model's."""
    measured = measured or {}
    util = s.utilization if utilization is None else utilization
    kv_bytes, kv_name = kv_dtype_bytes(spec, s.kv_cache_dtype if kv_cache_dtype is None else kv_cache_dtype, s.rules)
    plan = _plan(spec, s, kv_bytes)
    requested = math.ceil(machine.total * util)
    # a machine that may report another CUDA total (a Spark's firmware decides it): the ends of the KV range
    span = [math.ceil(t * util) - requested for t in machine.totals()] if not measured else [0, 0]
    weights = rank_weights(spec, s)
    # CUTLASS NVFP4 MoE kernels pad the experts as they load: counted where the GPU is known to run them,
    # only in the low end of the range where it is not known
    fp4_padding = nvfp4_moe_padding(spec, s.tp)
    weights += fp4_padding if machine.fp4 else 0
    fp4_unknown = fp4_padding if machine.fp4 is None else 0
    sampler_path = s.rules.value("v1_sampler_top_k_top_p")
    forward, sampler = profile_activation(spec, s, machine.sms)
    # a multimodal model's profile encodes dummy items first and keeps their outputs through the
    # dummy forward and the sampler pass (gpu_model_runner.py profile_run)
    encoder = encoder_term(spec, s)
    kept = encoder.outputs if encoder else 0
    forward, sampler = forward + kept, sampler + kept
    # then the drafter's own dummy pass, with the target's hidden states still held
    drafter = drafter_pass_bytes(spec, s) + kept if s.num_spec else 0
    activation = max(forward, sampler, encoder.forward if encoder else 0, drafter)
    # The V2 runner's profile leaves the top-k / top-p pass out ("the sampler may skip top_k, top_p,
    # and logprobs, using less GPU memory than what is possible during actual execution"): at run
    # time that pass can take what V1 would have reserved, outside the request.
    unreserved = 0
    if s.model_runner == "v2":
        # the encoder's outputs stay held through it, as through the V1 profile's own sampler pass
        top_k_pass = v1_sampler_pass_bytes(spec, s.max_num_batched_tokens, s.max_num_seqs, sampler_path, machine.sms)
        top_k_pass += kept
        unreserved = max(0, max(forward, top_k_pass) - activation)
    estimate = cudagraph_estimate(spec, s, machine, kv_bytes, plan)
    graphs = estimate.bytes if s.cuda_graphs_counted else 0
    loader, loader_spread = 0, (0, 0)
    if s.load_format == "instanttensor" and machine.unified and s.rules.value("instanttensor_loader") == "present":
        loader, loader_spread = INSTANTTENSOR_NON_TORCH.bytes, INSTANTTENSOR_NON_TORCH.spread_bytes
    non_torch = machine.non_torch
    nt = UMA_NON_TORCH if machine.unified else DISCRETE_NON_TORCH
    nt_low, nt_high = nt.spread_bytes if machine.non_torch == nt.bytes else (machine.non_torch, machine.non_torch)
    g_low, g_high = (estimate.low, estimate.high) if s.cuda_graphs_counted else (0, 0)
    if "weights" in measured:
        weights = measured["weights"]
    if "activation_non_torch" in measured:  # vLLM's own figure holds both, and the loader's
        activation, non_torch, loader, loader_spread = measured["activation_non_torch"], 0, 0, (0, 0)
        nt_low = nt_high = 0
    if "cuda_graphs" in measured:
        graphs = g_low = g_high = measured["cuda_graphs"]
    fixed = weights + activation + non_torch + loader + graphs
    kv_memory = s.kv_cache_memory_bytes if s.kv_cache_memory_bytes else requested - fixed
    length = s.max_model_len if max_len is None else max_len
    blocks, tokens, conc = plan.capacity(kv_memory, length)
    how: tuple[str, ...] = ()
    if s.kv_cache_memory_bytes:
        kv_low = kv_high = kv_memory
        how = (f"KV memory {_g(kv_memory)}: as given by --kv-cache-memory-bytes (no profiling)",)
    else:
        kv_low = requested + span[0] - weights - activation - nt_high - g_high - loader_spread[1] - fp4_unknown
        kv_high = requested + span[1] - weights - activation - nt_low - g_low - loader_spread[0]
        if "activation_non_torch" in measured and machine.unified:
            # one launch's MemAvailable-based figures do not repeat: the next launch's can move this far
            kv_low, kv_high = kv_low - UMA_RELAUNCH.bytes, kv_high + UMA_RELAUNCH.bytes
    if explain and not s.kv_cache_memory_bytes and measured:
        how = _measured_working(
            s, machine, requested, (weights, activation, graphs), (kv_low, kv_memory, kv_high), measured
        )
    elif explain and not s.kv_cache_memory_bytes:
        how = _memory_working(
            s, machine, requested, weights, (forward, sampler), estimate, graphs, kv_memory, (kv_low, kv_high), spec
        )
    if loader and explain and not s.kv_cache_memory_bytes:
        how = (
            *how,
            f"− InstantTensor loader {_g(loader)} more non-torch memory ({INSTANTTENSOR_NON_TORCH.describe()}); "
            "it sizes its buffers by MemFree, so a full page cache can make it abort or crawl: drop caches first",
        )
    if encoder and explain and not s.kv_cache_memory_bytes and "activation_non_torch" not in measured:
        how = (*how, f"  (the activation peak holds the {encoder.describe()})")
    if (
        drafter > max(forward, sampler)
        and explain
        and not s.kv_cache_memory_bytes
        and "activation_non_torch" not in measured
    ):
        how = (
            *how,
            f"  (the activation peak is the {s.speculative_method} drafter's profile pass, {_g(drafter)}: it runs over "
            f"{s.max_num_batched_tokens:,} tokens while the target's hidden states are held)",
        )
    if unreserved and explain:
        how = (
            *how,
            f"+ up to {_g(unreserved)} outside the request at run time: the V2 model runner's profile skips "
            "the sampler's top-k / top-p pass (counted against what the OS is left)",
        )
    return _Core(
        requested,
        weights,
        activation,
        non_torch + loader,
        graphs,
        kv_memory,
        plan,
        blocks,
        tokens,
        conc,
        kv_bytes,
        kv_name,
        fixed,
        kv_low,
        kv_high,
        how,
        unreserved,
        span != [0, 0] and not s.kv_cache_memory_bytes,
    )


def _measured_working(
    s: FitSettings,
    machine: Machine,
    requested: int,
    terms: tuple[int, int, int],
    kv: tuple[int, int, int],
    measured: dict[str, int],
) -> tuple[str, ...]:
    """The KV memory from the terms a launch measured, and the ones modelled beside them; `terms` are
    (weights, activation, graphs), `kv` the KV memory (low end, figure, high end)."""
    weights, activation, graphs = terms
    low, kv_memory, high = kv

    def how(term: str) -> str:
        return "measured" if term in measured else "modelled (its flags changed since the launch)"

    rest = "activation peak + non-torch"
    relaunch = "activation_non_torch" in measured and machine.unified
    return (
        f"request {_g(requested)} = ceil({s.utilization:g} × {_g(machine.total)} CUDA total)",
        f"− weights {_g(weights)}: {how('weights')}",
        f"− {rest} {_g(activation + (0 if 'activation_non_torch' in measured else machine.non_torch))}: "
        f"{how('activation_non_torch')}",
        f"− CUDA graphs {_g(graphs)}: {how('cuda_graphs')}",
        f"= KV memory {_kv_left(kv_memory)}"
        + (
            f" (between {_g(max(low, 0))} and {_g(max(high, 0))}: on unified memory vLLM measures non-torch "
            f"memory off the whole machine, and launches of one configuration have moved by up to "
            f"{UMA_RELAUNCH.value:g} GiB)"
            if relaunch
            else ""
        ),
    )


_NON_TORCH_WINDOW = {  # vllm_rules non_torch_window
    "profile_run": "its growth outside torch from the worker's start to the end of the profile run",
    "profile_run_and_cudagraph_profiling": "its growth outside torch from the worker's start to the end of the "
    "profile run and the CUDA-graph profiling",
}


def _memory_working(
    s: FitSettings,
    machine: Machine,
    requested: int,
    weights: int,
    activation: tuple[int, int],
    estimate: GraphEstimate,
    graphs: int,
    kv_memory: int,
    kv_range: tuple[int, int],
    spec: ModelSpec,
) -> tuple[str, ...]:
    """How the KV memory was estimated, one line per term, with where each figure comes from."""
    forward, sampler = activation
    nt = UMA_NON_TORCH if machine.unified else DISCRETE_NON_TORCH
    fp4 = nvfp4_moe_padding(spec, s.tp)
    padding = ""
    if fp4 and machine.fp4:
        padding = f", + {_g(fp4)} the CUTLASS NVFP4 MoE kernels pad the experts with"
    elif fp4 and machine.fp4 is None:
        padding = f"; + {_g(fp4)} in the low end if the GPU runs FP4 natively (CUTLASS NVFP4 MoE padding)"
    seqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    window = s.rules.value("non_torch_window") if estimate.piecewise + estimate.full else "profile_run"
    accounting = {
        "weights_peak_non_torch": "weights + torch peak increase + non-torch increase",
        "consumed_plus_headroom": "free memory lost since start (weights, non-torch) + transient torch peak",
    }[s.rules.value("non_kv_accounting")]
    lines = [
        f"vLLM {s.rules.version} counts outside the KV cache: {accounting}"
        + (", and its CUDA-graph estimate" if graphs else ""),
        f"request {_g(requested)} = ceil({s.utilization:g} × {_g(machine.total)} CUDA total)"
        + machine.span_note(s.utilization),
        f"− weights {_g(weights)} (the checkpoint{', per tensor-parallel rank' if s.tp > 1 else ''}{padding})",
        f"− activation peak {_g(max(forward, sampler))}: the profile run's larger pass — forward over "
        f"{s.max_num_batched_tokens:,} tokens {_g(forward)}, sampler over {seqs:,} × {spec.vocab_size:,} "
        + (
            f"logits, top-k / top-p {_V1_SAMPLER_PATHS[s.rules.value('v1_sampler_top_k_top_p')]} (V1 model runner) "
            f"{_g(sampler)}"
            if s.model_runner == "v1"
            else f"logits in the model's dtype{' × 2 (soft-capped)' if spec.logit_softcap else ''}, the "
            f"forward's hidden states held (V2 model runner) {_g(sampler)}"
        ),
        f"− non-torch {_g(machine.non_torch)}: measured by vLLM at start-up ({_NON_TORCH_WINDOW[window]}), not knowable before; "
        f"{'on unified memory it is MemAvailable that moves, ' if machine.unified else ''}"
        f"seen {nt.low:g}–{nt.high:g} GiB",
    ]
    if estimate.piecewise + estimate.full == 0:
        lines.append("− CUDA graphs 0 (none captured: --enforce-eager or cudagraph_mode NONE)")
    else:
        counted = (
            "subtracted"
            if graphs
            else f"not subtracted by vLLM {s.rules.version} ({s.rules.value('cudagraph_estimate')})"
        )
        if estimate.backend == "flashinfer":
            fi, per = FLASHINFER_FULL_FIRST_CAPTURE, FLASHINFER_FULL_PER_GRAPH
            which = (
                f"FlashInfer FULL graphs over {estimate.groups} attention KV-cache group(s): "
                f"{estimate.groups} × workspace ({_g(estimate.workspace)} in all) + {estimate.groups} × "
                f"{fi.value:g} MiB first capture (seen {fi.low:g}–{fi.high:g}) + {estimate.groups} × "
                f"{per.value:g} MiB per further FULL graph"
            )
        else:
            first = CUDAGRAPH_FIRST_CAPTURE
            which = f"first capture {first.value:g} GiB (seen {first.low:g}–{first.high:g}) + each further graph"
        lines.append(
            f"− CUDA graphs {_g(graphs)}: {estimate.piecewise} PIECEWISE + {estimate.full} FULL graphs, "
            f"{which}; estimate {_g(estimate.bytes)}, {counted}"
        )
    low, high = kv_range
    lines.append(
        f"= KV memory {_kv_left(kv_memory)} (between {_g(max(low, 0))} and {_g(max(high, 0))} across the "
        f"non-torch and CUDA-graph figures vLLM has measured on real start-ups"
        + (" and the machine's CUDA totals)" if machine.span_note(s.utilization) else ")")
    )
    return tuple(lines)


def fit(
    config: ServeConfig,
    spec: ModelSpec,
    machine: Machine,
    mem_available: int | None = None,
    vllm_version_source: str = "",
    *,
    allow_long_max_model_len: bool = False,
    calibration: Calibration | None = None,
    mem_free: int | None = None,
    free_lists: int = 0,
    speed: bool = True,
) -> FitResult:
    """Predict vLLM's start-up for `config` (a ServeConfig) on `machine`, for the vLLM version
    config.vllm_version names (`vllm_version_source` says where it came from, for the result).
    With `allow_long_max_model_len` (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) the model's own length
    limit is not enforced, as vLLM then only warns. With `calibration` (a launch's own figures for
    this model, vLLM version and machine) the terms whose flags have not changed are the measured ones.
    `mem_free` (MemFree, with `mem_available`): where the vLLM that runs reads free memory with
    cudaMemGetInfo on unified memory, which leaves out the page cache, its start-up check is judged on
    that figure. `free_lists`: free pages on the kernel's per-CPU lists (just freed by a server that
    ended), which MemAvailable leaves out until they drain: a start-up that fits only with them is tight.
    `speed` False: no speed on the result; the caller estimates it once, with its own inputs
    (core.fit_speed.speed_for_fit: `sparktui fit`'s flags, the panel's bench history)."""
    spec = served_dtype(online_quantized(spec, config.quantization), config.dtype)
    if allow_long_max_model_len and spec.max_len_limit:
        limit_note = (
            f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: the model's own limit ({spec.max_len_key} = "
            f"{spec.max_len_limit:,}) is not enforced; positions past it give garbage"
        )
        spec = replace(spec, max_len_limit=0, max_len_key="", notes=(*spec.notes, limit_note))
    s = settings_from(config, spec, machine)
    spec, drafter_refusal = dflash_as_built(spec, s.rules) if s.mtp else (spec, None)
    lmo_refusal = None
    if config.language_model_only:
        spec, lmo_refusal = language_model_only(spec, s.rules)
    elif config.limit_mm_per_prompt:
        spec = zero_limit_towers(spec, s.rules, config.limit_mm_per_prompt)
    measured, sources, calibration_lines = _calibrated_terms(config, spec, s, machine, calibration)
    c = _core(spec, s, machine, explain=not s.auto_len, measured=measured)
    upper = spec.max_len_limit or max(s.max_model_len, spec.max_position_embeddings or 0)
    longest = c.plan.max_len(c.kv_memory, upper) if c.kv_memory > 0 else 0
    max_len = s.max_model_len
    if s.auto_len:  # --max-model-len -1: vLLM picks the longest that fits
        max_len = max(1, min(longest, s.max_model_len))
        c = _core(spec, s, machine, max_len=max_len, measured=measured)

    free = mem_available if mem_available is not None else machine.mem_available
    assumed = mem_available is None and machine.assumed_available
    vllm_free = cuda_free_figure(s.rules, machine, free, mem_free)
    # vLLM's own CUDA context is made before it compares free memory with the request.
    check_free = vllm_free if vllm_free is not None else free
    free_at_check = None if check_free is None else check_free - machine.cuda_context
    uses = ((c.fixed + c.kv_memory) if s.kv_cache_memory_bytes else c.requested) + c.unreserved
    os_left = machine.mem_total - uses - machine.cuda_context if machine.unified else None

    budget = {
        "total": machine.total,
        "requested": c.requested,
        "weights": c.weights,
        "activation_peak": c.activation,
        "non_torch": c.non_torch,
        "cuda_graphs": c.graphs,
        "kv_cache": max(0, c.kv_memory),
        "cuda_context": machine.cuda_context,
    }
    if c.unreserved:  # taken at run time beyond the request (the V2 runner's unprofiled sampler pass)
        budget["sampler_at_run_time"] = c.unreserved
    if machine.unified:
        budget["mem_total"] = machine.mem_total
        budget["os_left"] = os_left or 0
    if free is not None:
        budget["mem_available"] = free
    if free_lists > 0:
        budget["per_cpu_free"] = free_lists
    if vllm_free is not None:
        budget["vllm_free_memory"] = vllm_free  # what vLLM's start-up check will see (cudaMemGetInfo)

    reasons: list[str] = []
    wont = unsafe = tight = False
    util = s.utilization
    if spec.max_len_limit and not s.auto_len and max_len > spec.max_len_limit:
        wont = True
        reasons.append(
            f"--max-model-len {max_len:,} is longer than the model's own limit ({spec.max_len_key} = "
            f"{spec.max_len_limit:,} in its config); vLLM refuses to start unless "
            f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, and positions past the limit give garbage"
        )
    refusals = startup_refusals(spec, s, machine, config.speculation, drafter_refusal, lmo_refusal)
    if c.plan.unify_error:
        refusals.append(c.plan.unify_error)
    if refusals:
        wont = True
        reasons.extend(refusals)
    if machine.unified and util > 0.90:
        unsafe = True
        reasons.append(
            f"--gpu-memory-utilization {util:g} is above 0.90 on unified memory: the OS shares "
            f"this pool and the machine can hang instead of failing cleanly"
        )
    if os_left is not None:
        if os_left < machine.os_need_min:
            unsafe = True
            reasons.append(
                f"the OS is left {_g(os_left)} of {_g(machine.mem_total)}, less than the "
                f"{machine.os_need_min / GB:.0f}–{machine.os_need / GB:.0f} GB it needs"
            )
        elif os_left < machine.os_need:
            tight = True
            reasons.append(
                f"the OS is left only {_g(os_left)} (it needs {machine.os_need_min / GB:.0f}–"
                f"{machine.os_need / GB:.0f} GB)"
            )
    if free_at_check is not None:
        lists = f"the {_g(free_lists)} just freed on the kernel's per-CPU lists"
        if free_at_check < c.requested:
            seen = (
                f"vLLM {s.rules.version}'s own figure, cudaMemGetInfo ≈ MemFree {_g(free_at_check + machine.cuda_context)}"
                f" (MemAvailable {_g(free or 0)})"
                if vllm_free is not None
                else f"MemAvailable {_g(free_at_check + machine.cuda_context)}"
            )
            short = (
                f"free memory at start-up ({_g(free_at_check)}{', assumed idle' if assumed else ''}: "
                f"{seen} less vLLM's CUDA context) is less than the request "
                f"({util:g} × {_g(machine.total)} = {_g(c.requested)})"
            )
            if free_at_check + free_lists >= c.requested:
                # vLLM's check reads MemAvailable (or MemFree): it passes only once the lists drain into it
                tight = True
                reasons.append(
                    f"{short}; with {lists} it is enough, "
                    "but vLLM's own check may run before they drain into MemAvailable (start again if it refuses)"
                )
            else:
                wont = True
                reasons.append(f"{short}{f', even with {lists}' if free_lists > 0 else ''}; vLLM refuses to start")
        elif free_at_check - c.requested < GiB:
            tight = True
            reasons.append(
                f"only {_g(free_at_check - c.requested)} of free memory above the request; "
                f"anything else that starts will stop vLLM starting"
            )
    # vLLM measures non-torch and CUDA-graph memory itself at start-up: where the high end of what real
    # start-ups measured would hold one request and the median would not, the range straddles the line
    straddles = c.kv_high > 0 and (not c.plan.groups or c.plan.fits_one(c.kv_high, max_len))
    maybe = f"; at the favourable end of vLLM's own start-up measurements {_g(c.kv_high)} is left, so it may start"
    if c.kv_memory <= 0:
        wont, tight = (wont, True) if straddles else (True, tight)
        reasons.append(
            f"no memory left for the KV cache: request {_g(c.requested)} − weights {_g(c.weights)} − "
            f"activations {_g(c.activation)} − non-torch {_g(c.non_torch)} − CUDA graphs "
            f"{_g(c.graphs)} = {_kv_left(c.kv_memory)}" + (maybe if straddles else "")
        )
    elif c.plan.groups and not c.plan.fits_one(c.kv_memory, max_len):
        wont, tight = (wont, True) if straddles else (True, tight)
        reasons.append(
            f"one request of max_model_len {max_len:,} needs {_g(c.plan.bytes_per_request(max_len))} of KV cache "
            f"but only {_g(c.kv_memory)} is available; the longest that fits is {longest:,} tokens"
            + (maybe if straddles else "")
        )
    elif c.concurrency < 1.1:
        tight = True
        reasons.append(f"the KV cache holds only {c.concurrency:.2f} requests of {max_len:,} tokens")
    elif config.max_num_seqs and c.concurrency < s.max_num_seqs:
        # vLLM starts, but that many users at full length do not fit: the rest wait or are
        # preempted (only when asked for: vLLM's own default of 256 is a ceiling, not a plan)
        tight = True
        reasons.append(
            f"the KV cache holds {c.concurrency:.2f} requests of {max_len:,} tokens, fewer than "
            f"--max-num-seqs {s.max_num_seqs}: at full length the others wait or are preempted"
        )
    elif c.plan.groups and not c.plan.fits_one(max(c.kv_low, 0), max_len):
        # vLLM measures its own non-torch and CUDA-graph memory at start-up: at the low end of what
        # real start-ups measured, it would refuse
        tight = True
        reasons.append(
            f"one request of max_model_len {max_len:,} needs {_g(c.plan.bytes_per_request(max_len))} of KV cache; "
            f"vLLM's own start-up measurements can leave as little as {_g(max(c.kv_low, 0))}, and then it refuses"
        )

    verdict = "unsafe" if unsafe else "wont_start" if wont else "tight" if tight else "fits"
    if verdict == "fits":
        spread = (
            ""
            if c.kv_low == c.kv_high
            else f" ({max(c.kv_low, 0) / GiB:.1f}–{c.kv_high / GiB:.1f} by vLLM's start-up measurements"
            + (f" and CUDA totals {'–'.join(f'{t / GiB:.2f}' for t in machine.totals())} GiB)" if c.span else ")")
        )
        reasons.append(
            f"KV cache {_g(c.kv_memory)}{spread} holds {c.tokens:,} tokens: {c.concurrency:.2f} requests of "
            f"{max_len:,} tokens" + (f", the OS keeps {_g(os_left)}" if os_left is not None else "")
        )

    result = FitResult(
        verdict=verdict,
        reasons=reasons,
        suggestions=[],
        budget=budget,
        weights_bytes=c.weights,
        kv_bytes_per_token=c.plan.kv_bytes_per_token,
        kv_cache_bytes=max(0, c.kv_memory),
        kv_cache_tokens=c.tokens,
        max_concurrency=c.concurrency,
        max_model_len=max_len,
        kv_blocks=c.blocks,
        kv_bytes_per_request=c.plan.bytes_per_request(max_len) if c.plan.groups else 0,
        block_size=c.plan.block_size,
        kv_cache_dtype=c.kv_name,
        working=list(c.plan.working),
        memory_working=list(c.memory_working),
        kv_cache_bytes_low=max(0, c.kv_low),
        kv_cache_bytes_high=max(0, c.kv_high),
        longest_max_model_len=longest,
        machine=machine.describe(),
        cuda_total=machine.total_dict(),
        model=spec.name,
        notes=[*spec.notes, *s.notes, *s.rules.notes, *free_memory_note(s.rules, machine, free, vllm_free)],
        vllm_version=str(s.rules.version),
        vllm_version_source=vllm_version_source
        or ("--vllm-version" if config.vllm_version else "assumed: the newest rules read"),
        vllm_rules=[r.to_dict() for r in s.rules.rules],
        kv_memory_source=sources,
        calibration=calibration_lines,
        served_spec=spec,
    )
    result.reasons.extend(calibration_lines)
    result.suggestions = _suggestions(spec, s, machine, c, result, free_at_check)
    if speed:  # the machine's own figure; `sparktui fit` and the panel decide theirs (speed=False)
        result.speed = speed_for_fit(
            spec, config, machine, max_model_len=max_len, max_concurrency=c.concurrency
        ).estimate
    return result


_TERM_NAMES = {
    "weights": "weights",
    "activation_non_torch": "activation peak + non-torch",
    "cuda_graphs": "CUDA graphs",
}
_BUDGET_OF_TERM = {
    "weights": ("weights",),
    "activation_non_torch": ("activation_peak", "non_torch"),
    "cuda_graphs": ("cuda_graphs",),
}


def _calibrated_terms(
    config: ServeConfig, spec: ModelSpec, s: FitSettings, machine: Machine, calibration: Calibration | None
) -> tuple[dict[str, int], dict[str, str], list[str]]:
    """(the measured terms to use, the source of every budget term, what to tell the user)."""
    sources = {b: "predicted" for terms in _BUDGET_OF_TERM.values() for b in terms}
    if calibration is None or s.kv_cache_memory_bytes:
        return {}, sources, []
    key = (config.model, str(s.rules.version), machine_key(machine.name, machine.total))
    if (calibration.model, calibration.vllm_version, calibration.machine) != key:
        return {}, sources, []
    flags = term_flags(config, spec, s)
    measured: dict[str, int] = {}
    changed: list[str] = []
    modelled = _core(spec, s, machine, explain=False) if calibration else None
    for term in TERMS:
        was = calibration.flags.get(term, {})
        if was == flags[term]:
            measured[term] = calibration.figures[term]
            for b in _BUDGET_OF_TERM[term]:
                sources[b] = calibration.source
            continue
        figure = {
            "weights": modelled.weights if modelled else 0,
            "activation_non_torch": (modelled.activation + modelled.non_torch) if modelled else 0,
            "cuda_graphs": modelled.graphs if modelled else 0,
        }[term]
        changed.append(
            f"{_TERM_NAMES[term]}: predicted {_g(figure)} (measured {_g(calibration.figures[term])} at the launch; "
            f"changed since: {', '.join(differences(was, flags[term]))})"
        )
    lines = [
        f"KV memory from terms {calibration.describe()}: " + (", ".join(_TERM_NAMES[t] for t in measured) or "none")
    ]
    return measured, sources, [*lines, *changed]


def _suggestions(
    spec: ModelSpec, s: FitSettings, machine: Machine, c: _Core, r: FitResult, free_at_check: int | None
) -> list[Suggestion]:
    out: list[Suggestion] = []
    max_len = r.max_model_len
    longest = r.longest_max_model_len
    if spec.max_len_limit and max_len > spec.max_len_limit and not s.auto_len:
        out.append(
            Suggestion(
                f"--max-model-len {spec.max_len_limit:,}: the longest the model allows",
                {"max_model_len": min(spec.max_len_limit, longest or spec.max_len_limit)},
            )
        )
    if longest and longest < max_len:
        out.append(Suggestion(f"longest --max-model-len that fits: {longest:,}", {"max_model_len": longest}))
    elif longest > max_len:
        out.append(Suggestion(f"--max-model-len could go up to {longest:,}", {"max_model_len": longest}))
    if c.concurrency >= 1:
        seqs = int(c.concurrency)
        extra = f" (--max-num-seqs is {s.max_num_seqs})" if s.max_num_seqs < seqs else ""
        out.append(
            Suggestion(
                f"at most {seqs} sequence{'s' if seqs != 1 else ''} at the full {max_len:,}-token context{extra}"
            )
        )
    if not s.kv_cache_memory_bytes and c.plan.groups:
        # room for the low end of what vLLM measures at start-up (non-torch, CUDA graphs)
        margin = max(0, c.kv_memory - c.kv_low)
        need = c.fixed + margin + c.plan.bytes_per_request(max_len) + c.plan.bytes_per_block
        util_min = math.ceil(need / machine.total * 100) / 100
        if util_min <= 1.0:
            warn = " (above 0.90: unsafe on unified memory)" if machine.unified and util_min > 0.90 else ""
            if free_at_check is not None and math.ceil(machine.total * util_min) > free_at_check:
                warn += " (more than is free now)"
            unsafe_fix = machine.unified and util_min > 0.90  # advice only: one key must never make it unsafe
            out.append(
                Suggestion(
                    f"smallest --gpu-memory-utilization for one {max_len:,}-token request: {util_min:.2f}{warn}"
                    + (" (with room for vLLM's own start-up measurements)" if margin else ""),
                    {} if unsafe_fix else {"gpu_memory_utilization": util_min},
                )
            )
        else:
            out.append(Suggestion(f"no --gpu-memory-utilization fits one {max_len:,}-token request on this machine"))
    if c.kv_bytes > 1 and c.plan.groups:
        f8 = _core(spec, s, machine, kv_cache_dtype="fp8", explain=False)
        if f8.kv_memory > 0:
            fixes = f8.plan.fits_one(f8.kv_memory, max_len)
            if r.verdict == "wont_start" and not c.plan.fits_one(max(c.kv_memory, 0), max_len):
                text = (
                    f"--kv-cache-dtype fp8 {'fixes it' if fixes else 'is not enough'}: "
                    f"{f8.tokens:,} tokens, {f8.concurrency:.2f}× at {max_len:,}"
                )
                out.append(Suggestion(text, {"kv_cache_dtype": "fp8"} if fixes else {}))
            else:
                out.append(
                    Suggestion(
                        f"--kv-cache-dtype fp8 would give {f8.tokens:,} tokens ({f8.concurrency:.2f}× at {max_len:,})",
                        {"kv_cache_dtype": "fp8"},
                    )
                )
    return out


def fit_to_kv_memory(
    spec: ModelSpec, config: ServeConfig, kv_memory: int, machine: Machine | None = None, rules: VllmRules | None = None
) -> tuple[int, int, float]:
    """(blocks, KV tokens, concurrency) given the KV memory vLLM reported (for checking against logs)."""
    machine = machine or dgx_spark()
    spec = served_dtype(spec, config.dtype)
    s = settings_from(config, spec, machine, rules)
    if s.mtp:
        spec = dflash_as_built(spec, s.rules)[0]
    kv_bytes, _ = kv_dtype_bytes(spec, s.kv_cache_dtype, s.rules)
    plan = _plan(spec, s, kv_bytes)
    return plan.capacity(kv_memory, s.max_model_len)


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "VERDICTS",
    "FitResult",
    "FitSettings",
    "GraphEstimate",
    "KvPlan",
    "Machine",
    "Suggestion",
    "activation_bytes",
    "cudagraph_estimate",
    "dgx_spark",
    "fit",
    "fit_to_kv_memory",
    "kv_dtype_bytes",
    "machine_from_name",
    "moe_workspace_per_token",
    "plan_kv",
    "rules_of",
    "settings_from",
]
