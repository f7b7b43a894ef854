"""The `vllm serve` flags a model's family needs, proposed, never applied silently.

A chosen model gets suggestions the user accepts one by one (sparktui fit, sparktui advise):
  - the reasoning parser of a thinking model, so reasoning arrives in its own field;
  - the tool-call parser (with --enable-auto-tool-choice) of its tool-calling format;
  - --trust-remote-code when config.json maps classes to the repo's own code (auto_map) and the
    vLLM that will run knows its model_type from neither its own registry nor transformers';
  - --max-model-len at the model's own limit when the configuration asks for more or leaves vLLM
    to take the config's full length;
  - --kv-cache-dtype fp8 when the checkpoint carries calibrated FP8 KV scales and the vLLM that
    will run does not already use them for "auto".
Parser names are vLLM's (docs.vllm.ai "Reasoning Outputs" and "Tool Calling", 0.10–0.32); a
version may rename them, so each says where it comes from. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.modelspec import ModelSpec
from sparktui.core.record import record
from sparktui.core.vllm_native_configs import needs_remote_code
from sparktui.core.vllm_rules import rules_for


@record
class FlagSuggestion:
    """A `vllm serve` flag this model wants (a parser, a switch), and why."""

    flag: str  # as `vllm serve` spells it
    value: str | None  # None for a switch
    why: str
    field: str | None = None  # the ServeConfig field it sets; None: it goes into extra_args

    def argv(self) -> list[str]:
        return [self.flag] if self.value is None else [self.flag, self.value]

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "why": self.why, "argv": self.argv()}

    def changes(self, config: ServeConfig) -> dict[str, Any]:
        """The ServeConfig fields this flag changes: its own field, or extra_args with it appended."""
        if self.field is not None:
            value: Any = True if self.value is None else self.value
            return {self.field: int(value) if self.field == "max_model_len" else value}
        extra = list(config.extra_args)
        if self.flag in _flag_names(extra):
            return {}
        return {"extra_args": [*extra, *self.argv()]}

    def apply(self, config: ServeConfig) -> ServeConfig:
        """The ServeConfig with this flag set (a field, or appended to extra_args)."""
        changes = self.changes(config)
        return config.replace(**changes) if changes else config


def _flag_names(extra: list[str]) -> set[str]:
    return {tok.split("=", 1)[0] for tok in extra if tok.startswith("--")}


@record
class _Family:
    """A model family's reasoning and tool-call parsers, and the names it is known by."""

    pattern: re.Pattern[str]  # matched against model_type, architecture and the model's name
    reasoning: str | None
    tools: str | None
    thinking_only_when: re.Pattern[str] | None = None  # reasoning parser only for names like this
    source: str = ""


def _re(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# Most specific first. Qwen3.5/3.6 and Qwen3-Coder write tool calls as XML (qwen3_coder); Qwen3 and
# Qwen2.5 as Hermes JSON. Qwen3-Next and Qwen3-2507 "Instruct" models do not think.
_FAMILIES = (
    _Family(_re(r"qwen3_5|qwen3\.5|qwen3\.6|qwen3-coder"), "qwen3", "qwen3_coder", None, "Qwen3.5 model card"),
    _Family(_re(r"qwen3_next|qwen3-next"), "qwen3", "hermes", _re(r"thinking"), "Qwen3-Next model cards"),
    _Family(_re(r"qwen3"), "qwen3", "hermes", _re(r"^(?!.*instruct-2507)"), "vLLM: Qwen3 series → qwen3"),
    _Family(_re(r"qwq"), "deepseek_r1", "hermes", None, "vLLM: QwQ-32B → deepseek_r1"),
    _Family(_re(r"qwen2"), None, "hermes", None, "Qwen2.5 docs: hermes tool calls"),
    _Family(_re(r"gpt_oss|gpt-oss"), "openai_gptoss", "openai", None, "vLLM gpt-oss recipe"),
    _Family(_re(r"deepseek.*r1"), "deepseek_r1", None, None, "vLLM: DeepSeek R1 series → deepseek_r1"),
    _Family(_re(r"deepseek_v3|deepseek-v3"), None, "deepseek_v3", None, "vLLM tool calling: deepseek_v3"),
    _Family(_re(r"gemma4|gemma-4"), "gemma4", None, None, "vLLM: Gemma 4 series → gemma4"),
    _Family(_re(r"llama|mllama"), None, "llama3_json", _re(r"3\.[123]"), "vLLM tool calling: Llama 3.1+"),
    _Family(_re(r"mistral|mixtral"), None, "mistral", None, "vLLM tool calling: mistral"),
)


def _family(spec: ModelSpec) -> _Family | None:
    text = " ".join((spec.model_type, spec.architecture, spec.name))
    return next((f for f in _FAMILIES if f.pattern.search(text)), None)


def suggest_flags(spec: ModelSpec, config: ServeConfig | None = None) -> list[FlagSuggestion]:
    """Flags `spec`'s family needs that `config` (a ServeConfig, or None) does not already pass."""
    extra = list(config.extra_args) if config is not None else []
    have = _flag_names(extra)
    out: list[FlagSuggestion] = []
    family = _family(spec)
    if family is not None:
        applies = family.thinking_only_when is None or family.thinking_only_when.search(spec.name)
        if family.reasoning and applies and "--reasoning-parser" not in have:
            out.append(
                FlagSuggestion(
                    "--reasoning-parser",
                    family.reasoning,
                    f"a thinking model: its reasoning goes to the `reasoning` field, not the answer ({family.source})",
                )
            )
        # Llama's tool format is 3.1 onwards; its thinking_only_when pattern doubles as that test
        tools_apply = family.tools and (family.tools != "llama3_json" or applies)
        if tools_apply and "--tool-call-parser" not in have:
            out.append(
                FlagSuggestion(
                    "--tool-call-parser", family.tools, f"its tool-call format ({family.source}); needs the next flag"
                )
            )
            if "--enable-auto-tool-choice" not in have:
                out.append(FlagSuggestion("--enable-auto-tool-choice", None, "lets the model decide to call tools"))
    version = config.vllm_version if config is not None else None
    rules = rules_for(version) if version else rules_for(None)
    # auto_map alone is not enough: vLLM reads many such configs with its own or transformers' classes
    remote = spec.remote_code and needs_remote_code(spec.config_model_type, rules.version)
    if remote and not (config is not None and config.trust_remote_code):
        out.append(
            FlagSuggestion(
                "--trust-remote-code",
                None,
                f"config.json names classes in the repo's own code (auto_map) and vLLM {rules.version} does not "
                f"know its model_type {spec.config_model_type!r}: it refuses to load it without this flag. "
                "It runs that code as you: read it first",
                field="trust_remote_code",
            )
        )
    limit = spec.max_len_limit or spec.max_position_embeddings
    asked = config.max_model_len if config is not None else None
    if limit and (asked is None or asked > limit):
        where = f" ({spec.max_len_key})" if spec.max_len_key else ""
        why = (
            f"the model's own limit{where}; vLLM refuses a longer --max-model-len"
            if asked
            else f"vLLM takes the config's full length{where} when unset; saying it makes the KV plan explicit"
        )
        out.append(FlagSuggestion("--max-model-len", str(limit), why, field="max_model_len"))
    kv = (config.kv_cache_dtype if config is not None else "auto").lower()
    # From vLLM 0.14 (ModelOpt) and 0.15 (compressed-tensors) "auto" already takes the checkpoint's
    # fp8 KV cache (vllm_rules kv_dtype_auto_*): the flag would change nothing there.
    already = rules.kv_dtype_from_checkpoint(spec.checkpoint_quant_method, spec.checkpoint_kv_cache_dtype, "auto")
    if spec.checkpoint_kv_cache_dtype == "fp8" and kv == "auto" and not already:
        out.append(
            FlagSuggestion(
                "--kv-cache-dtype",
                "fp8",
                "the checkpoint carries calibrated FP8 KV-cache scales: fp8 uses them and halves the KV cache",
                field="kv_cache_dtype",
            )
        )
    return out
