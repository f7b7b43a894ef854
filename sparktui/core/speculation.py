"""`--speculative-config`, parsed once: the method vLLM will use, the tokens it drafts, the drafter.

The fit (KV layers, model runner, async scheduling), the speed estimate (tokens per step) and the
drafter loader (modelspec.drafters) all read this one model, so they cannot disagree on the method.
vLLM's own rule (vllm/config/speculative.py: SpeculativeConfig.__post_init__, read in 0.11.2 and
0.32.0): with no "method", a "model" of "ngram" means ngram and any other model a draft model
(the kind then detected from the drafter's name and config); with no "model" either, only the
methods that draft from the target itself or from the prompt (mtp and its aliases, ngram, suffix …)
can run, and vLLM refuses the rest: "num_speculative_tokens was provided but without speculative
model".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparktui.core.record import record
from sparktui.errors import UserError

# MTP drafts from the target's own layers; the older per-model names are aliases vLLM maps to "mtp"
# (MTPModelTypes).
MTP_METHODS = ("mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "nemotron_h_mtp", "ernie_mtp", "glm4_moe_mtp")
SEPARATE_METHODS = ("eagle", "eagle3", "dflash", "draft_model", "medusa", "mlp_speculator")
NO_KV_METHODS = ("ngram", "suffix", "ngram_gpu")
# Methods vLLM runs without a "model" (their drafter is the target itself, or the prompt).
_MODEL_FREE = (*NO_KV_METHODS, "extract_hidden_states", "dspark", "custom_class")
EXAMPLE = '\'{"method": "mtp", "num_speculative_tokens": 2}\''


def is_mtp(method: str) -> bool:
    return method in MTP_METHODS or "mtp" in method


@record
class Speculation:
    """One `--speculative-config`, as vLLM reads it before it loads a drafter."""

    method: str  # lower case; vLLM's inference when the JSON names none
    num_tokens: int  # num_speculative_tokens (1 when absent)
    model: str | None = None  # the drafter's repo id or folder
    method_given: bool = False  # the JSON named the method
    tokens_given: bool = True  # the JSON gave num_speculative_tokens

    @property
    def mtp(self) -> bool:
        return is_mtp(self.method)

    @property
    def refusal(self) -> str | None:
        """Why vLLM refuses this config whatever its version (None: it takes it)."""
        if self.model is not None or not self.tokens_given or self.mtp or self.method in _MODEL_FREE:
            return None
        named = f'"method": "{self.method}"' if self.method_given else 'no "method"'
        return (
            f'--speculative-config has {named} and no draft "model": vLLM refuses it (num_speculative_tokens '
            'was provided but without speculative model); name the method, e.g. "mtp" for a model with MTP '
            'layers or "ngram", or give the draft "model"'
        )

    def to_json(self) -> str:
        data: dict[str, Any] = {"num_speculative_tokens": self.num_tokens}
        if self.method_given:
            data = {"method": self.method, **data}
        if self.model is not None:
            data["model"] = self.model
        return json.dumps(data, separators=(",", ":"))


def parse_speculation(text: str | Mapping[str, Any] | None) -> Speculation | None:
    """The typed form of `--speculative-config` (JSON text or its dict), or UserError naming the flag."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, Mapping):
        data: Any = text
    else:
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise UserError(f"--speculative-config: not JSON: {str(text)[:80]!r}; expected e.g. {EXAMPLE}") from None
    if not isinstance(data, Mapping):
        raise UserError('--speculative-config: expected a JSON object such as {"method": "eagle3", …}')
    raw_n = data.get("num_speculative_tokens")
    tokens_given = raw_n is not None
    raw_n = 1 if raw_n is None else raw_n
    if isinstance(raw_n, bool) or not isinstance(raw_n, int) or not 1 <= raw_n <= 64:
        raise UserError(
            f"--speculative-config: num_speculative_tokens is {raw_n!r}; expected a whole number from 1 to 64"
        )
    given = data.get("method")
    if given is not None and not isinstance(given, str):
        raise UserError(f"--speculative-config: method is {given!r}; expected a name such as mtp, eagle3 or ngram")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise UserError(f"--speculative-config: model is {model!r}; expected a repo id or a folder path")
    method = (given or "").strip().lower()
    if method == "[ngram]":
        method = "ngram"
    if not method:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    return Speculation(
        method=method, num_tokens=raw_n, model=model, method_given=bool(given), tokens_given=tokens_given
    )
