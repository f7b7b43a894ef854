"""The shared expert's width as vLLM builds it, where a config gives a count of experts rather than a size:
DeepSeek V2/V3 and GLM-4 MoE (n_shared_experts × moe_intermediate_size: deepseek_v2.py DeepseekV2MoE,
glm4_moe.py Glm4MoE), Kimi-Linear (num_shared_experts × moe_intermediate_size: kimi_k3/nvidia/model.py
KimiMoE), Nemotron-H (moe_shared_expert_intermediate_size × n_shared_experts: nemotron_h.py NemotronHMoE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparktui.core.fit_settings import activation_parts
from sparktui.core.modelspec import spec_from_config


def config(fixtures: Path, stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixtures / "model-configs" / f"{stem}.json").read_text())
    return data


def shared(text: dict[str, Any]) -> int:
    return spec_from_config(text, name="m", source="test").shared_expert_intermediate_size


def test_a_count_of_shared_experts_is_that_many_experts_wide(fixtures):
    deepseek = config(fixtures, "deepseek-ai__DeepSeek-V3")
    assert shared(deepseek) == 1 * 2048
    assert shared({**deepseek, "n_shared_experts": 2}) == 2 * 2048
    assert shared({**deepseek, "n_shared_experts": None}) == 0  # vLLM builds none
    assert shared(config(fixtures, "unseen/zai-org__GLM-4.5-Air")) == 1 * 1408
    kimi = config(fixtures, "unseen/moonshotai__Kimi-Linear-48B-A3B-Instruct")
    assert shared(kimi) == 1 * 1024 and shared({**kimi, "num_shared_experts": 0}) == 0
    # a size given whole stays as it is; Nemotron-H's is per shared expert; no shared expert: 0
    assert shared(config(fixtures, "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")) == 3712
    assert shared(config(fixtures, "Qwen__Qwen3-30B-A3B")) == 0


def test_kimi_linear_s_shared_expert_runs_in_its_forward_pass(fixtures):
    """Kimi-Linear's forward keeps the dense MLP of its shared expert (gate_up, 2 × its width); its weights
    were already counted from num_shared_experts. At the real width the KDA layer's o_proj stage is the
    peak (test_kda_activation), so the shared expert shows where its MLP stage is the wider one."""
    kimi = config(fixtures, "unseen/moonshotai__Kimi-Linear-48B-A3B-Instruct")
    tokens = 2048

    def forward(text: dict[str, Any]) -> int:
        return activation_parts(spec_from_config(text, name="k", source="test"), tokens, 256)[0]

    assert forward(kimi) == forward({**kimi, "num_shared_experts": 0})  # below the KDA stage
    wide = {**kimi, "moe_intermediate_size": 16384}
    assert forward(wide) > forward({**wide, "num_shared_experts": 0})
    with_one, without = (
        spec_from_config(c, name="k", source="test") for c in (kimi, {**kimi, "num_shared_experts": 0})
    )
    assert with_one.param_count > without.param_count  # the weights held it before, as vLLM builds it
