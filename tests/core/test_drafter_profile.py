"""The drafter's own dummy pass inside vLLM's profile (gpu_model_runner.py _dummy_run →
drafter.dummy_run): DFlash from v1/spec_decode/dflash.py and qwen3_dflash.py, MTP / EAGLE from
llm_base_proposer.py."""

from __future__ import annotations

import json
from pathlib import Path

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.fit_settings import activation_parts, drafter_pass_bytes, encoder_term, settings_from
from sparktui.core.modelspec import spec_from_config, with_drafter
from sparktui.core.modelspec.drafters import dflash_as_built
from sparktui.core.vllm_rules import rules_for

AEON = {
    "max_model_len": 262144,
    "gpu_memory_utilization": 0.8,
    "max_num_batched_tokens": 32768,
    "max_num_seqs": 64,
    "enable_prefix_caching": True,
    "vllm_version": "0.20.1",
}
DFLASH = '{"method": "dflash", "model": "z-lab/gemma-4-26B-A4B-it-DFlash", "num_speculative_tokens": 15}'


def _config(fixtures: Path, stem: str) -> dict:
    return json.loads((fixtures / "model-configs" / f"{stem}.json").read_text())


def _gemma_dflash(fixtures: Path):
    target = spec_from_config(_config(fixtures, "google__gemma-4-26B-A4B"), name="gemma", source="t")
    draft = spec_from_config(_config(fixtures, "z-lab__gemma-4-26B-A4B-it-DFlash"), name="dflash", source="t")
    return dflash_as_built(with_drafter(target, draft, "dflash"), rules_for("0.20.1"))[0]


def test_the_dflash_drafter_pass_is_the_profile_peak_of_the_gemma4_dflash_start_up(fixtures):
    """The AEON Gemma-4 DFlash start-up (vLLM 0.20.1, 32,768 batched tokens): while the drafter projects
    the context to K/V for its 5 layers, the target's hidden state and the 6 it reads (2,816 wide) are
    held beside the fused-MoE workspace; that exceeds the target's own forward."""
    spec = _gemma_dflash(fixtures)
    assert spec.aux_hidden_layers == 6
    config = ServeConfig(model="gemma", speculative_config=DFLASH, **AEON)
    s = settings_from(config, spec, dgx_spark())
    n, h = 32768, 2816
    workspace = 8 * (max(704, h) + max(1408, h)) * 2  # TritonExperts, 8 of 128 experts, bf16
    held = n * (2 * h * (1 + 6) + workspace)
    # the context's K/V stage over every batched token: the normed context (h), the fused K/V projection
    # of 5 layers × 8 KV heads × 128 (× 2) and its K/V-major copy (× 2); it exceeds the drafter's forward
    # over min(32,768, 64 × 16) query tokens
    drafter = n * 2 * (h + 4 * 5 * 8 * 128)
    assert drafter > 64 * 16 * 2 * (6 * h + 3 * 5632)
    assert drafter_pass_bytes(spec, s) == held + drafter
    encoder = encoder_term(spec, s)
    assert encoder is not None and encoder.items == 13
    forward, sampler = activation_parts(spec, n, 64, 1, s.model_runner)
    assert held + drafter > max(forward, sampler)
    result = fit(config, spec, dgx_spark())
    assert result.budget["activation_peak"] == held + drafter + encoder.outputs
    assert any("dflash drafter's profile pass" in line for line in result.memory_working)


def test_the_dflash_pass_is_its_context_kv_stage_or_its_forward_over_the_query_tokens(fixtures):
    """DFlash's dummy_run (v1/spec_decode/dflash.py, 0.20 to 0.32) projects every batched token's context
    to K/V, frees it, then runs the drafter over min(tokens, max_num_seqs × (1 + k)) query tokens
    (max_query_tokens). bench/activation_oracle.py on vLLM 0.32's own code, the Qwen3.6 DFlash drafter
    with its target, 2,048 tokens: 125,829,120 B with 256 sequences (the query forward: 6 hidden-size
    tensors and 3 × intermediate), 75,497,472 B with 8 (the context stage: 128 query tokens)."""
    target = spec_from_config(_config(fixtures, "Qwen__Qwen3.6-35B-A3B"), name="q36", source="t")
    draft = spec_from_config(_config(fixtures, "z-lab__Qwen3.6-35B-A3B-DFlash"), name="dflash", source="t")
    spec = dflash_as_built(with_drafter(target, draft, "dflash"), rules_for("0.32.0"))[0]
    assert spec.drafter_widths == (2048, 6144, 32 * 128)
    flash = '{"method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash", "num_speculative_tokens": 15}'

    def own(seqs: int) -> int:
        config = ServeConfig(
            model="q36", speculative_config=flash, max_num_batched_tokens=2048, max_num_seqs=seqs, vllm_version="0.32.0"
        )
        s = settings_from(config, spec, dgx_spark())
        held = 2048 * (2 * 2048 * (1 + spec.aux_hidden_layers) + 8 * (2048 + 2048) * 2)  # + TritonExperts
        return drafter_pass_bytes(spec, s) - held

    assert own(256) == 125_829_120  # 2048 query tokens (min(2048, 256 × 16))
    assert own(8) == 75_497_472  # 128 query tokens: the context stage is the larger
    assert own(128) == own(256)  # 128 × 16 = 2048: every token a query token


def test_an_eagle3_drafter_pass_is_its_own_layer_at_its_attention_stage(fixtures):
    """A separate EAGLE3 drafter (llm_base_proposer.py dummy_run) runs its one decoder layer over the batched
    tokens with its own widths: SpecForge's Gemma-4 EAGLE3 (hidden 2,816, 32 × 128 queries, 8 × 128 K/V,
    MLP 2,112) peaks at its attention stage, 5 h + 2 q + 2 kv values a token. bench/activation_oracle.py on
    vLLM 0.32's own code: 99,614,720 B at 2,048 tokens, 398,458,880 B at 8,192 (the target's widths gave
    92,274,688: 8 × the target's hidden)."""
    target = spec_from_config(_config(fixtures, "google__gemma-4-26B-A4B"), name="gemma", source="t")
    draft = spec_from_config(_config(fixtures, "sgl-project__SpecForge-gemma4-26b-a4b-eagle3"), name="e3", source="t")
    spec = with_drafter(target, draft, "eagle3")
    assert spec.drafter_widths == (2816, 2112, 32 * 128)
    eagle = '{"method": "eagle3", "model": "sgl-project/SpecForge-gemma4-26b-a4b-eagle3", "num_speculative_tokens": 3}'

    def own(tokens: int) -> int:
        config = ServeConfig(
            model="gemma", speculative_config=eagle, max_num_batched_tokens=tokens, max_num_seqs=256,
            vllm_version="0.32.0",
        )  # fmt: skip
        s = settings_from(config, spec, dgx_spark())
        workspace = 8 * (max(704, 2816) + max(1408, 2816)) * 2  # TritonExperts, 8 of 128 experts
        held = tokens * (2 * 2816 * (1 + spec.aux_hidden_layers) + workspace)
        return drafter_pass_bytes(spec, s) - held

    assert own(2048) == 99_614_720 == 2048 * 2 * (5 * 2816 + 2 * 4096 + 2 * 1024)
    assert own(8192) == 398_458_880


def test_no_drafter_pass_without_a_drafter_that_runs_one(fixtures):
    spec = _gemma_dflash(fixtures)
    plain = settings_from(ServeConfig(model="gemma", **AEON), spec, dgx_spark())
    assert drafter_pass_bytes(spec, plain) == 0
    ngram = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
    s = settings_from(ServeConfig(model="gemma", speculative_config=ngram, **AEON), spec, dgx_spark())
    assert drafter_pass_bytes(spec, s) == 0


def test_an_mtp_pass_holds_the_target_hidden_state_beside_one_layer(fixtures):
    """Qwen3.6-27B's MTP layer at 8,192 tokens before 0.25 (the eager gated-attention path): the hidden
    state held (5,120 wide) and one decoder layer's working set with the embedding ⊕ hidden input,
    8 × hidden + 2 × intermediate (17,408)."""
    spec = spec_from_config(_config(fixtures, "nvidia__Qwen3.6-27B-NVFP4"), name="q", source="t")
    mtp = '{"method": "mtp", "num_speculative_tokens": 3}'
    s = settings_from(
        ServeConfig(
            model="q", speculative_config=mtp, max_num_batched_tokens=8192, max_model_len=65536, vllm_version="0.24.0"
        ),
        spec,
        dgx_spark(),
    )
    assert drafter_pass_bytes(spec, s) == 8192 * 2 * (5120 + 8 * 5120 + 2 * 17408)


def test_a_qwen3_6_mtp_pass_is_its_gated_attention_stage_from_0_25(fixtures):
    """Qwen3.5 / 3.6 MTP (qwen3_5_mtp.py): the normed embedding and the fc output stay held through the
    layer's gated attention, where (from 0.25, on CUDA) one fused kernel makes q, k and the gate beside
    qkv, then attn_output * sigmoid(gate): 3 h + 7 q + 3 kv values a token. bench/activation_oracle.py on
    vLLM 0.32's own code, Qwen3.6-35B-A3B as its own MTP drafter: 148,897,792 B at 2,048 tokens (the older
    estimate, 8 h + 2 × the shared expert, 71,303,168, stays before 0.25: the eager path, not measured)."""
    spec = spec_from_config(_config(fixtures, "Qwen__Qwen3.6-35B-A3B"), name="q36", source="t")
    assert spec.mtp_layers
    mtp = '{"method": "mtp", "num_speculative_tokens": 3}'

    def own(version: str, tokens: int = 2048) -> int:
        config = ServeConfig(
            model="q36", speculative_config=mtp, max_num_batched_tokens=tokens, max_num_seqs=256,
            vllm_version=version,
        )  # fmt: skip
        s = settings_from(config, spec, dgx_spark())
        held = tokens * (2 * 2048 + 8 * (2048 + 2048) * 2)  # the target's hidden state + TritonExperts
        return drafter_pass_bytes(spec, s) - held

    assert own("0.32.0") == 148_897_792 == 2048 * 2 * (3 * 2048 + 7 * 16 * 256 + 3 * 2 * 256)
    assert own("0.32.0", 8192) == 595_591_168
    assert own("0.25.1") == own("0.32.0")
    assert own("0.24.0") == 2048 * 2 * (8 * 2048 + 2 * 512)
