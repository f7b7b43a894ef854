"""The values vLLM's choice flags take (FLAGS in config.py offers them): its literals at 0.32."""

from __future__ import annotations

# vLLM 0.32 literals (vllm/config/cache.py CacheDType, vllm/config/model.py ModelDType,
# vllm/model_executor/layers/quantization QuantizationMethods — the common ones).
KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
    "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)  # fmt: skip
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MAMBA_DTYPES = ("auto", "float32", "bfloat16", "float16")  # vllm/config/cache.py MambaDType
QUANTIZATIONS = (
    "fp8", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "mxfp4", "gpt_oss_mxfp4", "awq",
    "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "bitsandbytes", "experts_int8",
    "moe_wna16", "fbgemm_fp8", "torchao", "quark", "inc", "mxfp8",
)  # fmt: skip

# vllm/model_executor/model_loader/__init__.py LoadFormats; vllm/v1/attention/backends/registry.py
# AttentionBackendEnum (the CUDA ones; vLLM 0.32)
LOAD_FORMATS = (
    "auto", "safetensors", "pt", "npcache", "dummy", "fastsafetensors", "instanttensor", "runai_streamer",
    "runai_streamer_sharded", "sharded_state", "tensorizer", "mistral", "hf", "ipc_cache", "modelexpress",
)  # fmt: skip
ATTENTION_BACKENDS = (
    "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER_MLA", "TRITON_MLA",
    "CUTLASS_MLA", "FLASHMLA",
)  # fmt: skip
