"""What a model is, for the fit engine: its KV-cache layer groups and its weight bytes."""

from __future__ import annotations

from sparktui.core.modelspec.encoder import Encoder
from sparktui.core.record import record
from sparktui.core.vllm_kv_dtypes import ModelOptAlgo

# Layer kinds, as vLLM's KV cache specs see them.
FULL = "full"  # full attention: K and V for every token
SLIDING = "sliding"  # sliding-window attention: at most the window
MLA = "mla"  # multi-head latent attention: one latent (kv_lora_rank + rope dims) per token
MAMBA = "mamba"  # linear attention / Mamba2 / Gated DeltaNet: a fixed state per sequence

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1}

# How a packed --kv-cache-dtype lays out one token of one KV head (vllm/v1/kv_cache_interface.py:
# AttentionSpec.page_size_bytes / real_page_size_bytes, MLAAttentionSpec; core/vllm_rules.py says
# which vLLM accepts which dtype).
NVFP4 = "nvfp4"  # per side: head/2 bytes of fp4 data + head/16 fp8 block scales
PER_TOKEN_HEAD = "per_token_head"  # 1 byte per element + an fp32 scale per side (8 bytes)
INT4_PER_TOKEN_HEAD = "int4_per_token_head"  # half a byte per element + the two fp32 scales
DS_MLA = "ds_mla"  # a sparse-MLA layer's fixed per-token layout (fp8_ds_mla 656 B, nvfp4_ds_mla 352 B)


class KvFormat(int):
    """A packed KV cache dtype: the int value is its nominal bytes per element (for estimates that
    only need a rough size); `head_bytes` is what vLLM really allocates per token and KV head."""

    layout: str
    name: str
    mla_bytes: int
    sliding_unpacked: bool  # int4: sliding-window pages budgeted at a byte per element (vLLM < 0.28)

    def __new__(
        cls, nominal: int, layout: str, name: str, mla_bytes: int = 0, sliding_unpacked: bool = False
    ) -> KvFormat:
        fmt = super().__new__(cls, nominal)
        fmt.layout, fmt.name, fmt.mla_bytes, fmt.sliding_unpacked = layout, name, mla_bytes, sliding_unpacked
        return fmt

    def head_bytes(self, head_k: int, head_v: int, mla: bool = False, sliding: bool = False) -> int:
        if self.layout == DS_MLA and mla and self.mla_bytes:
            return self.mla_bytes
        if self.layout == NVFP4:
            return head_k // 2 + head_k // 16 + head_v // 2 + head_v // 16
        if self.layout == PER_TOKEN_HEAD or (self.layout == INT4_PER_TOKEN_HEAD and sliding and self.sliding_unpacked):
            return head_k + head_v + 8
        if self.layout == INT4_PER_TOKEN_HEAD:
            return head_k // 2 + head_v // 2 + 8
        return (head_k + head_v) * int(self)

    # a KvFormat is never equal to a plain byte count: plan_kv caches by its arguments
    def __eq__(self, other: object) -> bool:
        return isinstance(other, KvFormat) and self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[int, str, str, int, bool]:
        return int(self), self.layout, self.name, self.mla_bytes, self.sliding_unpacked

    def __repr__(self) -> str:
        return f"KvFormat({self.name})"


@record
class LayerGroup:
    """`count` layers that hold the same KV-cache state."""

    kind: str
    count: int
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    sliding_window: int | None = None
    # Fixed state (kind MAMBA), as vLLM's MambaStateShapeCalculator shapes it: a conv state of
    # conv_dim × (conv_kernel - 1 + speculative tokens) in the conv dtype, and a recurrent state
    # of value_heads × head_v × head_k in `ssm_dtype` (None = the conv dtype).
    # Gated DeltaNet: value heads × head_v × head_k; Mamba2: heads × head_dim × ssm_state_size.
    conv_dim: int = 0
    conv_kernel: int = 0
    value_heads: int = 0
    head_k: int = 0
    head_v: int = 0
    ssm_dtype: str | None = None
    draft: bool = False  # an MTP / drafter layer, used only with speculative decoding
    state_kind: str = "gdn"  # MAMBA: "gdn" (Gated DeltaNet), "kda" (Kimi Delta Attention) or "mamba2"
    # bytes per element whatever --kv-cache-dtype says (0: the KV dtype's): DeepSeek V3.2's sparse-
    # attention indexer keeps its keys as uint8 (fp8 values + fp32 scales)
    elem_bytes: int = 0

    def _ssm_dtype(self, flag: str | None) -> str | None:
        """The recurrent state's dtype under --mamba-ssm-cache-dtype `flag`. Kimi-Linear's KDA layers keep
        float32 whatever it says (kimi_gdn_linear_attn.py KimiGatedDeltaNetAttention.get_state_dtype passes no
        ssm dtype, to 0.32; vllm_rules kda_ssm_cache_dtype says which values start)."""
        if self.state_kind == "kda" or not flag or flag == "auto":
            return self.ssm_dtype
        return flag

    def kv_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token takes in one layer of this group (0 for a fixed state)."""
        if self.kind == MAMBA:
            return 0
        heads = 1 if self.kind == MLA else max(1, self.num_kv_heads // tp)
        if isinstance(kv_bytes, KvFormat) and not self.elem_bytes:
            return heads * kv_bytes.head_bytes(self.head_size, self.head_size_v, self.kind == MLA, self.kind == SLIDING)
        return heads * (self.head_size + self.head_size_v) * (self.elem_bytes or kv_bytes)

    def state_bytes(self, dtype_bytes: int, tp: int = 1, num_spec: int = 0, ssm_dtype: str | None = None) -> int:
        """Bytes of one sequence's fixed state in one layer (MAMBA only). `ssm_dtype` is
        --mamba-ssm-cache-dtype when given (it overrides the model's own)."""
        if self.kind != MAMBA:
            return 0
        wanted = self._ssm_dtype(ssm_dtype)
        ssm_bytes = DTYPE_BYTES.get(wanted or "", dtype_bytes)
        conv = (self.conv_dim // tp) * (self.conv_kernel - 1 + num_spec) * dtype_bytes
        ssm = max(1, self.value_heads // tp) * self.head_v * self.head_k * ssm_bytes
        return conv + ssm

    def describe(self, kv_bytes: int, tp: int = 1, ssm_dtype: str | None = None) -> str:
        n = f"{self.count} {'draft ' if self.draft else ''}"
        if self.kind == MAMBA:
            what = {"mamba2": "Mamba2", "kda": "KDA linear-attention"}.get(self.state_kind, "linear-attention")
            dtype = self._ssm_dtype(ssm_dtype)
            return (
                f"{n}{what} layers: fixed state per sequence "
                f"(conv {self.conv_dim}×{self.conv_kernel - 1} + {self.value_heads}×{self.head_v}×{self.head_k}"
                f"{' in ' + dtype if dtype else ''})"
            )
        if self.kind == MLA and self.elem_bytes:
            return (
                f"{n}sparse-attention indexer caches × {self.head_size} B (fp8 keys + scales)"
                f" = {self.count * self.kv_bytes_per_token(kv_bytes, tp):,} B/token"
            )
        total = self.count * self.kv_bytes_per_token(kv_bytes, tp)
        if isinstance(kv_bytes, KvFormat):
            heads_text = "1 latent" if self.kind == MLA else f"{max(1, self.num_kv_heads // tp)} KV heads"
            what = {MLA: "MLA", FULL: "full-attention"}.get(self.kind, f"sliding-window ({self.sliding_window} tokens)")
            one = kv_bytes.head_bytes(self.head_size, self.head_size_v, self.kind == MLA, self.kind == SLIDING)
            return f"{n}{what} layers × {heads_text} × {one} B ({kv_bytes.name}, packed) = {total:,} B/token"
        if self.kind == MLA:
            return (
                f"{n}MLA layers × 1 latent × {self.head_size} (kv_lora_rank + rope) × {kv_bytes} B"
                f" = {self.count * self.kv_bytes_per_token(kv_bytes, tp):,} B/token"
            )
        heads = max(1, self.num_kv_heads // tp)
        what = "full-attention" if self.kind == FULL else f"sliding-window ({self.sliding_window} tokens)"
        kv = (
            "2 (K,V)"
            if self.head_size_v == self.head_size
            else f"({self.head_size}+{self.head_size_v})/{self.head_size}"
        )
        return (
            f"{n}{what} layers × {heads} KV heads × {self.head_size} head_dim × {kv_bytes} B × {kv}"
            f" = {self.count * self.kv_bytes_per_token(kv_bytes, tp):,} B/token"
        )


@record
class ModelSpec:
    """What the fit and the speed model need of a model, read from its config (and weights)."""

    name: str
    source: str  # where it was read from, for messages
    architecture: str = ""
    model_type: str = ""
    dtype: str = "bfloat16"
    num_layers: int = 0
    hidden_size: int = 0
    intermediate_size: int = 0  # dense MLP width (per active expert path for the activation estimate)
    vocab_size: int = 0
    num_attention_heads: int = 0
    # values per token of an attention-output gate made apart from q (Laguna's g_proj), widest layer's
    output_gate_width: int = 0
    max_position_embeddings: int = 0
    layers: tuple[LayerGroup, ...] = ()
    mtp_layers: tuple[LayerGroup, ...] = ()
    num_experts: int = 0
    experts_per_token: int = 0
    balanced_router: bool = False  # the router carries a load-balancing bias (moe.balanced_router)
    # decoder layers whose feed-forward block is routed experts / a dense MLP (Nemotron-H's M and *
    # layers have neither; gemma-4 MoE layers have both): the speed estimate's per-layer costs
    moe_layers: int = 0
    mlp_layers: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    # an MoE model's layers with a dense MLP of intermediate_size instead of experts (modelspec/moe.py
    # dense_layers): before the first MoE layer (first_k_dense_replace) and after it (mlp_only_layers,
    # moe_layer_freq); the profile pass's forward peaks in them too (fit_settings.activation_parts)
    dense_layers_first: int = 0
    dense_layers_later: int = 0
    # MLA (mla.activation_widths): values per token its attention holds at o_proj beside the hidden-size
    # tensors, (split across TP: q and the attention output, replicated: the latent projections)
    mla_widths: tuple[int, int] = (0, 0)
    quantization: str | None = None  # fp8, nvfp4, mxfp4, awq, gptq, int8, int4, mixed
    checkpoint_kv_cache_dtype: str | None = None  # "fp8" when the checkpoint asks for it
    checkpoint_quant_method: str | None = None  # the quantization method vLLM reads it from (vllm_rules)
    modelopt_algo: ModelOptAlgo | None = None  # a ModelOpt checkpoint's quant_algo as vLLM reads it
    # Kimi-Linear: the first KDA layer whose q/k/v/b/f_a_proj a compressed-tensors ignore list excludes only
    # in part, and the shards it excludes (() when none): vllm_rules kda_fused_in_proj
    kda_split_shards: tuple[str, tuple[str, ...]] | tuple[()] = ()
    param_count: int = 0
    weights_bytes: int = 0
    weights_source: str = ""
    mtp_weights_bytes: int = 0
    params_by_category: tuple[tuple[str, int], ...] = ()  # for online quantization (--quantization fp8)
    # estimated bytes of each weight category at its stored precision (for the speed estimate:
    # decode reads every byte of the dense parts and only the routed experts' share of "experts")
    bytes_by_category: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()
    # The longest --max-model-len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN (0: unknown),
    # and the config key it comes from (vllm/config/model.py _get_and_verify_max_len).
    max_len_limit: int = 0
    max_len_key: str = ""
    multimodal: bool = False  # has a vision / audio tower vLLM loads unless --language-model-only
    remote_code: bool = False  # config.json maps classes to the repo's own code (auto_map)
    config_model_type: str = ""  # config.json's top-level model_type: what vLLM's get_config looks up
    drafter: str = ""  # the separate drafter attached: "eagle", "eagle3", "dflash", "draft model"
    draft_vocab_size: int = 0  # an EAGLE3 drafter's own (smaller) output vocabulary
    # final_logit_softcapping (Gemma 2 / 4): vLLM's LogitsProcessor.forward divides, tanh's and
    # multiplies the logits into new tensors, so two copies of them are live at once (0: none)
    logit_softcap: float = 0.0
    encoder: Encoder | None = None  # the multimodal encoder vLLM profiles (None: none loaded or not modelled)
    # EAGLE3 / DFlash: how many of the target's hidden states the drafter reads (its config's
    # eagle_aux_hidden_state_layer_ids / dflash_config.target_layer_ids); on a target, its drafter's
    aux_hidden_layers: int = 0
    # a separate drafter's own (hidden size, intermediate size, query width = heads × head size): its dummy
    # forward's widths (0: none)
    drafter_widths: tuple[int, int, int] = (0, 0, 0)
    # DeepSeek V4: config.json's compress_ratios, the decoder layers' then the drafter layers'
    # (its KV cache is planned by modelspec/deepseek_v4.py, not from `layers`)
    compress_ratios: tuple[int, ...] = ()
    kv_dims: tuple[int, int, int] = (0, 0, 0)  # DeepSeek V4: head_dim, index_head_dim, sliding_window
    # MoE layers whose routed experts load as NVFP4: (layers, experts, hidden, intermediate, gated), or ()
    nvfp4_moe: tuple[int, int, int, int, bool] | tuple[()] = ()
    # the M-RoPE caches counted in weights_bytes at max_position × 4 positions that vLLM 0.32 builds at
    # × 1 (Qwen3.5 / 3.6, Qwen3-VL: modelspec/rope.py, vllm_rules mrope_cache_positions)
    mrope_cache_bytes: int = 0
    # the rotary cos/sin caches counted in weights_bytes (mrope_cache_bytes among them): a buffer of each
    # rotary module, not sharded, so every tensor-parallel rank holds all of it (rotary_embedding/base.py
    # RotaryEmbedding.__init__ register_buffer("cos_sin_cache", max_position × rotary_dim))
    rope_cache_bytes: int = 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    @property
    def is_hybrid(self) -> bool:
        return len({g.kind for g in self.layers}) > 1

    def kv_bytes_per_token(self, kv_bytes: int | None = None, tp: int = 1) -> int:
        kv_bytes = kv_bytes or self.dtype_bytes
        return sum(g.count * g.kv_bytes_per_token(kv_bytes, tp) for g in self.layers)
