"""Which checkpoint of a model family to run: every local or catalog variant (bf16, FP8, NVFP4,
AWQ …) fitted at the user's context and number of users, with its predicted speed, the longest
context it allows, and the flags its family needs.

Pure: the caller gives the specs (from the catalog and the local Hugging Face cache) and the
machine; each variant is one `core.fit.fit` plus a binary search for its longest context.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.fit import FitResult, fit
from sparktui.core.machine import Machine
from sparktui.core.model_flags import FlagSuggestion, suggest_flags
from sparktui.core.modelspec import ModelSpec
from sparktui.core.modelspec.drafters import drafter_kind
from sparktui.core.speed import Hardware, SpeedEstimate, estimate, kv_bytes_for

SORTS = ("speed", "context", "users")

# Words that name a checkpoint's format or tuning, not the model: dropped when matching a family.
_VARIANT_WORDS = frozenset(
    [
        "instruct",
        "chat",
        "it",
        "base",
        "hf",
        "nvfp4",
        "fp4",
        "fp8",
        "fp8-dynamic",
        "dynamic",
        "awq",
        "gptq",
        "int4",
        "int8",
        "w4a16",
        "w8a8",
        "mxfp4",
        "bf16",
        "fp16",
        "autoround",
        "thinking",
        "2507",
        "meta",
    ]
)


def family_words(name: str) -> frozenset[str]:
    """The words of a model name that say which model it is: "nvidia/Llama-3.1-70B-Instruct-FP8"
    → {llama, 3.1, 70b}. The organisation and the format words are dropped."""
    base = name.strip().rstrip("/").split("/")[-1].lower()
    words = [w for w in re.split(r"[-_\s]+", base) if w]
    return frozenset(w for w in words if w not in _VARIANT_WORDS)


def in_family(query: str, name: str) -> bool:
    """Whether `name` is a variant of what `query` names (every word of the query is in it)."""
    wanted = family_words(query)
    return bool(wanted) and wanted <= family_words(name)


@dataclass
class Advice:
    model: str
    source: str  # where the spec came from (catalog, Hugging Face cache, folder)
    format: str  # the weights' format: nvfp4, fp8, awq int4, … or the dtype
    weights_bytes: int
    verdict: str  # the fit's verdict at the asked context and users
    fits: bool  # starts, and the KV cache holds `users` requests of `context` tokens
    max_concurrency: float  # requests of `context` tokens the KV cache holds
    longest_context: int  # longest --max-model-len for one request
    longest_context_for_users: int  # longest context at which `users` requests fit at once
    speed: SpeedEstimate | None
    flags: list[FlagSuggestion] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    users: int = 1
    context: int = 0
    # drafter checkpoints for it (speculative decoding): (model, --speculative-config method)
    drafters: list[tuple[str, str]] = field(default_factory=list)

    @property
    def per_user_tok_s(self) -> float | None:
        row = self.speed.for_users(self.users) if self.speed else None
        return row.per_user_tok_s if row else None

    @property
    def aggregate_tok_s(self) -> float | None:
        row = self.speed.for_users(self.users) if self.speed else None
        return row.aggregate_tok_s if row else None

    def apply_argv(self) -> list[str]:
        """`vllm serve` arguments that run this variant at the asked context (flags as suggested)."""
        length = self.context if self.fits else (self.longest_context_for_users or self.longest_context)
        argv = [self.model, "--max-model-len", str(length or self.context)]
        for flag in self.flags:
            if flag.flag != "--max-model-len":
                argv += flag.argv()
        return argv

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "source": self.source,
            "format": self.format,
            "weights_bytes": self.weights_bytes,
            "verdict": self.verdict,
            "fits": self.fits,
            "context": self.context,
            "users": self.users,
            "max_concurrency": round(self.max_concurrency, 2),
            "longest_context": self.longest_context,
            "longest_context_for_users": self.longest_context_for_users,
            "predicted_decode_tok_s_per_user": None if self.per_user_tok_s is None else round(self.per_user_tok_s, 1),
            "predicted_aggregate_tok_s": None if self.aggregate_tok_s is None else round(self.aggregate_tok_s, 1),
            "predicted_ttft_s": round(self.speed.ttft_s, 3) if self.speed else None,
            "flags": [f.to_dict() for f in self.flags],
            "reasons": list(self.reasons),
            "apply": self.apply_argv(),
            "drafters": [{"model": m, "method": method} for m, method in self.drafters],
        }


def _config(spec: ModelSpec, context: int, utilization: float | None) -> ServeConfig:
    values: dict[str, Any] = {"model": spec.name, "max_model_len": context}
    if utilization is not None:
        values["gpu_memory_utilization"] = utilization
    return ServeConfig(**values)


def _holds(result: FitResult, users: int) -> bool:
    return result.verdict in ("fits", "tight") and result.max_concurrency >= users


def _longest_for_users(spec: ModelSpec, machine: Machine, users: int, upper: int, utilization: float | None) -> int:
    """The longest context at which `users` requests fit at once (0: not even one token)."""

    def ok(length: int) -> bool:
        return _holds(fit(_config(spec, length, utilization), spec, machine), users)

    if upper < 1 or not ok(1):
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def advise_one(
    spec: ModelSpec,
    machine: Machine,
    hardware: Hardware | None,
    *,
    context: int,
    users: int,
    utilization: float | None = None,
) -> Advice:
    config = _config(spec, context, utilization)
    result = fit(config, spec, machine)
    upper = max(context, spec.max_len_limit or spec.max_position_embeddings or context)
    longest_users = _longest_for_users(spec, machine, users, upper, utilization)
    speed = None
    if hardware is not None:
        speed = estimate(
            spec, hardware, context=context, prompt_tokens=min(context, 1024), users=(users,),
            kv_bytes=kv_bytes_for(spec, None),
        )  # fmt: skip
    return Advice(
        model=spec.name,
        source=spec.source,
        format=spec.quantization or spec.dtype,
        weights_bytes=spec.weights_bytes,
        verdict=result.verdict,
        fits=_holds(result, users),
        max_concurrency=result.max_concurrency,
        longest_context=result.longest_max_model_len,
        longest_context_for_users=longest_users,
        speed=speed,
        flags=[f for f in suggest_flags(spec, config) if f.flag != "--max-model-len"],
        reasons=list(result.reasons),
        users=users,
        context=context,
    )


def sort_advice(advice: Iterable[Advice], by: str) -> list[Advice]:
    """Variants that fit first, then by what the user asked for (best first)."""

    def score(a: Advice) -> float:
        if by == "context":
            return float(a.longest_context_for_users)
        if by == "users":
            return a.max_concurrency
        return a.per_user_tok_s or 0.0

    return sorted(advice, key=lambda a: (not a.fits, -score(a), a.model))


def is_drafter(spec: ModelSpec) -> bool:
    """A speculative-decoding drafter (DFlash, EAGLE): it serves nothing on its own; vLLM runs it
    only beside its target, through --speculative-config."""
    return drafter_kind(spec) != "draft model"


def advise(
    specs: Iterable[ModelSpec],
    machine: Machine,
    hardware: Hardware | None,
    *,
    context: int,
    users: int,
    sort: str = "speed",
    utilization: float | None = None,
) -> list[Advice]:
    """The runnable checkpoints among `specs`, each with the drafters of its family as options
    (a drafter alone is not a variant to run: served as a model it would answer nonsense)."""
    specs = list(specs)
    drafters = [s for s in specs if is_drafter(s)]
    advice = [
        advise_one(s, machine, hardware, context=context, users=users, utilization=utilization)
        for s in specs
        if not is_drafter(s)
    ]
    for a in advice:
        a.drafters = [(d.name, drafter_kind(d)) for d in drafters if in_family(a.model, d.name)]
    return sort_advice(advice, sort)
