"""The guide's published speeds are found by model class, from served names, ids and paths."""

from __future__ import annotations

import pytest

from sparktui.core.published_speeds import published_speed


@pytest.mark.parametrize(
    ("names", "model_class"),
    [
        (("qwen3.5-35b", "Qwen/Qwen3.5-35B-A3B"), "Qwen3.5-35B-A3B (MoE)"),
        (("nvidia/Qwen3.5-122B-A10B-NVFP4",), "Qwen3.5-122B-A10B (MoE)"),
        (("llama-70b", "nvidia/Llama-3.1-70B-Instruct-FP8"), "70B dense"),
        ((None, "/models/Meta-Llama-3.1-70B"), "70B dense"),
    ],
)
def test_a_model_of_a_published_class_finds_its_figure(names, model_class):
    found = published_speed(*names)
    assert found is not None and found.model_class == model_class


def test_other_models_have_no_published_figure():
    assert published_speed("openai/gpt-oss-120b", "/tmp/tiny-llama", None) is None
    assert published_speed("Qwen/Qwen3-30B-A3B") is None  # a different MoE than the guide's 35B-A3B


def test_figures_read_as_published():
    qwen = published_speed("Qwen3.5-35B-A3B")
    assert qwen is not None and qwen.tok_s_text() == "47–50 tok/s" and qwen.ttft_s == 0.12
    dense = published_speed("Llama-3.3-70B-Instruct")
    assert dense is not None and dense.max_users == (5, 10) and dense.tok_s_text() == "15–20 tok/s"
