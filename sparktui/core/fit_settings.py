"""What the fit reads from a ServeConfig (FitSettings, with vLLM's defaults for the version filled in)
and the memory vLLM's profile run takes beside the weights: the activation peak, the fused-MoE and
Gated-DeltaNet workspaces, the sampler, the CUDA-graph estimate."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from sparktui.core.config import ServeConfig
from sparktui.core.kv_plan import DEFAULT_RULES, KvPlan
from sparktui.core.machine import (
    Machine,
)
from sparktui.core.modelspec import MAMBA, MLA, LayerGroup, ModelSpec
from sparktui.core.record import record
from sparktui.core.speculation import NO_KV_METHODS, Speculation
from sparktui.core.units import MiB
from sparktui.core.vllm_rules import (
    CUDAGRAPH_FIRST_CAPTURE,
    CUDAGRAPH_PER_GRAPH,
    FLASHINFER_FULL_FIRST_CAPTURE,
    FLASHINFER_FULL_PER_GRAPH,
    FLASHINFER_WORKSPACE_BYTES,
    FULL_DECODE_MODES,
    GDN_PREFILL_COPIES,
    MEASURED_CONSTANTS,
    VllmRules,
    graph_counts,
    graph_counts_v2,
    rules_for,
)

if TYPE_CHECKING:
    from sparktui.core.encoder_profile import EncoderPass

# --------------------------------------------------------------------------- settings


@record
class FitSettings:
    """The ServeConfig values the fit needs, with vLLM's defaults filled in."""

    utilization: float
    max_model_len: int
    auto_len: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    block_size: int | None
    prefix_caching: bool
    enforce_eager: bool
    tp: int
    num_spec: int
    mtp: bool
    notes: tuple[str, ...] = ()
    rules: VllmRules = DEFAULT_RULES
    async_scheduling: bool = True
    cuda_graphs_counted: bool = True  # vLLM subtracts its CUDA-graph estimate from the KV cache
    mamba_ssm_dtype: str | None = None  # --mamba-ssm-cache-dtype (None / "auto": the model's own)
    attention_backend: str | None = None  # --attention-backend, lower case
    # --compilation-config: explicit capture sizes, largest size, cudagraph_mode (upper case)
    capture_sizes: tuple[int, ...] | None = None
    max_capture_size: int | None = None
    cudagraph_mode: str | None = None
    model_runner: str = "v1"  # "v2": vLLM's V2 GPU model runner (vllm/v1/worker/gpu)
    load_format: str | None = None  # --load-format, lower case (instanttensor costs non-torch memory)
    speculative_method: str | None = None  # as vLLM resolves it (core/speculation.py)
    mm_limits: tuple[tuple[str, int], ...] = ()  # --limit-mm-per-prompt: (modality, items per prompt)
    quantized: bool = False  # the checkpoint's quantization or --quantization (which MoE method runs)


# Speculative methods that turn vLLM's async scheduling off (vllm/config/vllm.py
# VllmConfig.__post_init__: only EAGLE/MTP/DFlash/draft-model/ngram_gpu keep it).
_SYNC_SPECULATIVE = ("ngram", "medusa", "mlp_speculator", "suffix")


def _compilation(config: ServeConfig) -> tuple[tuple[int, ...] | None, int | None, str | None]:
    """(cudagraph_capture_sizes, max_cudagraph_capture_size, cudagraph_mode) from --compilation-config."""
    text = config.compilation_config
    if not text:
        return None, None, None
    data = json.loads(text)  # ServeConfig checked it is JSON
    if not isinstance(data, dict):
        return None, None, None
    sizes = data.get("cudagraph_capture_sizes")
    largest = data.get("max_cudagraph_capture_size")
    mode = data.get("cudagraph_mode")
    capture: tuple[int, ...] | None = None
    if isinstance(sizes, list) and all(isinstance(x, int) and 0 < x < 1 << 20 for x in sizes):
        capture = tuple(sorted({int(x) for x in sizes}))
    ok_largest = isinstance(largest, int) and 0 <= largest < 1 << 20
    return (
        capture,
        int(largest) if ok_largest and largest is not None else None,
        str(mode).upper() if mode is not None else None,
    )


def _async_scheduling(config: ServeConfig) -> bool:
    """Whether vLLM schedules asynchronously (two batches in flight): on by default."""
    if config.async_scheduling is not None:
        return config.async_scheduling
    if config.speculation is not None:
        return config.speculation.method not in _SYNC_SPECULATIVE
    return True


def rules_of(config: ServeConfig) -> VllmRules:
    """The rules for the config's vllm_version (None: the newest read, with a note)."""
    return rules_for(config.vllm_version) if config.vllm_version else DEFAULT_RULES


def _speculative(parsed: Speculation | None, spec: ModelSpec) -> tuple[int, bool, list[str], str | None]:
    """(speculative tokens, whether draft layers are counted, notes, method)."""
    if parsed is None:
        return 0, False, [], None
    n, method = parsed.num_tokens, parsed.method
    notes: list[str] = []
    if parsed.mtp:
        if not spec.mtp_layers:
            notes.append(f"{spec.name} has no MTP layers in its config; the draft is not modelled")
            return n, False, notes, method
        return n, True, notes, method
    if spec.drafter:  # a separate drafter read from its own config (modelspec.load_serving_spec)
        return n, True, notes, method
    if method not in NO_KV_METHODS and parsed.refusal is None:
        notes.append(f"speculative method {method or '?'}: the draft model's weights and KV are not modelled")
    return n, False, notes, method


def settings_from(
    config: ServeConfig, spec: ModelSpec, machine: Machine, rules: VllmRules | None = None
) -> FitSettings:
    rules = rules or rules_of(config)
    batched_default, seqs_default = rules.batch_defaults(machine.total if machine.device_memory_known else None)
    max_len = config.max_model_len
    auto_len = max_len is not None and max_len < 0
    if max_len is None or auto_len:
        # vLLM's default is the model's own limit (rope scaling included), 2048 when unknown
        max_len = spec.max_len_limit or spec.max_position_embeddings or 2048
    num_spec, mtp, notes, method = _speculative(config.speculation, spec)
    load_format = config.load_format.lower()
    if config.unmodelled_flags:
        notes.append(f"not modelled (passed to vLLM as they are): {' '.join(config.unmodelled_flags)}")
    hybrid = any(g.kind == MAMBA for g in spec.layers)
    prefix = config.enable_prefix_caching
    if prefix is None:
        prefix = rules.prefix_caching_default(hybrid=hybrid)
    enforce_eager = config.enforce_eager
    sizes, largest, mode = _compilation(config)
    runner = rules.model_runner(
        spec.architecture,
        moe=spec.num_experts > 0,
        hybrid=hybrid,
        quantized=bool(spec.quantization or config.quantization),
        speculative_method=method,
        mamba_cache_mode=rules.mamba_cache_mode(bool(prefix), spec.architecture, num_spec > 0) if hybrid else "none",
    )
    return FitSettings(
        utilization=config.gpu_memory_utilization,
        max_model_len=int(max_len),
        auto_len=auto_len,
        max_num_seqs=config.max_num_seqs or seqs_default,
        max_num_batched_tokens=config.max_num_batched_tokens or batched_default,
        kv_cache_dtype=config.kv_cache_dtype or "auto",
        kv_cache_memory_bytes=config.kv_cache_memory_bytes,
        block_size=config.block_size,
        prefix_caching=bool(prefix),
        enforce_eager=enforce_eager,
        tp=max(1, config.tensor_parallel_size),
        num_spec=num_spec,
        mtp=mtp,
        notes=tuple(notes),
        rules=rules,
        async_scheduling=_async_scheduling(config),
        cuda_graphs_counted=rules.cudagraph_memory_counted(enforce_eager),
        mamba_ssm_dtype=config.mamba_ssm_cache_dtype,
        attention_backend=(config.chosen_attention_backend or "").lower() or None,
        capture_sizes=sizes,
        max_capture_size=largest,
        cudagraph_mode=mode,
        model_runner=runner,
        load_format=None if load_format == "auto" else load_format,
        speculative_method=method,
        mm_limits=_mm_limits(config.limit_mm_per_prompt),
        quantized=bool(spec.quantization or config.quantization),
    )


def _mm_limits(limits: str | None) -> tuple[tuple[str, int], ...]:
    """--limit-mm-per-prompt as (modality, count): {"image": 2} or {"image": {"count": 2, …}}."""
    try:
        data = json.loads(limits) if limits else {}
    except (TypeError, ValueError):
        return ()
    if not isinstance(data, dict):
        return ()
    out = []
    for modality, value in data.items():
        count = value.get("count") if isinstance(value, dict) else value
        if isinstance(count, int) and not isinstance(count, bool):
            out.append((str(modality), count))
    return tuple(out)


# methods whose drafter runs its own dummy pass inside vLLM's profile (gpu_model_runner.py _dummy_run:
# use_eagle() / uses_draft_model() / uses_extract_hidden_states())
DRAFTER_PASS_METHODS = ("mtp", "eagle", "eagle3", "dflash", "draft_model")


def drafter_pass_bytes(spec: ModelSpec, s: FitSettings) -> int:
    """The profile pass's peak while the drafter runs its dummy pass (gpu_model_runner.py _dummy_run →
    drafter.dummy_run), after the target's forward: the target's hidden states (and the aux hidden states
    an EAGLE3 / DFlash drafter reads) are still held, the fused-MoE workspace stays allocated, and the
    drafter adds its own working set:
    - DFlash (v1/spec_decode/dflash.py dummy_run, the same from 0.20 to 0.32), the larger of two stages:
      the context's K/V over max_num_batched_tokens (qwen3_dflash.py _project_context_kv: the normed
      context, the fused K/V projection for every draft layer and its contiguous K/V-major copy, 2 × 2 K/V
      widths), then the drafter's forward over min(tokens, max_num_seqs × (1 + k)) query tokens
      (max_query_tokens), a decoder layer's MLP stage: 6 hidden-size tensors and 3 × intermediate;
    - a separate EAGLE / EAGLE3 / draft model (llm_base_proposer.py dummy_run): its one decoder layer's
      larger stage, with its own widths (ModelSpec.drafter_widths): the attention stage's 5 hidden-size
      tensors, the qkv projection and the attention output (5 h + 2 q + 2 kv), or the MLP's (4 h + 3 ×
      intermediate, as Llama's);
    - Qwen3-Next / Qwen3.5 / 3.6 MTP from 0.25 (qwen3_5_mtp.py, qwen3_next_mtp.py forward; vllm_rules
      gated_attention_qk_path): at its gated attention's attn_output * sigmoid(gate) the normed embedding,
      the fc output (the layer's residual) and its normed input are held (3 h) beside qkv (2 q + 2 kv, q
      doubled by the gate), the fused kernel's q, k and gate (2 q + kv), the attention output, the sigmoid
      and the product (3 q): 3 h + 7 q + 3 kv;
    - other MTP (the target's own layers): one decoder layer's working set, as the target's, plus the input
      that joins the embedding and the hidden state (2 × hidden).
    0 when no drafter runs. bench/activation_oracle.py measures the DFlash stages and the EAGLE3 drafter's
    pass on vLLM 0.32's own code (Qwen3.6 and Gemma-4 DFlash, SpecForge's Gemma-4 EAGLE3, Qwen3.6's MTP:
    to the byte)."""
    method = s.speculative_method
    if method not in DRAFTER_PASS_METHODS or not (s.mtp and spec.mtp_layers):
        return 0
    n, d, h = s.max_num_batched_tokens, spec.dtype_bytes, spec.hidden_size
    held = n * (d * h * (1 + spec.aux_hidden_layers) + moe_workspace_per_token(spec, s.tp))
    if method == "dflash":
        kv = sum(g.count * max(1, g.num_kv_heads // s.tp) * g.head_size for g in spec.mtp_layers)
        context = n * d * (h + 4 * kv)
        hidden, inner, _ = spec.drafter_widths if spec.drafter_widths[0] else (h, spec.intermediate_size, 0)
        queries = min(n, s.max_num_seqs * (1 + s.num_spec))
        return held + max(context, queries * d * (6 * hidden + 3 * inner // s.tp))
    if method == "mtp" and spec.model_type.startswith(GATED_MTP_MODEL_TYPES) and _fused_gate(s):
        g = max(spec.mtp_layers, key=lambda x: x.head_size)
        q = spec.num_attention_heads * g.head_size // s.tp
        kv = max(1, g.num_kv_heads // s.tp) * g.head_size
        return held + n * d * (3 * h + 7 * q + 3 * kv)
    hidden, inner, q = spec.drafter_widths
    if hidden and q:  # a separate EAGLE / EAGLE3 / draft model: its own decoder layer at its larger stage
        kv = max(max(1, g.num_kv_heads // s.tp) * g.head_size for g in spec.mtp_layers)
        q //= s.tp
        return held + n * d * max(5 * hidden + 2 * q + 2 * kv, 4 * hidden + 3 * inner // s.tp)
    inner = spec.shared_expert_intermediate_size if spec.num_experts else spec.intermediate_size
    return held + n * d * (8 * h + 2 * inner // s.tp)


# MTP drafters whose layer is a gated (attn_output_gate) full-attention layer: Qwen3-Next, Qwen3.5 / 3.6
GATED_MTP_MODEL_TYPES = ("qwen3_next", "qwen3_5")


def _fused_gate(s: FitSettings) -> bool:
    return s.rules.value("gated_attention_qk_path") == "fused"


def encoder_term(spec: ModelSpec, s: FitSettings) -> EncoderPass | None:
    """The multimodal encoder's share of the profile pass (core/encoder_profile.py), or None."""
    encoder = spec.encoder
    if encoder is None:
        return None
    from sparktui.core.encoder_profile import encoder_pass  # a multimodal model's fit only

    limits = dict(s.mm_limits)
    if limits.get(encoder.modality) == 0 and encoder.fallback:  # vLLM profiles the next modality
        modality, tokens, patches = encoder.fallback
        encoder = replace(encoder, modality=modality, tokens_per_item=tokens, patches_per_item=patches, fallback=None)
    limit = limits.get(encoder.modality)
    return encoder_pass(
        encoder, s.max_num_batched_tokens, s.max_num_seqs, s.max_model_len, spec.dtype_bytes, limit, s.tp
    )


def moe_workspace_per_token(spec: ModelSpec, tp: int = 1) -> int:
    """Bytes per batched token of the fused-MoE workspace, held once for every MoE layer: the
    modular kernel takes max(workspace13, output) and workspace2 from one shared WorkspaceManager
    buffer that grows to the largest request and stays (fused_moe/modular_kernel.py
    FusedMoEModularKernel._allocate_buffers, current_workspace_manager). The shapes are the experts'
    own workspace_shapes (fused_moe/experts), N the w13 width (2 × intermediate when gated; Nemotron-H's
    relu² experts have no gate): NVFP4 runs CutlassExpertsFp4, tokens × top-k × (max(2N, K) + N);
    the others TritonExperts (CutlassExpertsFp8 and MarlinExperts come to the same), tokens × top-k ×
    (max(N / 2, K) + max(N, K)) for a gated model. bench/moe_workspace_oracle.py asks vLLM's code.
    (FlashInfer's CUTLASS path keeps only (tokens, K) here and the rest inside FlashInfer.)
    A config without moe_intermediate_size (Mixtral, gpt-oss) builds its experts with intermediate_size
    (models/mixtral.py MixtralMoE, models/gpt_oss.py MLPBlock: FusedMoE(intermediate_size=config.
    intermediate_size)); bench/activation_oracle.py measures their workspace on vLLM's own model code."""
    expert_width = spec.moe_intermediate_size or spec.intermediate_size
    if not (spec.num_experts and spec.experts_per_token and expert_width):
        return 0
    inter = expert_width // tp
    gated = spec.model_type != "nemotron_h"
    n = inter * (2 if gated else 1)
    k = spec.hidden_size
    if "nvfp4" in (spec.quantization or "").lower():
        width = max(2 * n, k) + n
    else:
        width = max(n // 2 if gated else n, k) + max(n, k)
    return spec.experts_per_token * width * spec.dtype_bytes


# Hidden-size tensors live beside fused_experts' transient caches at an MoE layer (the layer's inputs,
# residual and normed input, and the op's new output): bench/activation_oracle.py at 0.13 measures
# Qwen3-30B-A3B and Mixtral to the byte with 4
MOE_STAGE_HIDDEN = 4


def profile_activation(spec: ModelSpec, s: FitSettings, sms: int | None) -> tuple[int, int]:
    """activation_parts for a launch's settings: (forward pass, sampler pass) of its profile run."""
    return activation_parts(
        spec,
        s.max_num_batched_tokens,
        s.max_num_seqs,
        s.tp,
        s.model_runner,
        s.rules.value("v1_sampler_top_k_top_p"),
        sms,
        moe_transient_chunk(spec, s),
    )


def moe_transient_chunk(spec: ModelSpec, s: FitSettings) -> int | None:
    """VLLM_FUSED_MOE_CHUNK_SIZE where the MoE layers call fused_experts, whose caches are a transient of
    the op (vllm_rules moe_unquantized_workspace: unquantized MoE before 0.14), else None: the workspace
    is the modular kernel's, held (moe_workspace_per_token)."""
    rule = s.rules.value("moe_unquantized_workspace")
    if not spec.num_experts or s.quantized or not rule.startswith("transient_"):
        return None
    return int(rule.removeprefix("transient_"))


def moe_transient_bytes(spec: ModelSpec, tokens: int, chunk: int, tp: int = 1) -> int:
    """The MoE stage beside its hidden-size tensors when the layer calls fused_experts: the router's logits
    (tokens × experts, model dtype), fused_topk's weights (fp32) and ids (int32), and fused_experts_impl's
    caches (fused_moe.py): cache13 of min(tokens, chunk) × top-k × max(N, K) (the first and third share it)
    and cache2 of × N / 2 (the activation's output; N for a non-gated expert, which also squares into a new
    N-wide tensor), N the w13 width. bench/activation_oracle.py at 0.13: to the byte."""
    expert_width = spec.moe_intermediate_size or spec.intermediate_size
    if not (spec.num_experts and spec.experts_per_token and expert_width):
        return 0
    gated = spec.model_type != "nemotron_h"
    n = expert_width // tp * (2 if gated else 1)
    width = max(n, spec.hidden_size) + (n // 2 if gated else 2 * n)
    router = tokens * (spec.num_experts * spec.dtype_bytes + spec.experts_per_token * 8)
    return router + min(tokens, chunk) * spec.experts_per_token * width * spec.dtype_bytes


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def nvfp4_moe_padding(spec: ModelSpec, tp: int = 1) -> int:
    """Bytes vLLM's CUTLASS NVFP4 MoE kernels (FLASHINFER_CUTLASS, VLLM_CUTLASS: what a GPU with native FP4
    runs; Marlin pads nothing) add to the routed experts of one tensor-parallel rank when they load, and
    "Model loading took" counts: swizzle_blockscale pads each block-scale tensor's rows to 128 and its
    columns to 4, and a non-gated expert's w13 rows, w2 columns and w2 scales are padded to match
    (quantization/utils/flashinfer_fp4_moe.py prepare_nvfp4_moe_layer_for_fi_or_cutlass, 0.14 on;
    modelopt.py ModelOptNvFp4FusedMoE.process_weights_after_loading in 0.13; a gated expert that needs
    it is refused). Nemotron-3-Nano (relu², intermediate 1856): 0.53 GiB over 23 layers."""
    if not spec.nvfp4_moe:
        return 0
    layers, experts, k, inter, gated = spec.nvfp4_moe
    n = inter // tp
    rows13 = 2 * n if gated else n
    pad = 0 if gated else _round_up(n, 128) - n
    w13_scale = _round_up(rows13, 128) * _round_up(k // 16, 4) - rows13 * (k // 16)
    w2_scale = _round_up(k, 128) * _round_up((n + pad) // 16, 4) - k * (n // 16)
    weights = pad * k // 2 + k * pad // 2  # fp4: two values a byte
    return layers * experts * (w13_scale + w2_scale + weights)


def gdn_prefill_per_token(spec: ModelSpec, tp: int = 1) -> int:
    """Bytes per batched token a Gated-DeltaNet layer holds at its prefill peak, as vLLM's code
    allocates them (layers/mamba/gdn_linear_attn.py forward_cuda / _forward_core, fla/ops:
    chunk.py chunk_gated_delta_rule_fwd): in_proj_qkvz's output, core_attn_out, the conv output,
    fused_post_conv_prep's q / k / v (g, beta fp32), chunk_scaled_dot_kkt's A (fp32) and
    solve_tril's, recompute_w_u's w and u, chunk_delta_h's h (one value × key state per 64-token
    chunk) and v_new, and chunk_fwd_o's o; times vllm_rules GDN_PREFILL_COPIES for what that
    reading leaves out. 0 for models without Gated-DeltaNet layers (Mamba2 is not counted here)."""
    gdn = [g for g in spec.layers if g.kind == MAMBA and g.state_kind == "gdn" and g.value_heads]
    if not gdn:
        return 0
    g = max(gdn, key=lambda x: x.conv_dim)
    d = spec.dtype_bytes
    hv = max(1, g.value_heads // tp)
    conv = g.conv_dim // tp
    v_all = hv * g.head_v
    tally = d * (3 * conv + 4 * v_all + hv * 64 + hv * g.head_k + v_all * g.head_k // 64) + 8 * hv + 4 * hv * 64
    return int(GDN_PREFILL_COPIES.value * tally)


def kda_profile_values_per_token(g: LayerGroup, tp: int = 1) -> int:
    """Values per batched token a Kimi Delta Attention layer holds at o_proj in vLLM's profile pass, beside
    the hidden-size tensors (vLLM 0.32 layers/mamba/gdn/kimi_gdn_linear_attn.py KimiGatedDeltaNetAttention
    .forward): in_proj_qkvgfab's output (q, k, v, one beta per head and f_a's head_dim, which every TP rank
    holds whole), f_b_proj's and g_b_proj's outputs and core_attn_out (heads × head_dim each). _forward
    returns before the convolutions and chunk_kda when the dummy run has no KDA metadata, so the prefill
    buffers a real prefill takes are not allocated here (unlike vllm_rules GDN_PREFILL_COPIES for Gated
    DeltaNet). bench/activation_oracle.py measures the same on 0.32's code. 0.25's layer (separate q / k / v
    projections, beta in fp32, o_norm before the return) holds within 2 × heads of it (not run)."""
    heads = max(1, g.value_heads // tp)
    width = heads * g.head_v
    return 3 * width + heads + g.head_v + 3 * width


# Models whose attention projects q and k through their own RMSNorms (q_norm / k_norm), a new tensor each
QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "laguna"})
# Hidden-size tensors live at the dense MLP's peak in vLLM's code: 5 (the decoder loop still holds the
# layer's two inputs, the layer holds the residual and the normed input, and the MLP keeps gate_up alive
# through down_proj), 4 where the model's code frees one sooner (bench/activation_oracle.py measures it)
MLP_HELD_HIDDEN = {"llama": 4, "mistral": 4, "gemma4": 4, "gemma4_text": 4}
# ... and at the attention stage: 5 (the layer's inputs, residual, normed input, o_proj's output), 3 for
# Gemma 4, which also normalises v (v_norm) into a tensor of its own
ATTENTION_HELD_HIDDEN = {"gemma4": 3, "gemma4_text": 3}
V_NORM_MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})


def forward_values_per_token(spec: ModelSpec, tp: int = 1, dense: bool = False) -> int | None:
    """Values per batched token live at the forward pass's peak in vLLM's model code, beside the
    fused-MoE workspace: the larger of the attention stage and the dense MLP's. Attention (profile run,
    no metadata: the kernel writes nothing new) holds 5 hidden-size tensors (the layer's inputs, residual,
    normed input, o_proj's output), the qkv projection (q + 2 kv), the attention output (q) and, with
    q / k norms, their outputs; the dense MLP (or an MoE model's shared expert) holds gate_up (2 ×
    intermediate) and the activation's output while MLP_HELD_HIDDEN hidden-size tensors are live. Measured
    by bench/activation_oracle.py on vLLM 0.32's own code (eager, as --enforce-eager runs it): exact for
    Llama, Qwen2 / 2.5 / 3 (dense and MoE), Mixtral, gpt-oss, Gemma 3, Gemma 4 (dense and MoE) and
    DeepSeek V3 / R1, whose MLA attention holds q and its output through o_proj (spec.mla_widths; a
    compiled graph frees q after the attention op, which it is live for anyway: o_proj's output less).
    None for models with Mamba / Gated-DeltaNet layers (not exact: bench/activation_oracle.py) and
    for DeepSeek V4's attention. `dense`: in an MoE model's dense-MLP layers (spec.dense_layers_first /
    later), whose MLP is intermediate_size wide."""
    attention = [g for g in spec.layers if g.count and not g.draft]
    mla = any(g.kind == MLA for g in attention)
    kda = [g for g in attention if g.kind == MAMBA and g.state_kind == "kda"]
    if not attention or any(g.kind == MAMBA and g not in kda for g in attention) or not spec.num_attention_heads:
        return None
    if mla and spec.mla_widths == (0, 0):  # MLA-like attention not read (DeepSeek V4)
        return None
    hidden = spec.hidden_size
    qk_norm = spec.model_type in QK_NORM_MODEL_TYPES
    v_norm = spec.model_type in V_NORM_MODEL_TYPES
    widest = gated = 0
    for g in attention:
        if g.kind == MAMBA:
            continue
        q = spec.num_attention_heads * g.head_size // tp
        kv = max(1, g.num_kv_heads // tp) * g.head_size
        stage = 2 * q + 2 * kv + (q + kv if qk_norm else 0) + (kv if v_norm else 0)
        widest = max(widest, stage)
        # an output gate (w values, Laguna's g_proj): its softplus in fp32 beside the bf16 gate (5 w), then
        # the gated copy of the attention output beside the bf16 gate (q + w)
        w = spec.output_gate_width // tp
        gated = max(gated, stage + max(q + w, 5 * w))
    if mla:  # the heads' part split across TP, the latent projections replicated (modelspec/mla.py)
        widest = spec.mla_widths[0] // tp + spec.mla_widths[1]
    for g in kda:
        widest = max(widest, kda_profile_values_per_token(g, tp))
    inner = spec.shared_expert_intermediate_size if spec.num_experts and not dense else spec.intermediate_size
    mlp = MLP_HELD_HIDDEN.get(spec.model_type, 5) * hidden + 3 * inner // tp if inner else 0
    held = ATTENTION_HELD_HIDDEN.get(spec.model_type, 5)
    # the gate's stages come before o_proj's output exists (laguna.py LagunaAttention.forward)
    gate = (held - 1) * hidden + gated if spec.output_gate_width else 0
    return max(held * hidden + widest, gate, mlp)


def _values_per_token(spec: ModelSpec, tp: int, dense: bool = False) -> int:
    """Bytes per batched token live at the forward's peak outside the MoE workspace (forward_values_per_token,
    else the estimate below), in the MoE layers or (`dense`) in the dense-MLP layers of an MoE model."""
    per_token = forward_values_per_token(spec, tp, dense)
    if per_token is None:
        # Not read from vLLM's code here: Gated-DeltaNet hybrids (vLLM's profile pass skips the chunked
        # prefill GDN_PREFILL_COPIES counts from logs) and Nemotron-H, whose eager pass peaks in
        # Mixer2RMSNormGated.forward_native's fp32 temporaries (n_groups != 1): bench/activation_oracle.py
        # measures 1.32x this estimate at 2048 tokens, but that stage with the workspace comes to 4.91 GiB
        # at 32768 tokens, more than the 3.92 GiB the compiled Cascade run on an RTX 5090 left for the
        # peak and non-torch memory (test_nemotron_cascade_on_an_rtx_5090_started_so_it_starts): the log
        # wins over the eager pass. These, and DeepSeek V4, keep the residual stream and the dense MLP; an
        # MoE model's routed experts keep their intermediates in the fused-MoE workspace, only its
        # shared expert runs as a dense MLP
        inner = spec.shared_expert_intermediate_size if spec.num_experts and not dense else spec.intermediate_size
        per_token = 6 * spec.hidden_size + 2 * inner // tp
    return spec.dtype_bytes * per_token + gdn_prefill_per_token(spec, tp)


def activation_parts(
    spec: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int = 1,
    runner: str = "v1",
    sampler_path: str = "triton",
    sms: int | None = None,
    moe_chunk: int | None = None,
) -> tuple[int, int]:
    """(forward pass, sampler pass) peaks of vLLM's profile run (GPUModelRunner.profile_run).
    `sampler_path`: vllm_rules v1_sampler_top_k_top_p for the version; `sms`: the GPU's SMs (V1 only);
    `moe_chunk`: moe_transient_chunk (the MoE caches a transient of the MoE stage, not held)."""
    per_token = _values_per_token(spec, tp)
    if moe_chunk is None:
        forward = max_num_batched_tokens * (per_token + moe_workspace_per_token(spec, tp))
    else:
        moe_stage = max_num_batched_tokens * spec.dtype_bytes * MOE_STAGE_HIDDEN * spec.hidden_size
        forward = max(
            max_num_batched_tokens * per_token,
            moe_stage + moe_transient_bytes(spec, max_num_batched_tokens, moe_chunk, tp),
        )
    if spec.dense_layers_first or spec.dense_layers_later:
        # An MoE model's dense-MLP layers (intermediate_size, far wider than a shared expert) peak on their
        # own: those before the first MoE layer run before vLLM's WorkspaceManager holds the MoE workspace
        # (taken lazily by the first fused-MoE call, modular_kernel.py; the profile pass is the first
        # forward), those after it beside the workspace (bench/activation_oracle.py: DeepSeek-V3)
        dense = max_num_batched_tokens * _values_per_token(spec, tp, dense=True)
        held = moe_workspace_per_token(spec, tp) if spec.dense_layers_later and moe_chunk is None else 0
        forward = max(forward, dense + max_num_batched_tokens * held)
    # _dummy_sampler_run: V1 applies top-k / top-p in fp32, the V2 runner samples the logits as they are
    if runner == "v1":
        return forward, v1_sampler_pass_bytes(spec, max_num_batched_tokens, max_num_seqs, sampler_path, sms)
    return forward, v2_sampler_pass_bytes(spec, max_num_batched_tokens, max_num_seqs, tp, moe_chunk is None)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def v1_sampler_pass_bytes(
    spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, path: str = "triton", sms: int | None = None
) -> int:
    """The V1 runner's dummy sampler pass at its peak (gpu_model_runner.py _dummy_sampler_run: one row
    per dummy request, temperature 0.5, top-p 0.9, top-k vocab − 1, no penalties), read from each
    version's code (vllm_rules v1_sampler_top_k_top_p), in bytes per logit (rows × vocab):
    - held throughout: the runner's logits in the model's dtype, and Sampler.forward's fp32 copy of
      them (none when the model runs in fp32); temperature divides in place.
    - "sort_copy" (to 0.16): apply_top_k_top_p sorts (fp32 values 4, int64 indices 8), holds the top-k
      and top-p bool masks (1 + 1) and the top-p probabilities (4), then scatters into a new tensor (4).
    - in-place sort (0.17 to 0.30 under 8 requests): the same without the new tensor; 6 fp32 copies with
      bf16 logits, as bench/activation_oracle.py measures vLLM 0.32's PyTorch path (its CPU build).
    - Triton (0.17 on, from 8 requests; always from 0.31): the logits masked in place with one cached
      buffer of min(next power of 2 of min(SMs, rows), SMs) rows (topk_topp_triton.py
      apply_top_k_top_p_triton), then the softmax's probabilities (4) and random_sample's exponential
      draw (4). Without the SM count, next power of 2 of rows (the most it can be).
    FlashInfer's sampler (first from 0.21) holds its masked logits and probabilities (4 + 4): never
    more than the forward_native pass run after it. The sort's own scratch (CUB) is not counted."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    logits = rows * spec.vocab_size
    held = spec.dtype_bytes + (0 if spec.dtype_bytes == 4 else 4)
    if path == "sort_copy":
        return logits * (held + 22)
    if path == "triton" or (path == "triton_from_8" and rows >= 8):
        buffer_rows = _next_power_of_2(rows) if sms is None else min(_next_power_of_2(min(sms, rows)), sms)
        return logits * (held + 8) + buffer_rows * spec.vocab_size * 4
    return logits * (held + 18)


def v2_sampler_pass_bytes(
    spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1, moe_held: bool = True
) -> int:
    """The V2 runner's dummy sampler pass (v1/worker/gpu/model_runner.py profile_run, _dummy_sampler_run):
    compute_logits over one row per dummy request, in the model's dtype, two copies of them at once for a
    soft-capped model (layers/logits_processor.py LogitsProcessor.forward); the dummy batch needs no
    logits processing and no top-k / top-p, and gumbel_sample writes one token per request
    (gpu/sample/sampler.py Sampler.sample). Meanwhile the forward's hidden states, the rows taken from
    them and the fused-MoE workspace stay held. bench/activation_oracle.py measures it on vLLM 0.32's
    own code (exact for the 19 models it can build)."""
    seqs = min(max_num_seqs, max_num_batched_tokens)
    copies = 2 if spec.logit_softcap else 1
    held = (max_num_batched_tokens + seqs) * spec.hidden_size + copies * seqs * spec.vocab_size
    return spec.dtype_bytes * held + (max_num_batched_tokens * moe_workspace_per_token(spec, tp) if moe_held else 0)


def activation_bytes(
    spec: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int = 1,
    runner: str = "v1",
    sampler_path: str = "triton",
    sms: int | None = None,
) -> int:
    """The profile run's torch peak: the larger of the forward pass over max_num_batched_tokens
    tokens (hidden states and MLP intermediates) and the dummy sampler pass (v1_sampler_pass_bytes,
    v2_sampler_pass_bytes). An estimate."""
    return max(activation_parts(spec, max_num_batched_tokens, max_num_seqs, tp, runner, sampler_path, sms))


@record
class GraphEstimate:
    """What vLLM's CUDA-graph memory profile will report (GPUModelRunner.profile_cudagraph_memory):
    the first capture of each mode (the largest counts once) plus each further graph."""

    bytes: int
    low: int
    high: int
    piecewise: int
    full: int
    backend: str  # what decided the first capture: "flashinfer" or "default"
    groups: int = 0  # FlashInfer: attention KV-cache groups, one builder and workspace each
    workspace: int = 0  # FlashInfer: their workspace buffers together


def _graph_counts(spec: ModelSpec, s: FitSettings, backend: str | None) -> tuple[int, int]:
    if s.enforce_eager:
        return 0, 0
    mode = s.rules.cudagraph_mode(s.cudagraph_mode, s.num_spec, single_token_decode=backend == "flashinfer")
    sizes = s.rules.cudagraph_capture_sizes(
        s.max_num_seqs,
        s.num_spec,
        s.max_num_batched_tokens,
        full_decode=mode in FULL_DECODE_MODES,
        gpt_oss=spec.architecture == "GptOssForCausalLM",
        explicit=s.capture_sizes,
        largest=s.max_capture_size,
        runner=s.model_runner,
    )
    counts = graph_counts if s.model_runner == "v1" else graph_counts_v2
    return counts(sizes, s.max_num_seqs, s.num_spec, mode)


def flashinfer_groups(plan: KvPlan | None) -> int:
    """How many FlashInfer metadata builders vLLM makes: one per attention KV-cache group
    (gpu_model_runner.py initialize_attn_backend: an AttentionGroup, with its own builder, per
    KV-cache group and backend); linear-attention / Mamba groups have backends of their own."""
    if plan is None:
        return 1
    return max(1, sum(g.groups for g in plan.groups if g.kind != MAMBA))


def flashinfer_workspace(spec: ModelSpec, s: FitSettings) -> int:
    """One FlashInfer builder's workspace buffer, allocated on its first FULL-graph warm-up
    (v1/attention/backends/flashinfer.py FlashInferMetadataBuilder._get_workspace_buffer):
    VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (394 MiB), from vllm_rules flashinfer_workspace 'sized'
    at least max_num_batched_tokens × query heads per rank × head size × 16 bytes."""
    size = FLASHINFER_WORKSPACE_BYTES
    if s.rules.value("flashinfer_workspace") == "sized":
        heads = max(1, spec.num_attention_heads // s.tp)
        head = max((g.head_size for g in spec.layers if g.kind != MAMBA and g.head_size), default=128)
        size = max(size, s.max_num_batched_tokens * heads * head * 16)
    return size


def cudagraph_estimate(
    spec: ModelSpec, s: FitSettings, machine: Machine, kv_bytes: int, plan: KvPlan | None = None
) -> GraphEstimate:
    """The CUDA-graph estimate for these flags (before it is known whether vLLM subtracts it).
    With FlashInfer FULL graphs the first capture holds each attention KV-cache group's workspace
    and what each group's graph adds, and each further graph one decode wrapper per group: it
    scales with the attention groups captured, not with one model's figure."""
    heads = tuple(g.head_size for g in spec.layers if g.count and g.kind != MAMBA and g.head_size)
    backend = s.attention_backend
    if backend is None and machine.unified:
        backend = s.rules.gb10_attention_backend(kv_bytes == 1, heads)
    pieces, full = _graph_counts(spec, s, backend)
    if pieces + full == 0:
        return GraphEstimate(0, 0, 0, 0, 0, "none")
    if backend == "flashinfer" and full:
        groups = flashinfer_groups(plan)
        workspace = groups * flashinfer_workspace(spec, s)
        per_full = max(MiB, groups * _BYTES[FLASHINFER_FULL_PER_GRAPH.key])
        further = max(pieces - 1, 0) * _BYTES[CUDAGRAPH_PER_GRAPH.key] + max(full - 1, 0) * per_full
        low, high = _SPREAD[FLASHINFER_FULL_FIRST_CAPTURE.key]
        first = workspace + groups * _BYTES[FLASHINFER_FULL_FIRST_CAPTURE.key]
        return GraphEstimate(
            first + further,
            workspace + groups * low + further,
            workspace + groups * high + further,
            pieces,
            full,
            "flashinfer",
            groups,
            workspace,
        )
    further = max(pieces - 1, 0) * _BYTES[CUDAGRAPH_PER_GRAPH.key] + max(full - 1, 0) * _BYTES[CUDAGRAPH_PER_GRAPH.key]
    low, high = _SPREAD[CUDAGRAPH_FIRST_CAPTURE.key]
    return GraphEstimate(
        _BYTES[CUDAGRAPH_FIRST_CAPTURE.key] + further, low + further, high + further, pieces, full, "default"
    )


_BYTES = {c.key: c.bytes for c in MEASURED_CONSTANTS}
_SPREAD = {c.key: c.spread_bytes for c in MEASURED_CONSTANTS}
