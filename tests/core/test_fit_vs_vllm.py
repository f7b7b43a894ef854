"""sparktui's fit engine against vLLM's own code, run in a real vLLM's interpreter (a
subprocess: sparktui never imports vLLM). CI has vLLM 0.32.0; bench/vllm_oracle.py asks every
installed release the same questions (tests/support/vllm_oracle.py builds them)."""

from __future__ import annotations

import os
import re

import pytest

from sparktui.core.fit import plan_kv
from sparktui.core.modelspec import load_model_spec
from sparktui.core.vllm_rules import VllmVersion, rules_for
from tests.support import FIXTURES
from tests.support.vllm_oracle import (
    DEVICES,
    GiB,
    Scenario,
    ask,
    checkpoint_folders,
    ci_python,
    cudagraph_disagreements,
    cudagraph_label,
    cudagraph_questions,
    kv_disagreements,
    kv_question,
    model_runner_label,
    model_runner_questions,
    model_spec,
    oracle_pythons,
    quantization_questions,
    scenarios,
    sparktui_kv_dtype,
    sparktui_loads_quantization,
    sparktui_model_runner,
    unseen_models,
    v4_disagreements,
    v4_question,
    widest_of_splits,
)

pytestmark = pytest.mark.slow  # spawns processes

CASES = [
    Scenario("meta-llama/Llama-3.1-8B-Instruct", "auto", 32000, 2048, True, False, 4.75),
    Scenario("nvidia/Llama-3.1-70B-Instruct-FP8", "auto", 131072, 8192, True, False, 28.4),
    Scenario("nvidia/Llama-3.1-70B-Instruct-FP8", "bfloat16", 131072, 8192, True, False, 28.4),  # too small
    Scenario("openai/gpt-oss-120b", "auto", 131072, 8192, True, False, 36.6),
    Scenario("openai/gpt-oss-20b", "fp8", 8192, 2048, True, False, 12.94),
    Scenario("google/gemma-4-26B-A4B", "auto", 32768, 8192, True, False, 20.0),
    Scenario("deepseek-ai/DeepSeek-R1", "auto", 32768, 8192, True, False, 10.0),
    Scenario("Qwen/Qwen3.5-35B-A3B", "auto", 262144, 8192, True, False, 31.8),
    Scenario("Qwen/Qwen3.5-35B-A3B", "fp8", 65536, 8192, False, False, 12.0),
    Scenario("Qwen/Qwen3.5-35B-A3B", "auto", 65536, 8192, True, True, 12.0),  # + the MTP draft layer
    Scenario("Qwen/Qwen3-Next-80B-A3B-Instruct", "auto", 131072, 8192, True, False, 0.5),  # too small
    Scenario("nvidia/Qwen3.5-122B-A10B-NVFP4", "auto", 32768, 4096, True, False, 16.0),
    Scenario("nvidia/Qwen3.6-35B-A3B-NVFP4", "auto", 32768, 2048, None, False, 16.0),  # the version's default
    # a packed KV format: a byte per element plus two fp32 scales per token and head (Triton's layout)
    Scenario("Qwen/Qwen3-32B", "int8_per_token_head", 131072, 8192, True, False, 20.0),
    Scenario("google/gemma-4-26B-A4B", "int4_per_token_head", 131072, 8192, True, False, 20.0),
    # + z-lab's DFlash drafter (4 sliding + 1 full layers): 35 KV groups of one layer
    Scenario("google/gemma-4-26B-A4B", "auto", 262144, 32768, True, True, 65.25, "z-lab/gemma-4-26B-A4B-it-DFlash"),
    # + an EAGLE3 layer of its own geometry (8 × 128): 31 groups of one layer
    Scenario(
        "google/gemma-4-26B-A4B",
        "auto",
        262144,
        2048,
        True,
        True,
        40.0,
        "sgl-project/SpecForge-gemma4-26b-a4b-eagle3",
        "eagle3",
    ),
]
CHECKPOINTS = ("nvidia/Llama-3.1-70B-Instruct-FP8", "nvidia/Qwen3.6-35B-A3B-NVFP4", "deepseek-ai/DeepSeek-R1")


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_kv_sizing_batch_defaults_and_kv_dtype_match_vllm():
    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    rules = rules_for("0.32.0")
    built = [(sc, *kv_question(load_model_spec(sc.model), sc, rules)) for sc in CASES]
    with checkpoint_folders() as folders, quantization_questions(folders) as quant:
        chosen = [(name, folder) for name, folder in folders if name in CHECKPOINTS]
        answer = ask(
            python,
            {
                "kv": [case for _, case, _ in built],
                "batch_defaults": DEVICES,
                "kv_dtype": [{"path": str(folder)} for _, folder in chosen],
                "cudagraphs": cudagraph_questions(),
                "model_runner": model_runner_questions(),
                "quantization": [{"path": str(folder)} for _, folder, _ in quant],
            },
            timeout=600,
        )
    # ModelOpt MIXED_PRECISION (vllm_rules modelopt_mixed_precision): the fixtures and Super's map over a
    # Llama body load, the map only in hf_quant_config.json is refused, as sparktui says
    answers = zip(quant, answer["quantization"], strict=True)
    loads = {label: "no" if "error" in got else "yes" for (label, _, _), got in answers}
    assert loads == {label: sparktui_loads_quantization(spec, rules) for label, _, spec in quant}
    assert sorted(loads.values()) == ["no"] + ["yes"] * (len(quant) - 1)
    assert "Unknown ModelOpt quant algo: MIXED_PRECISION" in answer["quantization"][-1]["error"]
    assert answer["version"].startswith("0.32.0")
    for question, got in zip(cudagraph_questions(), answer["cudagraphs"], strict=True):
        assert cudagraph_disagreements(rules, question, got) == [], cudagraph_label(question)
    assert all(got["piecewise"] is not None for got in answer["cudagraphs"])  # the dispatcher answered
    for question, got in zip(model_runner_questions(), answer["model_runner"], strict=True):
        assert sparktui_model_runner(rules, question) == got["runner"], model_runner_label(question)
    assert {got["runner"] for got in answer["model_runner"]} == {"v1", "v2"}
    for (sc, case, plan), got in zip(built, answer["kv"], strict=True):
        assert kv_disagreements(case, plan, got) == [], sc.label()
    assert sum("error" in a for a in answer["kv"]) == 2
    for device, got in zip(DEVICES, answer["batch_defaults"], strict=True):
        memory = None if device["memory_gib"] is None else int(device["memory_gib"] * GiB)
        assert rules.batch_defaults(memory, str(device["name"])) == (got["max_num_batched_tokens"], got["max_num_seqs"])
    assert answer["batch_defaults"][0] == {"max_num_batched_tokens": 2048, "max_num_seqs": 256}  # GB10
    resolved = {name: got["resolved"] for (name, _), got in zip(chosen, answer["kv_dtype"], strict=True)}
    assert resolved == {name: sparktui_kv_dtype(name, rules) for name, _ in chosen}
    assert resolved["nvidia/Llama-3.1-70B-Instruct-FP8"] == "fp8_e4m3"  # hf_quant_config.json only
    assert resolved["nvidia/Qwen3.6-35B-A3B-NVFP4"] == "auto"  # config.json's quantization_config has no KV scheme


def test_the_question_builder_follows_the_versions_rules():
    """Without vLLM: the same model asks vLLM different questions at different versions."""
    spec = load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")
    sc = Scenario(spec.name, kv_gib=16.0)
    old, _ = kv_question(spec, sc, rules_for("0.25.1"))
    new, _ = kv_question(spec, sc, rules_for("0.26.0"))
    assert (old["mamba_cache_mode"], new["mamba_cache_mode"]) == ("none", "align")  # hybrid prefix caching default
    assert plan_kv.cache_info().currsize > 0


V0_20_2 = VllmVersion(0, 20, 2)


@pytest.mark.skipif(
    V0_20_2 not in oracle_pythons(), reason="no vLLM 0.20.2 venv (bench/vllm_oracle_venvs.py makes one)"
)
def test_aeon_dflash_log_is_its_drafter_in_kv_tensors_of_its_own():
    """AEON's Gemma 4 26B + DFlash start-up (an unreleased vLLM overlay, not modelled; see
    fixtures/vllm-logs/SOURCES.md): vLLM 0.20.2's own grouping gives sparktui's figures, twice the
    log's; the same groups with the drafter's 5 layers in KV tensors shared with no target layer give
    the log's."""
    log = (FIXTURES / "vllm-logs" / "spark_v0.20.1_gemma-4-26b-a4b-nvfp4-dflash_success.log").read_text()
    logged_tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))
    logged_conc = float(re.search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", log).group(1))
    sc = Scenario("google/gemma-4-26B-A4B", "auto", 262144, 32768, True, True, 65.25, "z-lab/gemma-4-26B-A4B-it-DFlash")
    case, plan = kv_question(load_model_spec(sc.model), sc, rules_for(V0_20_2))
    case["unshared_tail"] = 5
    (got,) = ask(oracle_pythons()[V0_20_2], [case], timeout=600)
    assert kv_disagreements(case, plan, got) == []
    assert round(got["concurrency"], 2) == 3.97
    split = got["unshared"]
    assert split["tensors"] == 10  # 5 shared by the target's 6 groups, 5 by the drafter's group
    assert abs(split["tokens"] - logged_tokens) <= 1e-4 * logged_tokens  # "65.25 GiB" is rounded
    assert round(split["concurrency"], 2) == logged_conc == 1.98


LAYER_MODELS = (  # dense, sliding-window + global, hybrid (Gated DeltaNet), MLA, and a config outside
    # the catalog whose sliding and full layers have their own KV heads and a V narrower than K (MiMo-V2),
    # and a NAS-pruned Llama whose layers have their own KV heads or no attention (DeciLM: remote code,
    # built with the oracle's stand-in config class)
    "meta-llama__Meta-Llama-3.1-8B",
    "google__gemma-4-26B-A4B",
    "Qwen__Qwen3-Next-80B-A3B-Instruct",
    "deepseek-ai__DeepSeek-V3",
    "unseen/XiaomiMiMo__MiMo-V2-Flash",
    "unseen/nvidia__Llama-3_3-Nemotron-Super-49B-v1",
)


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_every_layer_reads_as_vllm_builds_it_on_the_meta_device():
    """vLLM 0.32 builds each model on torch's meta device and gives every layer's KV spec
    (tests/support/vllm_layer_oracle.py); sparktui's reading of the config must match it."""
    from tests.support.vllm_layers import ask_layers, fixture_config, ours, theirs

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    for answer in ask_layers(python, list(LAYER_MODELS)):
        assert "error" not in answer, answer
        assert ours(answer["name"], fixture_config(answer["name"])) == theirs(answer["layers"]), answer


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_every_architecture_the_fit_calls_checked_reads_as_vllm_builds_it():
    """modelspec/checked.py LAYERS_CHECKED: one real config of each (the catalog's fixtures, then
    unseen/) is built by vLLM 0.32 on the meta device, and every layer reads as vLLM builds it; a text
    class is checked through its multimodal wrapper (the oracle builds the wrapper's text model); the
    Mamba2-field hybrids (Granite-4.0-H's layer_types 'mamba', Falcon-H1's attention and Mamba2 in every
    layer) and the popular decoders with no checkpoint config at hand, from configs in their own fields at a
    released model's geometry (tests/support/architecture_configs.py)."""
    from sparktui.core.modelspec.checked import LAYERS_CHECKED
    from tests.support.vllm_layer_oracle import TEXT_ARCH
    from tests.support.vllm_layers import ask_layers, fixture_config, ours, theirs

    configs = FIXTURES / "model-configs"
    stems = [p.stem for p in sorted(configs.glob("*.json"))]
    stems += [f"unseen/{p.stem}" for p in sorted((configs / "unseen").glob("*.json"))]
    one_each: dict[str, str] = {}
    for stem in stems:
        if stem.endswith("__hf_quant_config"):
            continue
        config = fixture_config(stem)
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        arch = (config.get("architectures") or text.get("architectures") or [""])[0]
        if arch in LAYERS_CHECKED:
            one_each.setdefault(arch, stem)
    from tests.support.architecture_configs import CONFIGS

    written = {c["architectures"][0] for c in CONFIGS.values()}  # no checkpoint's own config at hand
    archs = set(one_each) | written
    covered = archs | {TEXT_ARCH[a] for a in archs if a in TEXT_ARCH}
    assert covered >= LAYERS_CHECKED, sorted(LAYERS_CHECKED - covered)
    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    configs = {**{stem: fixture_config(stem) for stem in one_each.values()}, **CONFIGS}
    for answer in ask_layers(python, list(configs), configs=configs):
        assert "error" not in answer, answer
        assert ours(answer["name"], configs[answer["name"]]) == theirs(answer["layers"]), answer


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_falcon_h1_mamba_width_without_or_with_a_null_mamba_d_ssm_is_vllms():
    """A Falcon-H1 config that leaves mamba_d_ssm out gets FalconH1Config's 1024; one that sets it null gets
    mamba_expand × hidden_size: vLLM 0.32 builds both on the meta device as the fit reads them."""
    from tests.support.architecture_configs import FALCON_H1
    from tests.support.vllm_layers import ask_layers, ours, theirs

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    configs = {
        "falcon-h1-no-d-ssm": {k: v for k, v in FALCON_H1.items() if k != "mamba_d_ssm"} | {"mamba_n_heads": 16},
        "falcon-h1-null-d-ssm": {**FALCON_H1, "mamba_d_ssm": None, "mamba_n_heads": 32},
    }
    for answer in ask_layers(python, list(configs), configs=configs):
        assert "error" not in answer, answer
        assert ours(answer["name"], configs[answer["name"]]) == theirs(answer["layers"]), answer


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_laguna_weighs_each_layers_own_query_heads_and_gate_as_vllm_builds_them():
    """poolside's Laguna as vLLM 0.32 builds LagunaForCausalLM on the meta device: its parameters count
    each layer's own query heads (num_attention_heads_per_layer: 48 on full layers, 72 on sliding) and
    g_proj (one output per head with per-head gating, one per head channel with per-element); a config
    that leaves the per-layer lists and gating out gets LagunaConfig's (every layer full attention, layer
    0 dense, per-head gating), KV layers included."""
    from sparktui.core.modelspec.build import layer_groups, param_counts, text_config
    from tests.support.architecture_configs import LAGUNA_S_2_1
    from tests.support.vllm_layers import ask_layers, ours, theirs

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    lists = ("layer_types", "mlp_layer_types", "num_attention_heads_per_layer", "mlp_only_layers", "gating")
    configs = {
        "laguna-s-2.1": LAGUNA_S_2_1,
        "laguna-per-element-gate": {**LAGUNA_S_2_1, "gating": "per-element"},
        "laguna-no-lists": {k: v for k, v in LAGUNA_S_2_1.items() if k not in lists},
    }
    for answer in ask_layers(python, list(configs), configs=configs):
        assert "error" not in answer, answer
        config = configs[answer["name"]]
        assert ours(answer["name"], config) == theirs(answer["layers"]), answer
        text = text_config(config)
        counted = sum(param_counts(config, text, layer_groups(text)[0]).values())
        # within 0.05%: vLLM's q/k norms and router bias are not counted (a few hundred thousand of 118B)
        assert abs(counted - answer["params"]) < 0.0005 * answer["params"], (answer["name"], counted, answer["params"])


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_the_unseen_configs_kv_cache_is_planned_as_vllm_plans_it():
    """The real configs outside the catalog (tests/fixtures/model-configs/unseen), under the catalog's flag
    sets (scenarios): vLLM 0.32's get_kv_cache_configs gives the fit's blocks, tokens, concurrency and
    groups, or the fit's longest length where one request does not fit (bench/vllm_oracle.py --unseen asks
    every installed version). Covers a V narrower than K on sliding and full layers of their own heads
    (MiMo-V2), DeepSeek V3.2's uint8 indexer beside its MLA latent, a NAS-pruned Llama and a hybrid too
    big for one request (vLLM's estimate 0)."""
    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    from sparktui.core.modelspec import spec_from_config
    from tests.support.architecture_configs import CONFIGS

    rules = rules_for("0.32.0")
    built = [(sc, *kv_question(model_spec(sc.model), sc, rules)) for sc in scenarios(unseen_models())]
    unseen = len(built)
    for name, config in CONFIGS.items():  # and the configs written in their architectures' own fields
        spec = spec_from_config(config, name=name, source="test")
        for sc in (Scenario(name), Scenario(name, "fp8", 131072, 8192), Scenario(name, max_model_len=65536, kv_gib=0.5),
                   Scenario(name, max_model_len=8192, max_num_batched_tokens=16384)):  # fmt: skip
            built.append((sc, *kv_question(spec, sc, rules)))
    request = {"kv": [case for _, case, _ in built], "batch_defaults": [], "kv_dtype": [], "cudagraphs": []}
    answer = ask(python, {**request, "model_runner": [], "quantization": []}, timeout=600)
    problems = [
        f"{sc.label()}: {d}"
        for (sc, case, plan), got in zip(built, answer["kv"], strict=True)
        for d in kv_disagreements(case, plan, got)
    ]
    assert problems == []
    # each model's 0.5 GiB question is refused, but Nemotron-3-Nano's (6 attention layers hold 65,536 tokens)
    # and Gemma-3-1B's (4 global layers of one KV head, the rest a 512-token window)
    small = [
        (sc, got) for (sc, _, _), got in zip(built[:unseen], answer["kv"][:unseen], strict=True) if sc.kv_gib == 0.5
    ]
    fit = {sc.model for sc, got in small if "error" not in got}
    assert fit == {"unseen/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "unseen/google__gemma-3-1b-it"}
    # and only the others are refused
    assert unseen > 50 and sum("error" in got for got in answer["kv"][:unseen]) == len(small) - len(fit)


ACTIVATION_MODELS = (  # dense GQA, dense with q/k norms, MoE, MoE without its own expert width, and a
    # soft-capped sliding-window MoE with v norms (Gemma 4): seconds each
    "meta-llama__Meta-Llama-3.1-8B",
    "Qwen__Qwen3-32B",
    "Qwen__Qwen3-30B-A3B",
    "mistralai__Mixtral-8x7B-v0.1",
    "google__gemma-4-26B-A4B",
)
MLA_MODEL = "deepseek-ai__DeepSeek-V3"  # MLA with a rope FlashInfer runs in place on a GB10
# hybrids whose forward the fit does not read exactly (fit_settings.activation_parts says why): vLLM
# builds and runs them (a stand-in torchvision for Qwen3.5's vision module, CUDA's branch for
# Nemotron-H's non-gated experts), and their workspace and sampler pass are the fit's
HYBRID_MODELS = ("Qwen__Qwen3.5-35B-A3B", "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_the_profile_pass_peak_is_what_vllms_own_model_code_holds():
    """vLLM 0.32 builds each model on the meta device and runs its profile pass under FakeTensorMode,
    counting live tensor bytes (tests/support/vllm_activation_oracle.py): the fused-MoE workspace the
    fit counts is the one vLLM's model holds, the forward's peak and the V2 runner's sampler pass are
    the fit's to the byte, and the forward's peak does not grow with depth (so a few layers stand for
    the model); DeepSeek-V3's MLA forward is the fit's to the byte too, and the Gated-DeltaNet and
    Mamba2 hybrids run, with the fit's workspace and sampler pass."""
    from tests.support.vllm_activations import ask_activations, fit_terms, oracle_terms
    from tests.support.vllm_layers import fixture_config

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    models = {name: fixture_config(name) for name in (*ACTIVATION_MODELS, MLA_MODEL, *HYBRID_MODELS)}
    answer = ask_activations(python, models, tokens=2048, seqs=256, timeout=300)
    assert [row["name"] for row in answer["models"]] == [*ACTIVATION_MODELS, MLA_MODEL, *HYBRID_MODELS]
    *rows, mla = answer["models"][: -len(HYBRID_MODELS)]
    for row in answer["models"][-len(HYBRID_MODELS) :]:
        assert "error" not in row, row
        oracle, ours = oracle_terms(row), fit_terms(row["name"], models[row["name"]], 2048, 256)
        assert oracle.depth_growth == 0, row
        assert (oracle.moe_workspace, oracle.sampler) == (ours.moe_workspace, ours.sampler), row["name"]
    # MLA: its attention holds q and its output through o_proj; at the shallower build its one MoE layer
    # runs before the workspace exists, so the peak is the deeper build's (oracle_terms takes the larger)
    assert "error" not in mla, mla
    oracle, ours = oracle_terms(mla), fit_terms(MLA_MODEL, models[MLA_MODEL], 2048, 256)
    assert (oracle.forward, oracle.sampler, oracle.moe_workspace) == (ours.forward, ours.sampler, ours.moe_workspace)
    for row in rows:
        assert "error" not in row, row
        oracle, ours = oracle_terms(row), fit_terms(row["name"], models[row["name"]], 2048, 256)
        assert oracle.depth_growth == 0, row  # one layer's tensors at a time, beside the residual stream
        assert oracle.moe_workspace == ours.moe_workspace, row["name"]
        assert oracle.sampler == ours.sampler, row["name"]  # the V2 runner's pass, to the byte
        assert oracle.forward == ours.forward, row["name"]  # the forward's peak, the workspace included
    assert oracle_terms(answer["models"][3]).moe_workspace == 2048 * 172_032  # Mixtral's: held, and counted


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_lagunas_profile_pass_forward_is_the_fits():
    """vLLM 0.32's own Laguna at Laguna-S-2.1's geometry, run by the oracle: the widest layer's 72 query
    heads with q/k norms, and the gated copy of the attention output made before o_proj's (its gate one value
    a head, or one a head channel with per-element gating), beside the held
    fused-MoE workspace: the forward's peak and the sampler pass are the fit's to the byte. The shallower
    build ends on its one MoE layer, lower (oracle_terms takes the deeper, as a uniform Laguna shows)."""
    from tests.support.architecture_configs import LAGUNA_S_2_1
    from tests.support.vllm_activations import ask_activations, fit_terms, oracle_terms

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    models = {"laguna-s-2.1": LAGUNA_S_2_1, "laguna-per-element-gate": {**LAGUNA_S_2_1, "gating": "per-element"}}
    answer = ask_activations(python, models, tokens=2048, seqs=256, timeout=300)
    for row in answer["models"]:
        assert "error" not in row, row
        oracle, ours = oracle_terms(row), fit_terms(row["name"], models[row["name"]], 2048, 256)
        assert (oracle.forward, oracle.sampler, oracle.moe_workspace) == (
            ours.forward,
            ours.sampler,
            ours.moe_workspace,
        )


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_kimi_linears_profile_pass_forward_is_the_fits():
    """vLLM 0.32's own Kimi-Linear (20 KDA + 7 MLA layers, MoE) run by the oracle: its KDA layers skip their
    core without metadata and hold their projections at o_proj beside the held fused-MoE workspace; the
    forward's peak is the fit's to the byte (fit_settings.kda_profile_values_per_token). Before, the oracle
    could not build it and the fit's forward was 198 MiB against vLLM's 285.6 at 2,048 tokens."""
    from tests.support.vllm_activations import ask_activations, fit_terms, oracle_terms
    from tests.support.vllm_layers import fixture_config

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    config = fixture_config("unseen/moonshotai__Kimi-Linear-48B-A3B-Instruct")
    (row,) = ask_activations(python, {"kimi-linear": config}, tokens=2048, seqs=256, timeout=300)["models"]
    assert "error" not in row, row
    oracle, ours = oracle_terms(row), fit_terms("kimi-linear", config, 2048, 256)
    assert (oracle.forward, oracle.moe_workspace) == (ours.forward, ours.moe_workspace)


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_the_drafters_are_built_with_their_target_and_run_their_own_pass():
    """EAGLE-3 and DFlash drafters cannot be built alone (their classes read the speculative config's
    draft model config); built with their target as vLLM's proposer builds them, each runs its dummy
    pass: DFlash projects the context to K/V for its layers first, then runs its forward over the
    query tokens; EAGLE-3 runs one forward. Both passes, at 2048 tokens and 256 sequences, are the fit's
    to the byte."""
    from tests.support.vllm_activations import DRAFTERS, ask_activations, fit_drafter
    from tests.support.vllm_layers import fixture_config

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    models = {name: fixture_config(name) for name in DRAFTERS}
    targets = {target: fixture_config(target) for target, _, _ in DRAFTERS.values()}
    answer = ask_activations(python, models, tokens=2048, seqs=256, timeout=300, targets=targets)
    rows = {row["name"]: row for row in answer["models"]}
    for name, (target, method, k) in DRAFTERS.items():
        row = rows[name]
        assert "error" not in row, row
        assert row["drafter_class"] == ("Eagle3LlamaForCausalLM" if method == "eagle3" else "DFlashQwen3ForCausalLM")
        _, own = fit_drafter((target, targets[target]), models[name], method, k, 2048, 256)
        assert own == row["drafter"], row  # the drafter's own pass: the fit's to the byte
        if method == "dflash":  # the context K/V stage, then the forward over the query tokens
            assert row["context_kv"] < row["drafter"], row
        else:
            assert row["context_kv"] == 0 < row["drafter"], row


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_deepseek_v4_kv_groups_and_tokens_are_vllms_own():
    """DeepSeek-V4-Flash's real config (and a variant with other compress-ratio counts) against
    vLLM 0.32's get_kv_cache_configs fed the specs its V4 layers declare (the oracle's
    deepseek_v4): the same packed groups, blocks, blocks per request and logged tokens."""
    import json
    from dataclasses import replace

    from sparktui.core.modelspec import spec_from_config

    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    config = json.loads((FIXTURES / "model-configs" / "deepseek-ai__DeepSeek-V4-Flash-0731.json").read_text())
    variant = {**config, "num_hidden_layers": 30, "compress_ratios": [0, 4, 4, 128, *[4, 128, 0] * 9, 4, 4, 128, 0]}
    rows = []  # (config, drafter layers, block size, max_model_len, batched tokens, KV GiB)
    rows += [(config, 3, 256, 1_000_000, 2048, 5.93), (config, 0, 256, 65536, 8192, 20.0)]
    rows += [(config, 1, 512, 262144, 2048, 40.0), (variant, 0, 256, 131072, 4096, 12.5)]
    cases, plans = [], []
    for cfg, drafter, block, max_len, batched, gib in rows:
        spec = spec_from_config(cfg, name="v4", source="t")
        spec = replace(spec, mtp_layers=(replace(spec.layers[0], count=drafter),) if drafter else ())
        n = spec.num_layers + drafter
        ratios = [*spec.compress_ratios[:n], *[0] * (n - len(spec.compress_ratios))]
        cases.append(
            {"ratios": ratios, "dims": list(spec.kv_dims), "block_size": block, "max_model_len": max_len}
            | {"max_num_batched_tokens": batched, "kv_memory": int(gib * GiB)}
        )
        plans.append(plan_kv(spec, 1, block, 2, batched, mtp=bool(drafter), rules=rules_for("0.32.0")))
    answer = ask(python, {"deepseek_v4": cases}, timeout=600)
    assert answer["version"].startswith("0.32.0")
    for case, plan, got in zip(cases, plans, answer["deepseek_v4"], strict=True):
        ours = [
            {"layers": g.layers, "page": g.page_bytes, "block": g.block_size}
            | {"blocks_per_request": g.blocks_per_request(case["max_model_len"], plan.in_flight)}
            for g in plan.groups
            for _ in range(g.groups)
        ]
        theirs = [{k: v for k, v in group.items()} for group in got["groups"]]
        # a split bucket's later groups may hold one layer fewer (pattern_repeats[i::n]): compare the widest
        assert sorted(map(str, ours)) == sorted(map(str, widest_of_splits(theirs))), case
        blocks, tokens, concurrency = plan.capacity(case["kv_memory"], case["max_model_len"])
        assert (blocks, tokens) == (got["blocks"], got["tokens"]), case
        assert concurrency == pytest.approx(got["concurrency"], rel=1e-12)
    assert answer["deepseek_v4"][0]["tokens"] == 1_135_072  # the real start-up's 1,135,251 at its rounded 5.93 GiB


@pytest.mark.skipif(
    ci_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_deepseek_v4_catalog_scenarios_agree_with_vllm():
    """bench/vllm_oracle.py's questions about DeepSeek-V4-Flash (default, a long fp8 context, too
    little memory for one request, a big batch, the MTP drafter) asked as V4's layers declare their
    caches: sparktui's plan and vLLM 0.32's answer agree, the refusal and its estimate included."""
    python = ci_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    name = "deepseek-ai/DeepSeek-V4-Flash-0731"
    rules = rules_for("0.32.0")
    built = [v4_question(load_model_spec(name), sc, rules) for sc in scenarios([name])]
    answer = ask(python, {"deepseek_v4": [case for case, _ in built]}, timeout=600)
    assert any("error" in got for got in answer["deepseek_v4"])  # the 0.5 GiB question
    for (case, plan), got in zip(built, answer["deepseek_v4"], strict=True):
        assert v4_disagreements(case, plan, got) == [], case
