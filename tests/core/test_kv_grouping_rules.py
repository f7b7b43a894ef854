"""How vLLM groups a hybrid model's layers and checks one request, by version (vllm_rules
hybrid_group_size, one_request_check), on real configs outside the catalog and a layer mix between
the two heuristics. The figures are vLLM's own answers (bench/vllm_oracle.py --unseen, and the
catalog run, at 0.13.0 and 0.19.1)."""

from __future__ import annotations

import json

from sparktui.core.fit import kv_dtype_bytes, plan_kv
from sparktui.core.modelspec import load_model_spec, spec_from_config
from sparktui.core.vllm_rules import rules_for
from tests.support import FIXTURES

GiB = 1024**3


def unseen(stem: str):
    path = FIXTURES / "model-configs" / "unseen" / f"{stem}.json"
    return spec_from_config(json.loads(path.read_text()), name=stem, source=str(path))


def plan(spec, version: str, max_num_batched_tokens: int = 2048):
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    return plan_kv(spec, kv_bytes, None, 1, max_num_batched_tokens, True, 0, False, rules_for(version))


def test_up_to_0_13_one_request_is_checked_on_each_layers_own_spec():
    """Step-3.7-Flash (12 full, 33 sliding layers: groups of 12, so 3 padding sliding layers): vLLM 0.13
    checks one request before grouping (check_enough_kv_cache_memory on the raw specs) and estimates
    3,824 tokens in 0.5 GiB; from 0.14 the check is on the groups, padding included: 3,184 (0.19.1)."""
    spec = unseen("stepfun-ai__Step-3.7-Flash")
    old, new = plan(spec, "0.13.0"), plan(spec, "0.19.1")
    assert old.num_groups == new.num_groups == 4  # the groups themselves are the same
    assert old.max_len(GiB // 2, 65536) == 3824
    assert new.max_len(GiB // 2, 65536) == 3184
    assert plan(spec, "0.14.0").max_len(GiB // 2, 65536) == 3184  # the change is in 0.14
    # with no padding the two checks agree, but block rounding per layer still moves Gemma 4 E4B's
    # estimate (vLLM 0.13: 26,320)
    e4b = load_model_spec("google/gemma-4-E4B-it")
    assert plan(e4b, "0.13.0").max_len(GiB // 2, 65536) == 26320


def test_hybrid_group_size_heuristic_by_version():
    """12 full and 16 sliding layers (16 < 1.5 × 12 but not < 1.25 × 12): vLLM 0.12–0.17 groups them by
    12 (the sliding kind in 2 groups, padded), 0.18 on by 16 (one group each), 0.10–0.11 always by the
    smallest kind (_get_kv_cache_groups_uniform_page_size). Asked of vLLM at 0.13.0 (3 groups, 27,306
    blocks in 20 GiB) and 0.19.1 / 0.21.0 / 0.32.0 (2 groups, 20,480 blocks)."""
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28,
        "vocab_size": 32000, "intermediate_size": 14336, "sliding_window": 1024, "torch_dtype": "bfloat16",
        "layer_types": ["full_attention"] * 12 + ["sliding_attention"] * 16,
    }  # fmt: skip
    spec = spec_from_config(config, name="mix", source="test")
    assert plan(spec, "0.11.2").num_groups == 3
    assert plan(spec, "0.13.0").num_groups == 3
    assert plan(spec, "0.17.0").num_groups == 3
    assert plan(spec, "0.18.0").num_groups == 2
    assert plan(spec, "0.32.0").num_groups == 2
    assert plan(spec, "0.13.0").capacity(20 * GiB, 32768)[0] == 27306
    assert plan(spec, "0.19.1").capacity(20 * GiB, 32768)[0] == 20480
    # 12 full and 14 sliding (under 1.25 × 12): 0.12 on take the largest count, 0.11 still the smallest
    config["layer_types"] = ["full_attention"] * 12 + ["sliding_attention"] * 14
    config["num_hidden_layers"] = 26
    spec = spec_from_config(config, name="mix", source="test")
    assert plan(spec, "0.11.2").num_groups == 3
    assert plan(spec, "0.12.0").num_groups == 2
