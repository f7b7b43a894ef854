"""The KV cache dtypes and --speculative-config methods each vLLM release accepts, and the KV cache
dtype a checkpoint declares, as vLLM reads them (version-dependent vocabulary, as data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.record import record
from sparktui.core.vllm_version import VllmVersion

V = VllmVersion


# --------------------------------------------------------------------------- KV cache dtypes


@record
class KvCacheDtype:
    """One --kv-cache-dtype value: the first release that accepts it (vllm/config/cache.py CacheDType;
    0.10: vllm/config.py) and how it lays a token out (modelspec/spec.py: KvFormat)."""

    name: str
    since: VllmVersion
    layout: str  # model | 16bit | fp8 | nvfp4 | per_token_head | int4_per_token_head | ds_mla | unsized
    mla_bytes: int = 0  # ds_mla: bytes per token of a sparse-MLA layer (MLAAttentionSpec.real_page_size_bytes)


KV_CACHE_DTYPES: tuple[KvCacheDtype, ...] = (
    KvCacheDtype("auto", V(0, 10, 0), "model"),
    KvCacheDtype("fp8", V(0, 10, 0), "fp8"),
    KvCacheDtype("fp8_e4m3", V(0, 10, 0), "fp8"),
    KvCacheDtype("fp8_e5m2", V(0, 10, 0), "fp8"),
    KvCacheDtype("fp8_inc", V(0, 10, 0), "fp8"),
    KvCacheDtype("bfloat16", V(0, 11, 0), "16bit"),
    KvCacheDtype("fp8_ds_mla", V(0, 11, 1), "ds_mla", 656),
    KvCacheDtype("float16", V(0, 18, 0), "16bit"),
    KvCacheDtype("nvfp4", V(0, 20, 0), "nvfp4"),
    KvCacheDtype("int8_per_token_head", V(0, 20, 0), "per_token_head"),
    KvCacheDtype("fp8_per_token_head", V(0, 20, 0), "per_token_head"),
    KvCacheDtype("turboquant_k8v4", V(0, 20, 0), "unsized"),
    KvCacheDtype("turboquant_4bit_nc", V(0, 20, 0), "unsized"),
    KvCacheDtype("turboquant_k3v4_nc", V(0, 20, 0), "unsized"),
    KvCacheDtype("turboquant_3bit_nc", V(0, 20, 0), "unsized"),
    KvCacheDtype("int4_per_token_head", V(0, 25, 0), "int4_per_token_head"),
    KvCacheDtype("nvfp4_4over6", V(0, 28, 0), "nvfp4"),
    KvCacheDtype("nvfp4_ds_mla", V(0, 30, 0), "ds_mla", 352),
    KvCacheDtype("ultraquant_4bit", V(0, 32, 0), "unsized"),
    KvCacheDtype("octave_k3v4", V(0, 33, 0), "unsized"),
    KvCacheDtype("octave_k3v3", V(0, 33, 0), "unsized"),
    KvCacheDtype("octave_k3v3_compact", V(0, 33, 0), "unsized"),
)
KV_CACHE_DTYPE_SOURCE = (
    "vllm/config/cache.py: CacheDType (0.10: vllm/config.py); vllm/v1/kv_cache_interface.py: "
    "AttentionSpec.page_size_bytes, MLAAttentionSpec.real_page_size_bytes; vllm/utils/torch_utils.py: "
    "nvfp4_kv_cache_full_dim"
)


# --speculative-config "method" values and the first release that accepts each (vllm/config/
# speculative.py: SpeculativeMethod, EagleModelTypes, MTPModelTypes; 0.10: vllm/config.py). Only
# boundaries between two adjacent releases that were both read are listed; a method not listed is
# not checked.
SPECULATIVE_METHODS: dict[str, VllmVersion] = {
    **dict.fromkeys(
        ("ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp"), V(0, 10, 0)
    ),
    **dict.fromkeys(("mtp", "glm4_moe_mtp", "mimo_mtp", "longcat_flash_mtp"), V(0, 11, 0)),
    "suffix": V(0, 11, 1),
    **dict.fromkeys(("qwen3_5_mtp", "nemotron_h_mtp", "extract_hidden_states"), V(0, 17, 0)),
    "ngram_gpu": V(0, 18, 0),
    "dflash": V(0, 20, 0),
    **dict.fromkeys(("gemma4_mtp", "mimo_v2_mtp"), V(0, 21, 0)),
}


# Methods a later release no longer accepts: the first release without each
SPECULATIVE_METHODS_REMOVED: dict[str, VllmVersion] = dict.fromkeys(("medusa", "mlp_speculator"), V(0, 33, 0))


def kv_cache_dtype(name: str) -> KvCacheDtype | None:
    return next((d for d in KV_CACHE_DTYPES if d.name == name), None)


# Models whose vLLM class implements SupportsMambaPrefixCaching (mode 'all' is possible):
# vllm/model_executor/models/{nemotron_h,jamba,mamba,mamba2,zamba2,granitemoehybrid,falcon_h1}.py
MAMBA_PREFIX_CACHING_ARCHITECTURES = frozenset(
    {
        "NemotronHForCausalLM",
        "JambaForCausalLM",
        "MambaForCausalLM",
        "Mamba2ForCausalLM",
        "Zamba2ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "FalconH1ForCausalLM",
    }
)


def quantization_config_read(
    config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """The quantization config vLLM reads and the file it is in: config.json's quantization_config (or
    compression_config, or its text config's), only without one hf_quant_config.json
    (vllm/transformers_utils/config.py: get_config)."""
    q = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(q, Mapping):
        text = config.get("text_config")
        q = text.get("quantization_config") if isinstance(text, Mapping) else None
    if isinstance(q, Mapping):
        return q, "config.json"
    return (hf_quant, "hf_quant_config.json") if isinstance(hf_quant, Mapping) else (None, "")


def checkpoint_kv_quant(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(quantization method, KV cache dtype it declares) as vLLM reads a checkpoint.

    vLLM takes config.json's quantization_config and only without one hf_quant_config.json
    (vllm/transformers_utils/config.py: get_config); a ModelOpt producer makes the method
    'modelopt' (model_arch_config_convertor.py: _normalize_quantization_config). The KV dtype:
    ModelOpt's kv_cache_scheme / kv_cache_quant_algo (torch_utils.py:
    get_kv_cache_quant_algo_string), or compressed-tensors' kv_cache_scheme (Attention.__init__)."""
    q, _ = quantization_config_read(config, hf_quant)
    if q is None:
        return None, None
    method = str(q.get("quant_method") or "").lower().replace("compressed_tensors", "compressed-tensors")
    producer = q.get("producer")
    if not method and isinstance(producer, Mapping) and producer.get("name") == "modelopt":
        method = "modelopt"
    if method.startswith("modelopt"):
        inner = q.get("quantization", q)
        inner = inner if isinstance(inner, Mapping) else q
        algo = (
            inner.get("kv_cache_scheme")
            or q.get("kv_cache_scheme")
            or inner.get("kv_cache_quant_algo")
            or q.get("kv_cache_quant_algo")
        )
        if isinstance(algo, Mapping):
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                return method, "fp8"
            return method, None
        if isinstance(algo, str) and algo.lower() == "fp8":
            return method, "fp8"
        return method, None
    if method == "compressed-tensors" and q.get("kv_cache_scheme") is not None:
        return method, "fp8"
    return method or None, None


@record
class ModelOptAlgo:
    """A ModelOpt checkpoint's quant_algo as vLLM reads it: upper-cased, the file it comes from, and
    whether that copy is nested under "quantization" (hf_quant_config.json's form; ModelOpt >= 0.31
    writes config.json's copy flat, quant_method "modelopt" and quant_algo side by side)."""

    algo: str
    file: str
    nested: bool


def checkpoint_modelopt_algo(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> ModelOptAlgo | None:
    """The ModelOpt quant_algo of a checkpoint as get_config picks its quantization config
    (config.json's quantization_config, only without one hf_quant_config.json); None when the
    checkpoint is not ModelOpt's."""
    q, where = quantization_config_read(config, hf_quant)
    if q is None:
        return None
    producer = q.get("producer")
    modelopt = str(q.get("quant_method") or "").lower().startswith("modelopt") or (
        isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    )
    inner = q.get("quantization")
    nested = isinstance(inner, Mapping)
    algo = inner.get("quant_algo") if isinstance(inner, Mapping) else q.get("quant_algo")
    if not modelopt or not algo:
        return None
    return ModelOptAlgo(str(algo).upper(), where, nested)
