"""--mamba-ssm-cache-dtype against Kimi-Linear's KDA layers (vllm_rules kda_ssm_cache_dtype).

Read in vLLM's code and run on 0.32's (a meta-device build of this config, then
Platform._align_hybrid_block_size and the KDA layer's own KV spec, as the executor does at start-up):
- 0.30 on: float16 raises 'KDA recurrent state supports only auto, float32, and bfloat16; got float16'
  (mamba_utils.py kda_state_dtype, from KimiLinearForCausalLM.get_mamba_state_dtype_from_config);
  bfloat16 sizes the pages for a bf16 state (block 1024, page 1,179,648 B) while the layer keeps float32
  (2,170,880 B): MambaSpec.page_size_bytes's assertion fails. Only auto and float32 start.
- before 0.30 (read 0.25.1, 0.28.0, 0.29.0): kda_state_dtype takes no ssm dtype; every value starts.
- at every version the KDA layer's state is float32 (KimiGatedDeltaNetAttention.get_state_dtype)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import MAMBA, spec_from_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model-configs"
KIMI = "moonshotai/Kimi-Linear-48B-A3B-Instruct"
STATE_FP32 = 3 * 32 * 128 * 3 * 2 + 32 * 128 * 128 * 4  # conv q/k/v bf16 + recurrent float32


def _kimi():
    config = json.loads((FIXTURES / "unseen" / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json").read_text())
    return spec_from_config(config, name=KIMI, source="test")


def _fit(spec, version: str, dtype: str):
    config = ServeConfig(model=spec.name, vllm_version=version, max_model_len=32768, mamba_ssm_cache_dtype=dtype)
    return fit(config, spec, dgx_spark())


def _dtype_reasons(result) -> list[str]:
    return [r for r in result.reasons if "--mamba-ssm-cache-dtype" in r]


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0"])
def test_float16_wont_start_with_vllms_reason_and_the_fix(version):
    result = _fit(_kimi(), version, "float16")
    assert result.verdict == "wont_start"
    (reason,) = _dtype_reasons(result)
    assert "KDA recurrent state supports only auto, float32, and bfloat16; got float16" in reason
    assert f"vLLM {version}" in reason and "use --mamba-ssm-cache-dtype auto" in reason
    for fine in ("auto", "float32"):  # the other side: what the fix says starts
        started = _fit(_kimi(), version, fine)
        assert _dtype_reasons(started) == [] and started.verdict != "wont_start"


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0"])
def test_bfloat16_wont_start_the_pages_are_sized_for_a_state_the_layers_do_not_keep(version):
    result = _fit(_kimi(), version, "bfloat16")
    assert result.verdict == "wont_start"
    (reason,) = _dtype_reasons(result)
    assert "page_size_padded >= page_size" in reason and "use --mamba-ssm-cache-dtype auto" in reason


@pytest.mark.parametrize("version", ["0.25.1", "0.29.0"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_before_0_30_any_value_starts_and_the_kv_cache_is_autos(version, dtype):
    spec = _kimi()
    result, auto = _fit(spec, version, dtype), _fit(spec, version, "auto")
    assert _dtype_reasons(result) == []
    assert result.verdict == auto.verdict != "wont_start"
    # the state stays float32: same pages, same tokens
    assert (result.kv_cache_tokens, result.max_concurrency) == (auto.kv_cache_tokens, auto.max_concurrency)


def test_the_kda_state_is_float32_whatever_the_flag_says():
    """Before: bfloat16 halved the recurrent state (1,122,304 B), a state no vLLM keeps for KDA."""
    (kda,) = [g for g in _kimi().layers if g.kind == MAMBA]
    for flag in (None, "auto", "float32", "bfloat16", "float16"):
        assert kda.state_bytes(2, ssm_dtype=flag) == STATE_FP32
    assert "in float32" in kda.describe(2, ssm_dtype="bfloat16")

    # the other side: Qwen3.5's Gated-DeltaNet layers take the flag (gdn/base.py get_state_dtype), and this
    # rule refuses nothing for them
    config = json.loads((FIXTURES / "Qwen__Qwen3.5-35B-A3B.json").read_text())
    qwen = spec_from_config(config, name="Qwen/Qwen3.5-35B-A3B", source="test")
    (gdn,) = [g for g in qwen.layers if g.kind == MAMBA]
    assert gdn.state_bytes(2, ssm_dtype="float32") > gdn.state_bytes(2, ssm_dtype="bfloat16")
    assert _dtype_reasons(_fit(qwen, "0.32.0", "float16")) == []


def test_kimi_linears_block_is_a_multiple_of_128_tokens_from_0_27():
    """vLLM 0.32's own _align_hybrid_block_size on this config (meta-device build, MLA): block 1920 tokens, the
    state page padded to 1920 × 1,152 = 2,211,840 B; the MLA step of 128 tokens arrived in 0.27. Before: 1888
    (steps of 16) at every version."""
    spec = _kimi()
    new, old = _fit(spec, "0.32.0", "auto"), _fit(spec, "0.26.0", "auto")
    assert new.block_size == 128 * 15 == 1920  # ceil(2,170,880 / (128 × 1,152)) = 15
    assert old.block_size == 16 * 118 == 1888
