"""Which modules of a checkpoint load quantized, in which format, and which load unquantized at the
checkpoint's own dtype: read from its quantization config the way vLLM decides it.

    formats = weight_formats(config, hf_quant)
    formats.format_of("backbone.layers.4.mixer.in_proj")   # "NVFP4", "FP8", … or None (unquantized)
    formats.is_excluded("lm_head")                          # named by the config's exclusion list
    formats.unquantized_dtype                               # what excluded modules load at
    formats.bytes_per_param("model.layers.0.mlp.down_proj") # bytes per weight, scales included

Module names are the checkpoint's own (config.json's), as the exclusion lists write them.
The rules, per quantization method, from vLLM 0.32's source:
- ModelOpt (hf_quant_config.json `exclude_modules`, or config.json `quantization_config.ignore`):
  `model_executor/layers/quantization/modelopt.py` ModelOptQuantConfigBase.from_config reads the
  list and is_layer_excluded matches a module exactly, as a substring, or as an fnmatch wildcard;
  get_quant_method also leaves vision_tower / vision_model / vit_large_projector unquantized.
- ModelOpt MIXED_PRECISION (`quantized_layers`): ModelOptMixedPrecisionConfig._resolve_quant_algo
  looks a module up directly, then by its children (an experts block by `experts.N.…`); a module the
  map does not name loads unquantized (get_quant_method: UnquantizedLinearMethod).
- compressed-tensors (`ignore`, `config_groups`): `compressed_tensors/compressed_tensors.py`
  CompressedTensorsConfig.get_scheme_dict → should_ignore_layer, which matches exactly or, after
  `re:`, as a regex (`utils/config_utils.py` is_equal_or_regex_match); a group's `targets` match
  the same way, "Linear" matching every linear layer.
- FP8 (`ignored_layers` / `modules_to_not_convert`): `fp8.py` Fp8Config, exact match.
- AWQ / GPTQ (`modules_to_not_convert`): `auto_awq.py` is_layer_skipped(match_mode="substring").
- MXFP4 (gpt-oss): only the experts are MXFP4 (`mxfp4.py` Mxfp4Config.get_quant_method).
- DeepSeek V4's FP8 blocks: its experts are MXFP4 when config.json's expert_dtype is fp4, the default
  (`models/deepseek_v4/quant_config.py` DeepseekV4FP8Config).
Embeddings are never quantized by these methods (VocabParallelEmbedding is no LinearBase); the
lm_head (ParallelLMHead) is quantized only by ModelOpt, whose get_quant_method takes it with LinearBase.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace
from fnmatch import translate
from functools import cached_property
from typing import Any

from sparktui.core.modelspec.spec import DTYPE_BYTES
from sparktui.core.record import record


def int_bytes(bits: int, group: int | None) -> float:
    # packed ints + an fp16 scale and a packed zero point per group (AWQ / GPTQ)
    return bits / 8 + ((2 + bits / 8) / group if group and group > 0 else 0)


# bytes per parameter of a quantized weight, scales included
ALGO_BYTES: dict[str, float] = {
    "FP8": 1.0,
    "FP8_PB_WO": 1.0,
    "FP8_BLOCK": 1.0,
    "FP8_PER_CHANNEL_PER_TOKEN": 1.0,
    "MXFP8": 1.0 + 1 / 32,  # e4m3 + an e8m0 scale per 32
    "NVFP4": 0.5 + 1 / 16,  # 4-bit + an fp8 scale per 16
    "W4A16_NVFP4": 0.5 + 1 / 16,
    "W4A8_NVFP4_FP8": 0.5 + 1 / 16,
    "MXFP4": 0.5 + 1 / 32,  # 4-bit + an e8m0 scale per 32
    "W4A8_AWQ": int_bytes(4, 128),
    "W4A16_AWQ": int_bytes(4, 128),
    "INT8": 1.0,
    "W8A8": 1.0,
}
_VISION = ("vision_tower", "vision_model", "vit_large_projector")


@record
class WeightFormats:
    """What a checkpoint's quantization config says about each module (see the module doc)."""

    method: str | None  # vLLM's name: modelopt, modelopt_mixed, compressed-tensors, fp8, awq, gptq, mxfp4
    algo: str | None  # the format a quantized module loads in (None: per module, or no quantization)
    unquantized_dtype: str  # the checkpoint's dtype, which excluded modules load at
    excluded: tuple[str, ...] = ()  # the exclusion list as the config writes it
    per_module: Mapping[str, str] = field(default_factory=dict)  # MIXED_PRECISION: module → format
    match: str = "exact"  # how `excluded` matches: modelopt | regex | exact | substring
    algo_bytes: float = 0.0  # bytes per weight of `algo` when ALGO_BYTES does not hold it (int, nf4)
    source: str = ""  # which file and key it was read from
    targets: tuple[tuple[str, str], ...] = ()  # compressed-tensors groups that name modules: (target, format)
    expert_algo: str | None = None  # the routed experts' own format when it differs (DeepSeek V4: MXFP4)

    @property
    def quantized(self) -> bool:
        return self.method is not None and (self.algo is not None or bool(self.per_module))

    @cached_property
    def _patterns(self) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
        """The ModelOpt list as two compiled alternations, its names as substrings and its fnmatch
        wildcards (a spec weighs hundreds of modules against lists of a hundred and more)."""
        if self.match != "modelopt" or not self.excluded:
            return None
        names = re.compile("|".join(re.escape(p) for p in self.excluded))
        globs = [_glob(p) for p in self.excluded if any(c in p for c in "*?[")]
        return names, re.compile("|".join(globs) if globs else "(?!)")

    def is_excluded(self, module: str) -> bool:
        """The module is named by the config's exclusion list (so it loads unquantized)."""
        for name in _candidates(module):
            if self.match == "modelopt":
                # exactly, as a substring (which covers exact) or as an fnmatch wildcard
                if self._patterns and (self._patterns[0].search(name) or self._patterns[1].match(name)):
                    return True
            elif self.match == "regex":
                if any(name == p or (p.startswith("re:") and re.match(p[3:], name)) for p in self.excluded):
                    return True
            elif self.match == "substring":
                if any(p in name for p in self.excluded):
                    return True
            elif name in self.excluded:
                return True
        return False

    def format_of(self, module: str) -> str | None:
        """The format the module's weight loads in, or None when it loads unquantized."""
        if not self.quantized or self.is_excluded(module):
            return None
        if self.method == "mxfp4":
            return self.algo if ".experts" in module else None
        if self.expert_algo and ".experts" in module:
            return self.expert_algo
        if _is_lm_head(module) and not str(self.method).startswith("modelopt"):
            return None  # only ModelOpt quantizes a ParallelLMHead; the others quantize LinearBase only
        if self.method == "modelopt" and any(v in module for v in _VISION):
            return None
        if self.per_module:
            return _lookup(self.per_module, module)
        if self.targets:  # compressed-tensors: the first group whose target matches
            for target, fmt in self.targets:
                if target in ("Linear", module) or (target.startswith("re:") and re.match(target[3:], module)):
                    return fmt
            return None
        return self.algo

    def bytes_per_param(self, module: str) -> float:
        """Bytes per weight of the module as vLLM loads it, scales included."""
        fmt = self.format_of(module)
        if fmt is None:
            return float(DTYPE_BYTES.get(self.unquantized_dtype, 2))
        if fmt == self.algo and self.algo_bytes:
            return self.algo_bytes
        return ALGO_BYTES.get(fmt, self.algo_bytes or 1.0)


def _glob(pattern: str) -> str:
    """fnmatch's regex for a pattern (translate is slow; ModelOpt's lists use only `*`)."""
    if any(c in pattern for c in "?["):
        return f"(?:{translate(pattern)})"
    return "(?s:" + ".*".join(re.escape(part) for part in pattern.split("*")) + r")\Z"


def _is_lm_head(module: str) -> bool:
    return module == "lm_head" or module.endswith(".lm_head")


def _candidates(module: str) -> tuple[str, ...]:
    # vLLM also tries a module without the multimodal wrapper's prefix (is_layer_excluded)
    for wrapper in ("language_model.", "model.language_model."):
        if module.startswith(wrapper):
            return module, module.removeprefix(wrapper)
    return (module,)


def _lookup(per_module: Mapping[str, str], module: str) -> str | None:
    if module in per_module:
        return per_module[module]
    prefix = module + "."
    for key, fmt in per_module.items():  # an experts block: its per-expert entries
        if key.startswith(prefix):
            return fmt
    return None


def quantization_config(
    config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """(the quantization config vLLM reads, where from): config.json's quantization_config wins,
    hf_quant_config.json only without one (vllm/transformers_utils/config.py get_config)."""
    for where, holder in (("config.json", config), ("config.json text_config", config.get("text_config"))):
        if isinstance(holder, Mapping):
            for key in ("quantization_config", "compression_config"):
                q = holder.get(key)
                if isinstance(q, Mapping) and q:
                    return q, f"{where} {key}"
    if isinstance(hf_quant, Mapping) and hf_quant:
        return hf_quant, "hf_quant_config.json"
    return None, ""


def _dtype(config: Mapping[str, Any]) -> str:
    sub = config.get("text_config")
    text: Mapping[str, Any] = sub if isinstance(sub, Mapping) else {}
    raw = str(
        text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    ).replace("torch.", "")
    return "bfloat16" if raw in ("float32", "float") else raw  # vLLM's "auto" serves fp32 in bf16


def _str_list(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


def weight_formats(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None = None) -> WeightFormats:
    """Read a checkpoint's per-module weight formats from its config.json (and hf_quant_config.json)."""
    dtype = _dtype(config)
    q, source = quantization_config(config, hf_quant)
    if q is None:
        return WeightFormats(None, None, dtype)
    inner = q.get("quantization") if isinstance(q.get("quantization"), Mapping) else None
    method = str(q.get("quant_method") or "").lower().replace("compressed_tensors", "compressed-tensors")
    producer = q.get("producer")
    if inner is not None or (isinstance(producer, Mapping) and producer.get("name") == "modelopt"):
        method = method or "modelopt"
    if method.startswith("modelopt"):
        body = inner if inner is not None else q
        algo = str(body.get("quant_algo") or "").upper() or None
        # the legacy file's key is exclude_modules; config.json's is ignore (ModelOptQuantConfigBase.from_config)
        excluded = _str_list(body.get("exclude_modules") if inner is not None else body.get("ignore"))
        layers = body.get("quantized_layers")
        if algo == "MIXED_PRECISION" and isinstance(layers, Mapping):
            per = {
                str(k): str((v or {}).get("quant_algo") or "").upper()
                for k, v in layers.items()
                if isinstance(v, Mapping)
            }
            return WeightFormats("modelopt_mixed", None, dtype, excluded, per, "modelopt", source=source)
        return WeightFormats("modelopt", algo, dtype, excluded, match="modelopt", source=source)
    if method == "compressed-tensors":
        return _compressed_tensors(q, dtype, source)
    if method == "fp8" or str(q.get("quant_algo") or "").upper().startswith("FP8"):
        excluded = _str_list(q.get("ignored_layers")) or _str_list(q.get("modules_to_not_convert"))
        # DeepSeek V4's FP8 config runs MXFP4 experts unless expert_dtype says fp8
        # (models/deepseek_v4/quant_config.py DeepseekV4FP8Config.expert_dtype, default "fp4")
        v4_fp4 = str(config.get("model_type") or "").startswith("deepseek_v4") and (
            str(config.get("expert_dtype") or "fp4") == "fp4"
        )
        return WeightFormats("fp8", "FP8", dtype, excluded, source=source, expert_algo="MXFP4" if v4_fp4 else None)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        excluded = _str_list(q.get("modules_to_not_convert"))
        name = f"{method.split('_')[0].upper()}_INT{bits}"
        return WeightFormats(
            method.split("_")[0],
            name,
            dtype,
            excluded,
            match="substring",
            algo_bytes=int_bytes(bits, group),
            source=source,
        )
    if method == "mxfp4":
        return WeightFormats("mxfp4", "MXFP4", dtype, source=source)
    if method == "bitsandbytes":
        excluded = _str_list(q.get("llm_int8_skip_modules"))
        return WeightFormats(
            "bitsandbytes", "NF4", dtype, excluded, match="substring", algo_bytes=0.5 + 4 / 64, source=source
        )
    return WeightFormats(method or None, None, dtype, source=source)


def _compressed_tensors(q: Mapping[str, Any], dtype: str, source: str) -> WeightFormats:
    groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, Mapping)]
    per: dict[str, str] = {}
    algo: str | None = None
    algo_bytes = 0.0
    for group in groups:
        weights = group.get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        kind = str(weights.get("type") or "int")
        if bits == 4 and kind == "float":
            fmt, size = "NVFP4", ALGO_BYTES["NVFP4"]
        elif bits >= 8:
            fmt, size = ("FP8" if kind == "float" else "INT8"), 1.0
        else:
            fmt, size = f"W{bits}", int_bytes(bits, weights.get("group_size"))
        for target in _str_list(group.get("targets")):
            per.setdefault(target, fmt)
        if algo is None:
            algo, algo_bytes = fmt, size
    formats = WeightFormats(
        "compressed-tensors",
        algo,
        dtype,
        _str_list(q.get("ignore")),
        match="regex",
        algo_bytes=algo_bytes,
        source=source,
    )
    if any(t != "Linear" for t in per):  # groups that target modules by name
        return replace(formats, targets=tuple(per.items()))
    return formats
