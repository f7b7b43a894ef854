"""The activation peak of vLLM's profile pass, measured on vLLM's own model code without a GPU
(tests/support/vllm_activation_oracle.py, run in the vLLM venv), beside the fit's figures for the
same model and flags. Used by bench/activation_oracle.py and tests/core/test_fit_vs_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.fit_settings import (
    activation_parts,
    gdn_prefill_per_token,
    moe_transient_bytes,
    moe_transient_chunk,
    moe_workspace_per_token,
    settings_from,
)
from sparktui.core.machine import dgx_spark
from sparktui.core.modelspec import ModelSpec, spec_from_config
from sparktui.core.vllm_rules import rules_for

ORACLE = Path(__file__).with_name("vllm_activation_oracle.py")
MARK = "SPARKTUI-ACTIVATION-ORACLE "


def unquantized(config: dict[str, Any]) -> dict[str, Any]:
    """The config both sides read: the oracle builds unquantized models (the weights' format does not
    change the activations), so the fit is asked about the same model."""
    out = {k: v for k, v in config.items() if k not in ("quantization_config", "compression_config")}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = {k: v for k, v in out["text_config"].items() if k != "quantization_config"}
    return out


# drafters the oracle builds with a target, as vLLM's proposer does: drafter -> (target, method, tokens)
DRAFTERS = {
    "sgl-project__SpecForge-gemma4-26b-a4b-eagle3": ("google__gemma-4-26B-A4B", "eagle3", 3),
    "z-lab__Qwen3.6-35B-A3B-DFlash": ("Qwen__Qwen3.6-35B-A3B", "dflash", 15),
    "z-lab__gemma-4-26B-A4B-it-DFlash": ("google__gemma-4-26B-A4B", "dflash", 15),
}


def ask_activations(
    python: Path,
    models: dict[str, dict[str, Any]],
    tokens: int,
    seqs: int,
    timeout: float = 900,
    targets: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the oracle on {name: config.json} at `tokens` batched tokens and `seqs` sequences; a drafter
    of DRAFTERS whose target's config is in `targets` is built and run with that target."""
    items: list[dict[str, Any]] = []
    for name, config in models.items():
        item: dict[str, Any] = {"name": name, "config": unquantized(config)}
        if name in DRAFTERS and targets and DRAFTERS[name][0] in targets:
            target, method, k = DRAFTERS[name]
            item |= {"target": {"name": target, "config": unquantized(targets[target])}, "method": method}
            item["num_speculative_tokens"] = k
        items.append(item)
    request = {"tokens": tokens, "seqs": seqs, "models": items}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run(
        [str(python), str(ORACLE)], input=json.dumps(request), capture_output=True, text=True,
        timeout=timeout, env=env,
    )  # fmt: skip
    marked = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not marked:
        raise RuntimeError(f"{python}: the activation oracle failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(marked[-1][len(MARK) :])
    return answer


@dataclass(frozen=True)
class FitTerms:
    """The fit's figures for one model at the profile's tokens and sequences (the runner the fit assumes
    at `version`: V1 or V2)."""

    forward: int
    sampler: int
    moe_workspace: int
    gdn: int
    runner: str
    v1_triton: bool = False  # the fit's V1 sampler pass is the Triton top-k / top-p path (else PyTorch's sort)


def fit_terms(name: str, config: dict[str, Any], tokens: int, seqs: int, version: str = "0.32.0") -> FitTerms:
    spec: ModelSpec = spec_from_config(unquantized(config), name=name, source="fixture")
    rules = rules_for(version)
    serve = ServeConfig(model=name, max_num_batched_tokens=tokens, max_num_seqs=seqs, vllm_version=version)
    s = settings_from(serve, spec, dgx_spark(), rules)
    path = rules.value("v1_sampler_top_k_top_p")  # the V1 sampler's top-k / top-p as a GPU runs it there
    chunk = moe_transient_chunk(spec, s)  # before 0.14 an unquantized MoE's caches are the op's own
    forward, sampler = activation_parts(spec, tokens, seqs, 1, s.model_runner, path, dgx_spark().sms, chunk)
    return FitTerms(
        forward,
        sampler,
        tokens * moe_workspace_per_token(spec) if chunk is None else moe_transient_bytes(spec, tokens, chunk),
        tokens * gdn_prefill_per_token(spec),
        s.model_runner,
        path == "triton" or (path == "triton_from_8" and min(tokens, seqs) >= 8),
    )


def fit_drafter(
    target: tuple[str, dict[str, Any]],
    drafter: dict[str, Any],
    method: str,
    k: int,
    tokens: int,
    seqs: int,
    version: str = "0.32.0",
) -> tuple[int, int]:
    """The fit's drafter pass (fit_settings.drafter_pass_bytes) for a drafter served with `target`:
    (the whole pass, the drafter's own working set: the pass less what the runner holds, the target's
    hidden states and the aux ones the drafter reads, and the fused-MoE workspace)."""
    import json

    from sparktui.core.fit_settings import drafter_pass_bytes
    from sparktui.core.modelspec import with_drafter
    from sparktui.core.modelspec.drafters import dflash_as_built

    rules = rules_for(version)
    spec = spec_from_config(unquantized(target[1]), name=target[0], source="fixture")
    draft = spec_from_config(unquantized(drafter), name="drafter", source="fixture")
    spec = with_drafter(spec, draft, method)
    if method == "dflash":
        spec = dflash_as_built(spec, rules)[0]
    speculative = json.dumps({"method": method, "model": "drafter", "num_speculative_tokens": k})
    serve = ServeConfig(
        model=target[0], max_num_batched_tokens=tokens, max_num_seqs=seqs, vllm_version=version,
        speculative_config=speculative,
    )  # fmt: skip
    s = settings_from(serve, spec, dgx_spark(), rules)
    total = drafter_pass_bytes(spec, s)
    held = tokens * (spec.dtype_bytes * spec.hidden_size * (1 + spec.aux_hidden_layers) + moe_workspace_per_token(spec))
    return total, total - held


@dataclass(frozen=True)
class OracleTerms:
    """The oracle's answer for one model: the forward's peak (the larger of its two depths: it does
    not grow with depth), the sampler pass's peak (the forward's hidden states still held), the logits."""

    forward: int
    sampler: int
    logits: int
    moe_workspace: int
    moe_workspace_held: bool  # held by vLLM's WorkspaceManager (0.2x on), or a transient inside the op (older)
    depth_growth: int  # the forward peak's change from the shallower to the deeper build
    layers: tuple[int, int]
    seconds: float
    v1_sampler: int | None  # the V1 runner's sampler pass beyond the forward's hidden states (PyTorch's sort)
    v1_sampler_triton: int | None  # the same on the Triton top-k / top-p path (None: no such path there)


def oracle_terms(answer: dict[str, Any]) -> OracleTerms:
    f1, f2 = answer["forward"]
    return OracleTerms(
        forward=max(f1, f2),
        sampler=max(answer["sampler"]),
        logits=answer["logits"][-1],
        moe_workspace=answer["moe_workspace"][-1],
        moe_workspace_held=answer.get("moe_workspace_held", [True])[-1],
        depth_growth=f2 - f1,
        layers=(answer["layers"][0], answer["layers"][1]),
        seconds=answer["seconds"],
        v1_sampler=answer["v1_sampler"][-1],
        v1_sampler_triton=answer.get("v1_sampler_triton", [None])[-1],
    )
