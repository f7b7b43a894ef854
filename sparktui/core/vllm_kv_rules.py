"""The rows of core/vllm_rules.py's table about how vLLM plans the KV cache: how it counts the KV
tokens it logs, what a sliding-window layer reserves, a hybrid model's Mamba pages and prefix-caching
default (KV_CACHE_RULES), and how it checks one request and groups a hybrid model's layers
(KV_CHECK_RULES). vllm_rules.RULES splices them in where they stand in the table."""

from __future__ import annotations

from sparktui.core.version_rule import Rule
from sparktui.core.vllm_version import VllmVersion

V = VllmVersion
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
KV_IFACE = "vllm/v1/kv_cache_interface.py"
HYBRID_CFG = "vllm/model_executor/models/config.py: HybridAttentionMambaModelConfig.verify_and_update_config"

# fmt: off
KV_CACHE_RULES: tuple[Rule, ...] = (
    Rule("kv_tokens_count", V(0, 10, 0), V(0, 20, 1), "blocks_per_group",
         '"GPU KV cache size" = num_blocks // number of KV cache groups × smallest block size',
         f"{KV_UTILS}: _report_kv_cache_config (0.10: get_kv_cache_config)"),
    Rule("kv_tokens_count", V(0, 20, 1), None, "concurrency",
         '"GPU KV cache size" = int(maximum concurrency × max_model_len)',
         f"{KV_UTILS}: _report_kv_cache_config (0.24+: get_kv_cache_capacity)"),
    Rule("sliding_window_in_flight", V(0, 10, 0), V(0, 26, 0), "one_batch",
         "a sliding-window layer reserves window − 1 + max_num_batched_tokens tokens per request",
         f"{KV_IFACE}: SlidingWindowSpec.max_memory_usage_bytes"),
    Rule("sliding_window_in_flight", V(0, 26, 0), None, "concurrent_batches",
         "a sliding-window layer reserves window − 1 + max_in_flight_tokens: max_num_batched_tokens × "
         "max_concurrent_batches (2 with async scheduling, on by default; else the pipeline size)",
         f"{KV_IFACE}: SlidingWindowSpec.max_admission_blocks_per_request; "
         "vllm/config/vllm.py: VllmConfig.max_in_flight_tokens, max_concurrent_batches"),
    Rule("hybrid_prefix_caching_default", V(0, 10, 0), V(0, 26, 0), "off",
         "prefix caching is off by default for hybrid (attention + Mamba / linear attention) models",
         "vllm/config/model.py: ModelConfig.is_prefix_caching_supported (0.10–0.12: "
         f"{HYBRID_CFG.split(': ')[1]} disables it)"),
    Rule("hybrid_prefix_caching_default", V(0, 26, 0), None, "on",
         "prefix caching is on by default for hybrid models",
         "vllm/config/model.py: ModelConfig.is_prefix_caching_supported"),
    Rule("mamba_cache_mode_default", V(0, 10, 0), V(0, 11, 1), "none",
         "prefix caching is turned off for hybrid models: one state page per sequence",
         f"{HYBRID_CFG}; {KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
    Rule("mamba_cache_mode_default", V(0, 11, 1), V(0, 15, 0), "all_if_supported_else_off",
         "with prefix caching: models with Mamba prefix caching support keep a state page per block "
         "(mamba_block_size = block_size); others have prefix caching turned off (one page)",
         f"{HYBRID_CFG}; {KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
    Rule("mamba_cache_mode_default", V(0, 15, 0), V(0, 20, 0), "all_if_supported",
         "with prefix caching: mode 'all' for models with Mamba prefix caching support, else 'align' "
         "(2 state pages per sequence)", HYBRID_CFG),
    Rule("mamba_cache_mode_default", V(0, 20, 0), V(0, 22, 0), "all_if_supported_no_spec",
         "with prefix caching: 'all' for supporting models unless speculative decoding is on, else 'align'",
         HYBRID_CFG),
    Rule("mamba_cache_mode_default", V(0, 22, 0), V(0, 28, 0), "all_if_supported",
         "with prefix caching: 'all' for supporting models, else 'align'", HYBRID_CFG),
    Rule("mamba_cache_mode_default", V(0, 28, 0), None, "align",
         "with prefix caching: mode 'align' (2 state pages per sequence + speculative pages)", HYBRID_CFG),
    Rule("mamba_all_mode_pages", V(0, 11, 1), V(0, 32, 0), "per_block",
         "mode 'all' keeps a state page per block of max_model_len (+ speculative pages)",
         f"{KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
    Rule("mamba_all_mode_pages", V(0, 32, 0), None, "one",
         "mode 'all' keeps one state page per sequence (+ speculative pages)",
         f"{KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
    Rule("mamba_speculative_pages", V(0, 10, 0), V(0, 15, 0), "no",
         "a Mamba layer's pages do not grow with speculative tokens",
         f"{KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
    Rule("mamba_speculative_pages", V(0, 15, 0), None, "yes",
         "a Mamba layer keeps one more state page per speculative token (num_speculative_blocks)",
         f"{KV_IFACE}: MambaSpec.max_memory_usage_bytes"),
)

KV_CHECK_RULES: tuple[Rule, ...] = (
    Rule("null_block_in_length_check", V(0, 10, 0), V(0, 29, 0), "no",
         "one max_model_len request is checked against all of the KV memory",
         f"{KV_UTILS}: check_enough_kv_cache_memory"),
    Rule("null_block_in_length_check", V(0, 29, 0), None, "yes",
         "one max_model_len request is checked against the KV memory less the block pool's null block",
         f"{KV_UTILS}: check_enough_kv_cache_memory"),
    Rule("one_request_check", V(0, 10, 0), V(0, 14, 0), "per_layer",
         "one max_model_len request, and the longest length that fits, are checked on every layer's own KV "
         "spec before the layers are grouped: a hybrid model's padding layers are not counted",
         f"{KV_UTILS}: get_kv_cache_configs → check_enough_kv_cache_memory → estimate_max_model_len "
         "(max_memory_usage_bytes over the raw specs)"),
    Rule("one_request_check", V(0, 14, 0), None, "groups",
         "one max_model_len request, and the longest length that fits, are checked on the KV cache groups "
         "(a hybrid model's padding layers count)",
         f"{KV_UTILS}: get_kv_cache_configs → _check_enough_kv_cache_memory, _estimate_max_model_len_from_groups"),
    Rule("hybrid_group_size", V(0, 10, 0), V(0, 12, 0), "min",
         "a hybrid model's layers go in groups of the smallest kind's layer count",
         f"{KV_UTILS}: _get_kv_cache_groups_uniform_page_size"),
    Rule("hybrid_group_size", V(0, 12, 0), V(0, 18, 0), "1.25",
         "a hybrid model's layers go in groups of the smallest kind's layer count, or of the largest kind's "
         "when that is under 1.25 × the smallest",
         f"{KV_UTILS}: _get_kv_cache_groups_uniform_page_size"),
    Rule("hybrid_group_size", V(0, 18, 0), None, "1.5",
         "a hybrid model's layers go in groups of the smallest kind's layer count, or of the largest kind's "
         "when that is under 1.5 × the smallest",
         f"{KV_UTILS}: _get_kv_cache_groups_uniform_page_size"),
)
# fmt: on
