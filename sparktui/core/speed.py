"""How fast a model will decode and prefill on a machine, predicted before launch.

Decode is bound by memory bandwidth: every step reads the weights it uses and the KV cache of
every sequence in the batch. One step for B users at context C reads

    dense weights            attention, linear attention, dense MLP, shared experts, router, lm_head
  + routed experts × share   share = c·(1 − (1 − k/(cE))^B): the experts B tokens pick (k of E each)
                             from about c·E of them (ROUTING_SPREAD: routers favour some experts;
                             c = 1 for a router with a load-balancing bias)
  + B × KV read at C         full layers C tokens, sliding layers min(C, window), linear-attention
                             layers their fixed state (read and written)

all at the precision they are stored in (NVFP4 experts ≈ 0.56 B/param, bf16 attention 2 B/param).
The step takes bytes / (bandwidth × η) plus a fixed cost per layer (kernel launches, MoE routing,
and the Gated DeltaNet kernels, which have no fast path on GB10's sm_121); per-user tok/s is
1 / step, the aggregate B / step. Where compute bounds (large batches, prefill), time is FLOPs /
(peak × η_compute), with 2 FLOPs per active parameter per token plus attention's 4·heads·dim·C.

Calibration: the per-layer costs (per vLLM release line too) and the routing spread are fitted by
bench/fit_speed.py on the FIT set of tests/fixtures/speed/published.json and checked on its disjoint
HELD-OUT set by bench/speed_accuracy.py (the split is by source, fixed before any fit). The guide's
rows (GUIDE_ROWS) are checked too: two lie above the plain-decode roofline (speculative decoding).
A measured run (`sparktui bench` history of the same model, quantization and vLLM version)
corrects the prediction by the ratio measured / predicted (core.bench_history).

Pure: no I/O. Speculative decoding: a verify pass of n+1 tokens, the drafter's own reads by method
(draft_seconds), and the tokens a pass yields from published acceptance figures (ACCEPTANCE).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from sparktui.core.config import MXFP4_LAYER_NAMES, ServeConfig
from sparktui.core.machine import GB10_CUDA_TOTALS  # the two sizes a GB10 box comes in
from sparktui.core.modelspec import FULL, MAMBA, MLA, SLIDING, ModelSpec
from sparktui.core.record import record
from sparktui.core.speculation import Speculation

if TYPE_CHECKING:  # read only with a bench history (calibrated): most fits have none
    from sparktui.core.bench_history import MeasuredRun

GB = 10**9


# --------------------------------------------------------------------------- machines


@record
class Hardware:
    name: str
    bandwidth: float  # bytes/s, the memory's peak
    compute: float  # FLOP/s, dense bf16 tensor peak (vLLM's W4A16 kernels multiply in bf16)
    source: str


# NVIDIA's DGX Spark spec: 273 GB/s LPDDR5X; 1 PFLOP FP4 with sparsity, so ~125 TFLOPS dense bf16.
GB10 = Hardware("DGX Spark (GB10)", 273 * GB, 125e12, "NVIDIA DGX Spark spec: 273 GB/s, 1 PFLOP FP4 sparse")

# The share of peak bandwidth a decode step reaches when it streams weights, by how they are stored.
# Dequantizing kernels (Marlin / CUTLASS W4A16) reach a little less than plain bf16 GEMV.
BANDWIDTH_EFFICIENCY = {"bf16": 0.85, "fp8": 0.80, "nvfp4": 0.80, "mxfp4": 0.80, "int4": 0.75, "int8": 0.80}

# Fixed cost per layer per decode step, in seconds (batch-size independent), by layer kind, each
# charged only to the layers of that kind (ModelSpec.layers, moe_layers, mlp_layers):
#   attention, sliding_attention, mla   one attention block (CUDA-graph launch, KV gather)
#   gdn                                 Gated DeltaNet (Qwen3.5/3.6, Qwen3-Next): FLA/Triton kernels,
#                                       no fast path on GB10's sm_121
#   gdn_spec                            the same layers in a speculative verify pass, which takes
#                                       another path in vLLM (below, verify_layers)
#   mamba2                              Nemotron-H's Mamba-2 mixer
#   dense_mlp, moe                      a dense MLP / routed experts (router, grouped GEMM launch)
# Fitted by bench/fit_speed.py on the FIT set of tests/fixtures/speed/published.json (checked on its
# disjoint HELD_OUT set by bench/speed_accuracy.py); a kind absent from the fit set keeps its prior.
LAYER_KINDS = ("attention", "sliding_attention", "mla", "gdn", "gdn_spec", "mamba2", "dense_mlp", "moe")
KIND_NAMES = {
    "attention": "attention",
    "sliding_attention": "sliding-window attention",
    "mla": "MLA",
    "gdn": "Gated DeltaNet",
    "gdn_spec": "Gated DeltaNet (verify pass)",
    "mamba2": "Mamba-2",
    "dense_mlp": "dense MLP",
    "moe": "MoE",
}
# Fitted (bench/fit_speed.py, one prior for every kind there, its pull chosen by leave-one-out on the fit
# set) on the fit set's 8 single-user records: plain decode, and MTP where the source gives the settings
# (their fixed costs enter the verify and draft passes). A kind the fit set barely sees stays near 30 µs.
LAYER_COST_S = {
    "attention": 32e-6,
    "sliding_attention": 49e-6,
    "mla": 30e-6,  # not in the fit set: the prior
    "gdn": 25e-6,
    "gdn_spec": 39e-6,
    "mamba2": 30e-6,  # not in the fit set's single-user records: the prior
    "dense_mlp": 46e-6,
    "moe": 55e-6,
}

# The same layers cost differently on different vLLM builds (issue 25: Qwen3.6-35B-A3B NVFP4 ran at
# 44 tok/s on a patched March build and 97.7 on 0.28; gpt-oss-120b at 33.5 on 0.15.1 and 57–60 on
# 0.19): the costs are fitted per release line as well, on the fit records of that line, pulled toward
# the all-versions fit above (bench/fit_speed.py). A version sparktui cannot place (none given, or a
# dev build's 0.1.devN) takes LAYER_COST_S.
SERIES: tuple[tuple[str, tuple[int, int] | None, tuple[int, int] | None], ...] = (
    ("to 0.19", None, (0, 20)),  # NGC ≤ 26.04 and the spring 2026 community builds
    ("0.20 on", (0, 20), None),
)
# fmt: off
LAYER_COST_BY_SERIES: dict[str, dict[str, float]] = {  # bench/fit_speed.py: 2 records to 0.19, 3 from 0.20
    "to 0.19": {"attention": 36e-6, "sliding_attention": 50e-6, "mla": 30e-6, "gdn": 25e-6, "gdn_spec": 39e-6,
                "mamba2": 30e-6, "dense_mlp": 36e-6, "moe": 66e-6},
    "0.20 on": {"attention": 37e-6, "sliding_attention": 66e-6, "mla": 30e-6, "gdn": 25e-6, "gdn_spec": 48e-6,
                "mamba2": 30e-6, "dense_mlp": 66e-6, "moe": 106e-6},
}
# fmt: on


def series_of(version: str | None) -> str | None:
    """The SERIES name of a vLLM version ("0.19.1", "0.26.1.dev0+g…", "0.19"), None when unknown."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", version or "")
    if not match:
        return None
    release = (int(match.group(1)), int(match.group(2)))
    if release < (0, 2):  # a dev build reports 0.1.devN whatever its age
        return None
    for name, low, high in SERIES:
        if (low is None or release >= low) and (high is None or release < high):
            return name
    return None


def layer_costs(version: str | None) -> dict[str, float]:
    """The per-layer costs for a vLLM version (LAYER_COST_S when its series is unknown)."""
    series = series_of(version)
    return dict(LAYER_COST_BY_SERIES[series]) if series in LAYER_COST_BY_SERIES else dict(LAYER_COST_S)


# The share of an MoE's experts one step's tokens pick from: 1.0 is uniform routing. Real routers
# favour some experts, so a batch reads fewer distinct experts than uniform picks would: fitted by
# bench/fit_speed.py on the fit set's multi-user records (kubis.ai gpt-oss-120b, 2–32 users).
ROUTING_SPREAD = 0.29

# Prefill reaches this share of the bf16 peak: fitted by bench/fit_speed.py on the fit set's prefill
# figure (vllm-project/recipes #918: Qwen3.6-35B-A3B NVFP4, 8K input at 6,265 tok/s on vLLM 0.28). Until
# stop 33 it was 0.55, read off the guide's Qwen3.5-35B-A3B TTFT (0.12 s), a held-out record.
COMPUTE_EFFICIENCY = 0.33

# How far off a prediction can be before calibration: the spread of the published rows around it.
RANGE = (0.8, 1.15)

# Speculative decoding: what a verify pass yields comes from published acceptance figures (ACCEPTANCE
# below); a method none was found for keeps this prior per-token acceptance, said as a prior.
ACCEPTANCE_PRIOR = {"mtp": 0.8, "eagle": 0.7, "eagle3": 0.7, "dflash": 0.7, "dspark": 0.7, "ngram": 0.4,
                    "suffix": 0.4, "draft_model": 0.6}  # fmt: skip


SPARK_MACHINE = "DGX Spark (GB10)"


@record
class Acceptance:
    """A published acceptance figure: vLLM's "Mean acceptance length" (tokens one verify pass
    yields, 1 + accepted drafts; from an acceptance rate r over k drafts it is 1 + k·r) for a
    method at `tokens` drafted, on models whose name or architecture matches `model`."""

    method: str
    model: str  # regex over the model's name and architecture, case-insensitive ("" = any)
    tokens: int
    mean_length: float
    source: str
    # Where it was measured. Acceptance is the drafter's and the target's (and the prompts'), not the
    # GPU's: a figure from another GPU stands for the same drafter on a Spark, and says where it is from.
    machine: str = SPARK_MACHINE

    @property
    def cited(self) -> str:
        """The source as the estimate quotes it: with the machine when it was not a Spark."""
        return (
            self.source if self.machine == SPARK_MACHINE else f"{self.source}; measured on {self.machine}, not a Spark"
        )

    @property
    def per_token(self) -> float:
        """The per-position acceptance α with α + α² + … + αᵏ = mean_length − 1 (each drafted
        token is kept only when the one before it was): what another draft depth would yield."""
        target = min(float(self.tokens), max(0.0, self.mean_length - 1))
        low, high = 0.0, 1.0
        for _ in range(60):
            mid = (low + high) / 2
            if sum(mid**i for i in range(1, self.tokens + 1)) < target:
                low = mid
            else:
                high = mid
        return (low + high) / 2


# Published figures, none from a record of the held-out speed set (tests/fixtures/speed/SOURCES.md); a Spark's
# where one was found, else the same drafter's on another GPU (`machine`). No figure was found for a separate
# draft model (draft_model): it keeps its prior.
ACCEPTANCE = (
    Acceptance(
        "mtp", r"qwen3[._]?[56]|qwen3_5|qwen3_next", 2, 2.64,
        "eugr/spark-vllm-docker PR #200 (a Spark, vLLM 0.20.1rc1, Qwen3.6-35B-A3B-FP8 MTP-2): mean "
        "acceptance length 2.66, 2.93, 2.33 in three windows; ITL/TPOT of inference-atlas's MTP-2 run, 2.64",
    ),
    Acceptance("mtp", r"gemma", 4, 1 + 4 * 0.76, "tgmerritt.com (Gemma-4 MTP N=4 on GB10): ~76% on code"),
    Acceptance(
        "mtp", r"nemotron[-_ ]?3[-_ ]?super", 3, 2.7,
        "NVIDIA forum 373625 (Nemotron-3-Super-120B-A12B-NVFP4 + MTP, SGLang 0.5.13-dev, 3 steps / 4 draft "
        "tokens): accept_len ≈ 2.7", "4× DGX Spark (SGLang, TP=4)",
    ),
    Acceptance(
        "mtp", "", 1, 1.95,
        "NVIDIA forum 365639 (Qwen3.5-122B-A10B, vLLM 0.19, MTP-1): 95% acceptance",
    ),
    Acceptance(
        "dspark", "", 5, 3.73,
        "eugr/spark-vllm-docker #350 (Qwen3.8-27B DSpark v2, 5 tokens): mean acceptance length 3.73",
    ),
    Acceptance(
        "ngram", "", 1, 1.20,
        "al-engr.com, Qwen3.6 n-gram vs NVFP4 MTP (a Spark, SGLang NGRAM, Qwen3.6-27B-FP8): \"~20% accept rate\", "
        "taken as the first position's",
    ),
    Acceptance(
        "eagle3", r"gpt-oss|gptoss", 3, 2.41,
        "huggingface.co/Dogacel/specdrift-gpt-oss-120b-eagle3 (EAGLE-3 drafter for gpt-oss-120b, SGLang, 3 steps, "
        "top-1, MT-Bench, batch 1): acceptance length 2.41",
        "an H100",
    ),
    Acceptance(
        "dflash", r"qwen3[._]?[56]|qwen3_5", 3, 3.45,
        "noonghunna/club-3090 #294 (vLLM, Qwen3.6-27B with its DFlash drafter, 3 tokens): \"SpecDecoding metrics: "
        "Mean acceptance length: 3.45\" (3.49, 3.44 in the next windows)",
        "2× RTX 3090",
    ),
)  # fmt: skip


def acceptance_for(method: str, model: str = "") -> Acceptance | None:
    """The published figure for `method` that matches `model` most narrowly (one for any model
    last), or None when none was published for the method."""
    key = "mtp" if "mtp" in method else method
    named = [a for a in ACCEPTANCE if a.method == key and a.model and re.search(a.model, model, re.IGNORECASE)]
    anyone = [a for a in ACCEPTANCE if a.method == key and not a.model]
    found = named or anyone
    return found[0] if found else None


DEFAULT_PROMPT_TOKENS = 1024  # TTFT and "current context" when the caller has no better figure


# --------------------------------------------------------------------------- what a token reads


@record
class Footprint:
    """What one model reads and computes per token, at its stored precision."""

    dense_bytes: int  # read every step whatever the batch
    expert_bytes: int  # all routed experts
    experts: int  # E
    experts_per_token: int  # k
    active_params: int  # parameters one token multiplies through
    layers: dict[str, int]  # layer counts by fixed-cost kind
    precision: str  # the format most of the streamed bytes are in (bf16, fp8, nvfp4, …)
    balanced_router: bool = False  # a load-balancing router bias: a batch's picks spread uniformly

    def expert_share(self, tokens: int, spread: float | None = None) -> float:
        """The share of routed experts `tokens` tokens touch in one layer. Routing is not uniform:
        the tokens of one step pick from about `spread` × E experts (ROUTING_SPREAD), so many
        tokens read fewer distinct experts than uniform picks would; one token reads k of E. A router
        with a load-balancing bias (modelspec.moe.balanced_router) spreads them uniformly (1.0)."""
        if not self.experts or not self.experts_per_token:
            return 0.0
        c = (1.0 if self.balanced_router else ROUTING_SPREAD) if spread is None else spread
        c = min(1.0, max(self.experts_per_token / self.experts, c))
        return c * (1.0 - (1.0 - self.experts_per_token / (c * self.experts)) ** max(1, tokens))

    def weight_bytes(self, tokens: int) -> float:
        return self.dense_bytes + self.expert_bytes * self.expert_share(tokens)


def _precision(spec: ModelSpec) -> str:
    q = (spec.quantization or "").lower()
    for name in ("nvfp4", "mxfp4", "fp8"):
        if name in q:
            return name
    if "int4" in q or "awq" in q or "gptq" in q or "w4" in q or "4-bit" in q:
        return "int4"
    if "int8" in q or "w8" in q:
        return "int8"
    return "bf16"


def footprint(spec: ModelSpec) -> Footprint:
    by_bytes = dict(spec.bytes_by_category)
    by_params = dict(spec.params_by_category)
    if not by_bytes:  # a spec built without categories: all of it is dense
        by_bytes = {"other": spec.weights_bytes}
        by_params = {"other": spec.param_count or spec.weights_bytes // max(1, spec.dtype_bytes)}
    # embeddings (Gemma 4's per-layer ones too): one row per token; vision: not in decode
    skip = {"experts", "embed", "per_layer_embed", "vision", "mtp"}
    dense = sum(v for cat, v in by_bytes.items() if cat not in skip)
    dense_params = sum(v for cat, v in by_params.items() if cat not in skip)
    if not by_params.get("lm_head") and by_params.get("embed"):  # tied: the embedding is the lm_head
        dense += by_bytes.get("embed", 0)
        dense_params += by_params.get("embed", 0)
    experts = spec.num_experts if by_params.get("experts") else 0
    k = spec.experts_per_token if experts else 0
    expert_params = by_params.get("experts", 0)
    active = dense_params + (expert_params * k // experts if experts else expert_params)
    layers = layer_kinds(spec)
    return Footprint(
        dense_bytes=int(dense),
        expert_bytes=int(by_bytes.get("experts", 0)) if experts else 0,
        experts=experts,
        experts_per_token=k,
        active_params=int(active) if experts else int(dense_params + expert_params),
        layers=layers,
        precision=_precision(spec),
        balanced_router=spec.balanced_router,
    )


MXFP4_BYTES = 0.5 + 1 / 32  # 4-bit + an e8m0 scale per 32 weights


def with_mxfp4_layers(spec: ModelSpec, names: tuple[str, ...] | list[str]) -> ModelSpec:
    """`spec` with the weights `--mxfp4-layers` names stored as MXFP4 (the rest as the checkpoint
    stores them): moe → the routed experts, qkv / o → the attention projections (their share of
    the attention weights), lm_head → the output layer."""
    unknown = [n for n in names if n not in MXFP4_LAYER_NAMES]
    if unknown:
        raise ValueError(
            f"--mxfp4-layers {','.join(names)}: {', '.join(unknown)} not one of {', '.join(MXFP4_LAYER_NAMES)}"
        )
    heads, kv = spec.num_attention_heads, next((g.num_kv_heads for g in spec.layers if g.num_kv_heads), 0)
    qkv_share = (heads + 2 * kv) / (2 * heads + 2 * kv) if heads else 0.5
    shares = {"experts": 1.0 if "moe" in names else 0.0, "lm_head": 1.0 if "lm_head" in names else 0.0}
    shares["attn"] = (qkv_share if "qkv" in names else 0.0) + ((1 - qkv_share) if "o" in names else 0.0)
    params = dict(spec.params_by_category)
    by_bytes = dict(spec.bytes_by_category)
    for cat, share in shares.items():
        if share and cat in params and cat in by_bytes:
            stored = by_bytes[cat] * (1 - share)
            by_bytes[cat] = int(stored + params[cat] * share * MXFP4_BYTES)
    return replace(spec, bytes_by_category=tuple(sorted(by_bytes.items())))


def layer_kinds(spec: ModelSpec) -> dict[str, int]:
    """How many decoder layers of each LAYER_KINDS kind one decode step runs (drafter layers aside)."""
    main = [g for g in spec.layers if not g.draft]
    moe_layers = spec.moe_layers or (spec.num_layers if spec.num_experts else 0)
    mlp_layers = spec.mlp_layers if (spec.moe_layers or spec.mlp_layers) else spec.num_layers - moe_layers
    return {
        "attention": sum(g.count for g in main if g.kind == FULL),
        "sliding_attention": sum(g.count for g in main if g.kind == SLIDING),
        "mla": sum(g.count for g in main if g.kind == MLA),
        "gdn": sum(g.count for g in main if g.kind == MAMBA and g.state_kind != "mamba2"),
        "mamba2": sum(g.count for g in main if g.kind == MAMBA and g.state_kind == "mamba2"),
        "dense_mlp": max(0, mlp_layers),
        "moe": moe_layers,
    }


def verify_layers(layers: Mapping[str, int]) -> dict[str, int]:
    """The layer counts of a speculative verify pass: its Gated DeltaNet layers run vLLM's general
    path, not plain decode's (gdn_spec). With a verify batch (spec_sequence_masks set) vLLM 0.19-0.32
    skip the packed recurrent decode kernel (VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE, on by default,
    taken only when spec_sequence_masks is None) for causal_conv1d_update over the n+1 tokens, then
    fused_sigmoid_gating_delta_rule_update, whose kernel walks a sequence's tokens one after another
    and stores a state per token (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py
    _forward_core; third_party/flash_linear_attention/ops/fused_recurrent.py)."""
    out = dict(layers)
    out["gdn_spec"] = out.get("gdn_spec", 0) + out.pop("gdn", 0)
    out["gdn"] = 0
    return out


def fixed_seconds(layers: Mapping[str, int], costs: Mapping[str, float] | None = None) -> float:
    """The per-step fixed cost of these layer counts."""
    table = LAYER_COST_S if costs is None else costs
    return sum(table.get(kind, 0.0) * n for kind, n in layers.items())


def kv_read_bytes(spec: ModelSpec, context: int, kv_bytes: int, tp: int = 1, tokens: int = 1) -> int:
    """Bytes of KV cache (and linear-attention state) one sequence's decode step reads at `context`;
    `tokens` > 1 is a speculative verify pass, whose Gated DeltaNet layers write one state per
    verified position to roll back to (vLLM v1/attention/backends/gdn_attn.py: spec_state_indices,
    num_spec + 1 slots per request)."""
    total = 0
    for g in spec.layers:
        if g.draft:
            continue
        if g.kind == MAMBA:
            writes = tokens if g.state_kind != "mamba2" else 1
            total += (1 + writes) * g.count * g.state_bytes(spec.dtype_bytes, tp)  # read, then write
        elif g.kind == SLIDING and g.sliding_window:
            total += g.count * g.kv_bytes_per_token(kv_bytes, tp) * min(context, g.sliding_window)
        else:
            total += g.count * g.kv_bytes_per_token(kv_bytes, tp) * context
    return total


def attention_flops(spec: ModelSpec, context: int) -> float:
    """FLOPs of attention itself (QKᵀ and AV) for one token at `context`, over full layers."""
    flops = 0.0
    heads = spec.num_attention_heads
    for g in spec.layers:
        if g.draft or g.kind == MAMBA:
            continue
        span = min(context, g.sliding_window) if g.kind == SLIDING and g.sliding_window else context
        # MLA attends over its latent (head_size = kv_lora_rank + rope dims) with every query head
        flops += g.count * 4 * heads * g.head_size * span
    return flops


# --------------------------------------------------------------------------- speculative decoding


@record
class DraftYield:
    """What speculative decoding gives a decode step: the method, tokens drafted, acceptance."""

    method: str
    tokens: int  # drafted per step
    acceptance: float  # per drafted position, given the one before was kept
    source: str = ""  # the published figure it comes from ("" = ACCEPTANCE_PRIOR)

    @property
    def expected_tokens(self) -> float:
        """Tokens one step yields: 1 + α + α² + … + αⁿ."""
        a = self.acceptance
        return float(self.tokens + 1) if a >= 1 else (1 - a ** (self.tokens + 1)) / (1 - a)


def draft_yield(speculation: Speculation | None, spec: ModelSpec | None = None) -> DraftYield | None:
    """The yield of a parsed --speculative-config (ServeConfig.speculation): its method as vLLM
    resolves it, so the fit and this estimate name the same one; the acceptance from the published
    figure for that method and model (ACCEPTANCE), else the method's prior."""
    if speculation is None:
        return None
    key = "mtp" if speculation.mtp else speculation.method
    model = f"{spec.name} {spec.architecture}" if spec is not None else ""
    figure = acceptance_for(key, model)
    if figure is not None:
        return DraftYield(speculation.method, speculation.num_tokens, figure.per_token, figure.cited)
    return DraftYield(speculation.method, speculation.num_tokens, ACCEPTANCE_PRIOR.get(key, 0.6))


DRAFT_MODEL_BYTES = 10**9  # a separate draft model sparktui has no config of: ~0.5B parameters in bf16
DFLASH_LAYERS = 5  # a DFlash / DSpark block drafter: a few layers of the target's width, run once a step
EAGLE3_DRAFT_VOCAB = 32_000  # EAGLE-3 drafters predict over a reduced vocabulary


def lm_head_bytes(spec: ModelSpec) -> int:
    """The output layer's bytes (the embedding's when the two are tied)."""
    by_bytes, by_params = dict(spec.bytes_by_category), dict(spec.params_by_category)
    return int(by_bytes.get("lm_head") or (by_bytes.get("embed", 0) if not by_params.get("lm_head") else 0))


def draft_seconds(
    draft: DraftYield, fp: Footprint, spec: ModelSpec, hw: Hardware, batch: int, costs: Mapping[str, float]
) -> float:
    """What drafting costs per step, by how each method drafts:
    mtp           one MTP layer (about one of the target's layers) and the shared lm_head, per drafted token
                  (vLLM llm_base_proposer.py propose: a forward and compute_logits per token; Gemma-4's
                  assistant reads a dense layer and a slice of its vocabulary)
    eagle/eagle3  one drafter layer per drafted token, and its lm_head (EAGLE-3: a 32k draft vocabulary)
    dflash/dspark a few-layer block drafter run once for all drafted tokens, and the lm_head once
    ngram/suffix  matched on the CPU from the prompt: no GPU pass
    draft_model   a whole small model per drafted token (~0.5B bf16 assumed)"""
    eta = BANDWIDTH_EFFICIENCY.get(fp.precision, 0.8)
    method = "mtp" if "mtp" in draft.method else draft.method
    layer_bytes = fp.weight_bytes(batch) / max(1, spec.num_layers)
    layer_cost = costs["attention"] + costs["moe" if fp.experts else "dense_mlp"]
    head = lm_head_bytes(spec)
    if method in ("ngram", "suffix", "ngram_gpu"):
        return 0.0
    if method in ("dflash", "dspark"):
        moved = DFLASH_LAYERS * layer_bytes + head
        return moved / (hw.bandwidth * eta) + DFLASH_LAYERS * layer_cost
    if method == "draft_model":
        return draft.tokens * (DRAFT_MODEL_BYTES / (hw.bandwidth * eta) + layer_cost)
    if method == "eagle3":
        head = int(head * min(1.0, EAGLE3_DRAFT_VOCAB / max(1, spec.vocab_size))) if spec.vocab_size else head
    if method == "mtp" and "gemma" in f"{spec.architecture} {spec.name}".lower():
        # Gemma-4's MTP is a separate light assistant (vLLM model_executor/models/gemma4_mtp.py): Q-only
        # attention on the target's KV, a dense MLP, and centroid-masked logits over a slice of the vocab
        layer_bytes, head = fp.dense_bytes / max(1, spec.num_layers), 0
        layer_cost = costs["attention"] + costs["dense_mlp"]
    return draft.tokens * ((layer_bytes + head) / (hw.bandwidth * eta) + layer_cost)


# --------------------------------------------------------------------------- the estimate


@record
class UsersSpeed:
    users: int
    per_user_tok_s: float
    aggregate_tok_s: float
    bound: str  # "bandwidth" or "compute"

    def to_dict(self) -> dict[str, Any]:
        return {
            "users": self.users,
            "per_user_tok_s": round(self.per_user_tok_s, 2),
            "aggregate_tok_s": round(self.aggregate_tok_s, 1),
            "bound": self.bound,
        }


@record
class SpeedEstimate:
    decode_tok_s: float  # one user at `context`
    decode_range: tuple[float, float]
    roofline_tok_s: float  # bandwidth / bytes per token: no kernel reaches it
    efficiency: float  # decode_tok_s / roofline_tok_s
    prefill_tok_s: float
    ttft_s: float
    ttft_range: tuple[float, float]
    prompt_tokens: int
    context: int
    bytes_per_token: int  # one user's decode step
    weight_bytes_per_token: int
    kv_bytes_per_token_read: int
    active_params: int
    users: tuple[UsersSpeed, ...]
    hardware: str
    calibration: str | None = None  # "measured: …" when bench history corrected it
    speculative_method: str | None = None  # the method the draft yield assumes (None: no speculation)
    assumes: tuple[str, ...] = field(default_factory=tuple)

    def for_users(self, n: int) -> UsersSpeed | None:
        return next((u for u in self.users if u.users == n), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decode_tok_s": round(self.decode_tok_s, 1),
            "decode_range": [round(x, 1) for x in self.decode_range],
            "roofline_tok_s": round(self.roofline_tok_s, 1),
            "efficiency": round(self.efficiency, 3),
            "prefill_tok_s": round(self.prefill_tok_s),
            "ttft_s": round(self.ttft_s, 3),
            "ttft_range": [round(x, 3) for x in self.ttft_range],
            "prompt_tokens": self.prompt_tokens,
            "context": self.context,
            "bytes_per_token": self.bytes_per_token,
            "weight_bytes_per_token": self.weight_bytes_per_token,
            "kv_bytes_per_token_read": self.kv_bytes_per_token_read,
            "active_params": self.active_params,
            "users": [u.to_dict() for u in self.users],
            "hardware": self.hardware,
            "calibration": self.calibration,
            "assumes": list(self.assumes),
        }


def _step_seconds(
    fp: Footprint,
    spec: ModelSpec,
    hw: Hardware,
    batch: int,
    context: int,
    kv_bytes: int,
    tp: int,
    tokens_per_sequence: int = 1,
    costs: Mapping[str, float] | None = None,
) -> tuple[float, str]:
    """One forward pass for `batch` sequences at `context`, each with `tokens_per_sequence` tokens
    (1: a decode step; n+1: a speculative verify pass): (seconds, what bounds it). Every token
    picks its own experts, so a verify pass reads the experts of all its tokens; each sequence's KV
    cache is read once whatever its token count."""
    eta = BANDWIDTH_EFFICIENCY.get(fp.precision, 0.8)
    tokens = batch * tokens_per_sequence
    moved = fp.weight_bytes(tokens) / tp + batch * kv_read_bytes(spec, context, kv_bytes, tp, tokens_per_sequence)
    memory_s = moved / (hw.bandwidth * eta)
    fixed_s = fixed_seconds(fp.layers if tokens_per_sequence == 1 else verify_layers(fp.layers), costs)
    flops = tokens * (2 * fp.active_params + attention_flops(spec, context)) / tp
    compute_s = flops / (hw.compute * COMPUTE_EFFICIENCY)
    if compute_s > memory_s:
        return compute_s + fixed_s, "compute"
    return memory_s + fixed_s, "bandwidth"


def _prefill_seconds(
    fp: Footprint, spec: ModelSpec, hw: Hardware, prompt: int, chunk: int, tp: int, costs: Mapping[str, float]
) -> tuple[float, float]:
    """(seconds to prefill `prompt` tokens, tok/s): chunks of max_num_batched_tokens, each bound
    by its FLOPs or by reading the weights it touches, whichever is slower."""
    eta = BANDWIDTH_EFFICIENCY.get(fp.precision, 0.8)
    total = 0.0
    done = 0
    while done < prompt:
        n = min(chunk, prompt - done)
        mid = done + n // 2
        flops = n * (2 * fp.active_params + attention_flops(spec, mid)) / tp
        compute_s = flops / (hw.compute * COMPUTE_EFFICIENCY)
        read_s = fp.weight_bytes(n) / tp / (hw.bandwidth * eta)
        total += max(compute_s, read_s) + fixed_seconds(fp.layers, costs)
        done += n
    return total, prompt / total if total else 0.0


def estimate(
    spec: ModelSpec,
    hw: Hardware,
    *,
    context: int = DEFAULT_PROMPT_TOKENS,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    users: tuple[int, ...] = (1,),
    kv_bytes: int | None = None,
    tp: int = 1,
    max_num_batched_tokens: int = 2048,
    speculation: DraftYield | None = None,
    correction: float | None = None,
    correction_note: str | None = None,
    vllm_version: str | None = None,
    costs: Mapping[str, float] | None = None,
) -> SpeedEstimate:
    """Predicted decode and prefill for `spec` on `hw`.

    `context` is the tokens each user's sequence holds while decoding (the KV read grows with it);
    `users` the batch sizes to report; `correction` a measured/predicted ratio from bench history;
    `vllm_version` picks the per-layer costs of its release line (layer_costs); `costs`, given,
    replaces them (bench/fit_speed.py)."""
    fp = footprint(spec)
    kv = kv_bytes or spec.dtype_bytes
    context = max(1, context)
    tp = max(1, tp)
    factor = correction if correction and correction > 0 else 1.0
    eta = BANDWIDTH_EFFICIENCY.get(fp.precision, 0.8)
    series = series_of(vllm_version) if costs is None else None
    costs = layer_costs(vllm_version) if costs is None else {**LAYER_COST_S, **costs}

    def per_user(batch: int) -> tuple[float, str]:
        step, bound = _step_seconds(fp, spec, hw, batch, context, kv, tp, costs=costs)
        if speculation is not None:
            # the target verifies n+1 tokens per sequence in one pass: the dense weights and the KV
            # once, the experts those n+1 tokens pick (an MoE's verify pass reads more than a step),
            # FLOPs × n+1; the drafter's own cost by method (draft_seconds)
            verify, bound = _step_seconds(fp, spec, hw, batch, context, kv, tp, speculation.tokens + 1, costs)
            draft = draft_seconds(speculation, fp, spec, hw, batch, costs) / tp
            return speculation.expected_tokens / (verify + draft) * factor, bound
        return factor / step, bound

    one, _ = per_user(1)
    weight_bytes = int(fp.weight_bytes(1) / tp)
    kv_read = kv_read_bytes(spec, context, kv, tp)
    roofline = hw.bandwidth / max(1, weight_bytes + kv_read)
    rows = []
    for n in sorted({1, *users}):
        rate, bound = per_user(n)
        rows.append(UsersSpeed(n, rate, rate * n, bound))
    prefill_s, prefill_rate = _prefill_seconds(
        fp, spec, hw, max(1, prompt_tokens), max(1, max_num_batched_tokens), tp, costs
    )
    ttft = prefill_s + 1 / one if one else prefill_s
    assumes = [
        f"{hw.name}: {hw.bandwidth / GB:.0f} GB/s at {eta:.0%} for {fp.precision} weights, "
        f"{hw.compute / 1e12:.0f} TFLOPS bf16 at {COMPUTE_EFFICIENCY:.0%} for prefill",
        f"one decode step reads {weight_bytes / GB:.2f} GB of weights"
        + (
            f" (dense parts + {fp.experts_per_token} of {fp.experts} experts per layer)"
            if fp.experts
            else " (every weight)"
        )
        + f" and {kv_read / GB:.3f} GB of KV per user at {context:,} tokens of context",
        "fixed cost per step: "
        + ", ".join(f"{n} {KIND_NAMES[kind]}" for kind, n in fp.layers.items() if n)
        + f" ≈ {fixed_seconds(fp.layers, costs) * 1e3:.1f} ms"
        + (f" (costs fitted on vLLM {series})" if series else " (costs fitted on all vLLM versions)"),
        f"TTFT for a {prompt_tokens:,}-token prompt in chunks of {max_num_batched_tokens:,}, nothing queued",
        "a batch picks its experts "
        + ("uniformly (a load-balancing router)" if fp.balanced_router else f"from about {ROUTING_SPREAD:.0%} of them")
        + "; CUDA graphs on; no other load on the bus",
    ]
    if speculation is not None:
        assumes.append(
            f"speculative decoding ({speculation.method}, {speculation.tokens} tokens): "
            f"{speculation.acceptance:.0%} per-position acceptance, {speculation.expected_tokens:.2f} tokens per step"
            + (f" (from {speculation.source})" if speculation.source else " (a prior: no published figure found)")
        )
    if tp > 1:
        assumes.append(f"tensor parallel {tp}: each rank reads 1/{tp} of the weights; interconnect time not modelled")
    low, high = RANGE
    return SpeedEstimate(
        decode_tok_s=one,
        decode_range=(one * low, one * high),
        roofline_tok_s=roofline,
        efficiency=one / roofline if roofline else 0.0,
        prefill_tok_s=prefill_rate,
        ttft_s=ttft,
        ttft_range=(ttft / high, ttft / low),
        prompt_tokens=prompt_tokens,
        context=context,
        bytes_per_token=weight_bytes + kv_read,
        weight_bytes_per_token=weight_bytes,
        kv_bytes_per_token_read=kv_read,
        active_params=fp.active_params,
        users=tuple(rows),
        hardware=hw.name,
        calibration=correction_note,
        assumes=tuple(assumes),
        speculative_method=speculation.method if speculation is not None else None,
    )


def estimate_for_config(
    spec: ModelSpec,
    config: ServeConfig,
    hw: Hardware,
    *,
    max_model_len: int,
    max_concurrency: float,
    correction: float | None = None,
    correction_note: str | None = None,
    context: int | None = None,
) -> SpeedEstimate:
    """The estimate for a ServeConfig: its KV dtype, tensor parallel, batch size and speculative
    decoding; at `context` tokens per user (None: a short chat's, 1,024 or max_model_len when
    shorter), and the batch sizes the KV cache can hold."""
    if config.mxfp4_layer_names:  # eugr's MXFP4 build stores these as MXFP4 whatever the checkpoint
        spec = with_mxfp4_layers(spec, config.mxfp4_layer_names)
    max_seqs = config.max_num_seqs or 256
    full = max(1, int(max_concurrency))
    users = tuple(sorted({n for n in (1, 4, 16, min(full, max_seqs)) if n <= max_seqs}))
    return estimate(
        spec,
        hw,
        context=context or min(DEFAULT_PROMPT_TOKENS, max(1, max_model_len)),
        prompt_tokens=min(DEFAULT_PROMPT_TOKENS, max(1, max_model_len)),
        users=users,
        kv_bytes=kv_bytes_for(spec, config.kv_cache_dtype),
        tp=max(1, config.tensor_parallel_size),
        max_num_batched_tokens=config.max_num_batched_tokens or 2048,
        speculation=draft_yield(config.speculation, spec),
        correction=correction,
        correction_note=correction_note,
        vllm_version=config.vllm_version,
    )


def calibrated(
    spec: ModelSpec,
    config: ServeConfig,
    hw: Hardware,
    runs: list[MeasuredRun],
    *,
    max_model_len: int,
    max_concurrency: float,
    context: int | None = None,
) -> tuple[SpeedEstimate, list[tuple[MeasuredRun, float]]]:
    """The estimate corrected by measured runs of this model (bench history), and each run beside
    what the uncorrected model predicts for it (same users, prompt and output length)."""
    from sparktui.core.bench_history import calibrate

    kv = kv_bytes_for(spec, config.kv_cache_dtype)
    pairs = []
    for run in runs:
        prompt = int(run.prompt_tokens or DEFAULT_PROMPT_TOKENS)
        # the run's mean context while it decoded (not `context`: that is the estimate's own)
        held = prompt + (run.output_tokens or 0) // 2
        predicted = estimate(spec, hw, context=held, prompt_tokens=prompt, users=(run.users,), kv_bytes=kv)
        row = predicted.for_users(run.users)
        pairs.append((run, row.per_user_tok_s if row else predicted.decode_tok_s))
    cal = calibrate(pairs)
    est = estimate_for_config(
        spec,
        config,
        hw,
        max_model_len=max_model_len,
        max_concurrency=max_concurrency,
        correction=cal.factor if cal else None,
        correction_note=cal.note if cal else None,
        context=context,
    )
    return est, pairs


def hardware_for(machine_name: str, mem_total: int, unified: bool) -> Hardware | None:
    """The speed figures of a fit's machine: a DGX Spark (by name, or a unified-memory machine of
    its size); None for a GPU sparktui knows only by its memory size."""
    if machine_name in ("dgx-spark", "spark", "gb10"):
        return GB10
    if unified and min(GB10_CUDA_TOTALS) * 0.99 <= mem_total <= max(GB10_CUDA_TOTALS) * 1.01:
        return GB10
    return None


BANDWIDTH_ENV = "SPARKTUI_BANDWIDTH_GBS"  # a machine's bandwidth when sparktui does not know it


def with_bandwidth(hw: Hardware | None, gb_per_s: float | None, name: str = "given bandwidth") -> Hardware | None:
    """`hw` with its bandwidth replaced (or a machine known only by its bandwidth)."""
    if gb_per_s is None:
        return hw
    base = hw or Hardware(name, 0.0, GB10.compute, "")
    return replace(base, name=f"{base.name} at {gb_per_s:g} GB/s", bandwidth=gb_per_s * GB)


def kv_bytes_for(spec: ModelSpec, kv_cache_dtype: str | None) -> int:
    """Bytes per KV element for --kv-cache-dtype (auto follows the checkpoint, as the fit does)."""
    name = (kv_cache_dtype or "auto").lower()
    if name == "auto":
        return 1 if spec.checkpoint_kv_cache_dtype else spec.dtype_bytes
    return 1 if name.startswith("fp8") else 2


def above_roofline(measured_tok_s: float, est: SpeedEstimate) -> bool:
    """A published single-user figure faster than the bandwidth allows for plain decode (every
    weight a token uses read once at the full 273 GB/s): it used speculative decoding (or stored
    more of the model in 4 bits than the checkpoint says)."""
    return measured_tok_s > est.roofline_tok_s


def describe_range(est: SpeedEstimate) -> str:
    low, high = est.decode_range
    return f"{est.decode_tok_s:.0f} tok/s (range {low:.0f}–{high:.0f})"


def measured_line(run: MeasuredRun, predicted: float) -> str:
    """A bench measurement beside what the uncorrected model predicted for the same load."""
    error = (predicted - run.decode_tok_s) / run.decode_tok_s
    who = "1 user" if run.users == 1 else f"{run.users} users"
    return f"bench: {run.decode_tok_s:.1f} tok/s per user at {who}, predicted {predicted:.1f} ({error:+.0%})"


def _ctx(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else f"{tokens:,}"


def summary_line(est: SpeedEstimate) -> str:
    """One short line for the fit panel and the advisor: predicted decode and TTFT."""
    low, high = est.decode_range
    # the context and the users it is for, said every time: F12's figure (its own context) and
    # the fit panel's (the form's) differ for the same model
    text = (
        f"≈{est.decode_tok_s:.0f} tok/s ({low:.0f}–{high:.0f}) 1 user at {_ctx(est.context)} ctx · "
        f"TTFT {est.ttft_s:.2f} s"
    )
    return text + (" · calibrated" if est.calibration else "")


@record
class GuideRow:
    """A published single-user figure this model is checked against (tests/core/test_speed.py). Each
    says which catalog spec stands for the row and why a row the roofline cannot reach is not met."""

    label: str
    low: float
    high: float
    reachable: bool
    why: str


GUIDE_ROWS = (
    GuideRow(
        "Qwen3.5-35B-A3B NVFP4",
        47,
        50,
        True,
        "below the roofline; held out (tests/fixtures/speed/published.json): the fit never saw it",
    ),
    GuideRow(
        "Qwen3.5-122B-A10B NVFP4",
        28,
        32,
        False,
        "NVIDIA's NVFP4 checkpoint keeps attention, linear attention and the shared experts in bf16: "
        "12.8 GB per token, a 21 tok/s roofline at 273 GB/s. Plain vLLM decode is measured at 14–17 "
        "tok/s (ai-muninn.com, NVIDIA forum); ~30 needs MTP speculative decoding or an all-4-bit "
        "checkpoint (INT4 AutoRound: 28 tok/s)",
    ),
    GuideRow(
        "70B dense NVFP4",
        15,
        20,
        False,
        "a dense 70B reads ~40 GB per token at NVFP4: a 6.7 tok/s roofline at 273 GB/s, so 15–20 "
        "tok/s for one user is only reachable with speculative decoding (EAGLE-3: ~2.5 tokens per step)",
    ),
)
