"""One row of core/vllm_rules.py's table: what a vLLM release range does for one key, and where in
vLLM's source that is."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from sparktui.core.record import record
from sparktui.core.vllm_version import VllmVersion

RuleKey = Literal[
    "kv_tokens_count",
    "sliding_window_in_flight",
    "hybrid_prefix_caching_default",
    "mamba_cache_mode_default",
    "mamba_all_mode_pages",
    "mamba_speculative_pages",
    "kv_dtype_auto_modelopt",
    "kv_dtype_auto_compressed_tensors",
    "cudagraph_estimate",
    "cudagraph_decode_query_len",
    "cudagraph_sizes_max_tokens",
    "cudagraph_sizes_stride",
    "cudagraph_decode_sizes",
    "cudagraph_mode_default",
    "cudagraph_gpt_oss_1024",
    "model_runner_default",
    "instanttensor_loader",
    "cudagraph_v2_rounding",
    "model_runner_v2_speculative",
    "model_runner_v2_mamba",
    "gb10_fp8_attention_backend",
    "non_kv_accounting",
    "uma_free_memory",
    "null_block_in_length_check",
    "one_request_check",
    "hybrid_group_size",
    "batch_defaults_large_gpu",
    "batch_defaults_gb10",
    "dflash_layer_types",
    "nvfp4_kv_backend",
    "int4_kv_sliding_layers",
    "attention_page_padding",
    "language_model_only",
    "mm_zero_limit_towers",
    "flashinfer_workspace",
    "v1_sampler_top_k_top_p",
    "mrope_cache_positions",
    "moe_unquantized_workspace",
    "gated_attention_qk_path",
    "gpu_memory_utilization_default",
    "modelopt_mixed_precision",
    "non_torch_window",
    "kda_ssm_cache_dtype",
    "kda_fused_in_proj",
    "hybrid_mla_block_alignment",
]


@record
class Rule:
    """One behaviour of vLLM and the releases that have it, with the code it was read from."""

    key: RuleKey
    since: VllmVersion  # first release with this behaviour
    until: VllmVersion | None  # first release without it (None: still so in NEWEST_READ)
    value: str
    summary: str
    source: str  # vLLM file: function

    def applies(self, version: VllmVersion) -> bool:
        return self.since <= version and (self.until is None or version < self.until)

    @property
    def span(self) -> str:
        return f"{self.since} to before {self.until}" if self.until else f"{self.since} on"

    def describe(self) -> str:
        return f"{self.key} [{self.span}]: {self.summary} ({self.source})"

    def to_dict(self) -> dict[str, str]:
        return dict(self._as_dict)

    @cached_property
    def _as_dict(self) -> dict[str, str]:  # every fit lists its rules: formatted once
        return {
            "key": self.key,
            "versions": self.span,
            "value": self.value,
            "summary": self.summary,
            "source": self.source,
        }
