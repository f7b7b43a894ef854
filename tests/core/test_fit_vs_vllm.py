"""sparktui's KV arithmetic against vLLM 0.32's own code (kv_cache_utils.get_kv_cache_configs),
run in the real vLLM's interpreter (a subprocess: sparktui never imports vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sparktui.core.fit import kv_dtype_bytes, plan_kv
from sparktui.core.modelspec import DTYPE_BYTES, MAMBA, load_model_spec
from sparktui.core.vllm_rules import rules_for

pytestmark = pytest.mark.slow  # spawns processes

GiB = 1024**3
ORACLE = Path(__file__).parents[1] / "support" / "vllm_kv_oracle.py"


def vllm_python() -> Path | None:
    exe = os.environ.get("SPARKTUI_TEST_VLLM")
    candidates = [Path(exe).parent / "python"] if exe else []
    candidates.append(Path.home() / ".cache/sparktui-ci/vllm-venv/bin/python")
    return next((p for p in candidates if p.exists()), None)


# (model, kv dtype, max_model_len, max_num_batched_tokens, prefix caching, MTP, KV memory in GiB)
CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "auto", 32000, 2048, True, False, 4.75),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "auto", 131072, 8192, True, False, 28.4),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "bfloat16", 131072, 8192, True, False, 28.4),  # too small
    ("openai/gpt-oss-120b", "auto", 131072, 8192, True, False, 36.6),
    ("openai/gpt-oss-20b", "fp8", 8192, 2048, True, False, 12.94),
    ("google/gemma-4-26B-A4B", "auto", 32768, 8192, True, False, 20.0),
    ("deepseek-ai/DeepSeek-R1", "auto", 32768, 8192, True, False, 10.0),
    ("Qwen/Qwen3.5-35B-A3B", "auto", 262144, 8192, True, False, 31.8),
    ("Qwen/Qwen3.5-35B-A3B", "fp8", 65536, 8192, False, False, 12.0),
    ("Qwen/Qwen3.5-35B-A3B", "auto", 65536, 8192, True, True, 12.0),  # + the MTP draft layer
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "auto", 131072, 8192, True, False, 0.5),  # too small
    ("nvidia/Qwen3.5-122B-A10B-NVFP4", "auto", 32768, 4096, True, False, 16.0),
]


def oracle_case(model, kv, max_len, mnbt, prefix, mtp, kv_gib):
    spec = load_model_spec(model)
    kv_bytes, _ = kv_dtype_bytes(spec, kv)
    plan = plan_kv(spec, kv_bytes, None, 1, mnbt, prefix, 0, mtp, rules_for("0.32.0"))
    layers = []
    for g in (*spec.layers, *(spec.mtp_layers if mtp else ())):
        if g.kind == MAMBA:
            attn = next(a for a in spec.layers if a.kind != MAMBA)
            layers.append(
                {
                    "kind": "mamba",
                    "count": g.count,
                    "mamba_block_size": plan.block_size if prefix else max_len,
                    "shapes": [[g.conv_dim, g.conv_kernel - 1], [g.value_heads, g.head_v, g.head_k]],
                    "dtypes": [spec.dtype_bytes, DTYPE_BYTES.get(g.ssm_dtype or "", spec.dtype_bytes)],
                    "padded": plan.block_size * attn.kv_bytes_per_token(kv_bytes),
                }
            )
        else:
            layers.append(
                {
                    "kind": g.kind,
                    "count": g.count,
                    "heads": g.num_kv_heads,
                    "head_size": g.head_size,
                    "window": g.sliding_window,
                }
            )
    case = {
        "layers": layers,
        "block_size": plan.block_size,
        "kv_bytes": kv_bytes,
        "max_model_len": max_len,
        "max_num_batched_tokens": mnbt,
        "mamba_cache_mode": "align" if prefix else "none",
        "kv_memory": int(kv_gib * GiB),
    }
    return case, plan


@pytest.mark.skipif(
    vllm_python() is None and os.environ.get("CI") != "true", reason="no real vLLM here (.ci/setup-vllm installs one)"
)
def test_kv_blocks_concurrency_and_errors_match_vllm():
    python = vllm_python()
    assert python is not None, "CI needs the real vLLM from .ci/setup-vllm"
    built = [oracle_case(*c) for c in CASES]
    proc = subprocess.run(
        [str(python), str(ORACLE)], input=json.dumps([b[0] for b in built]), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout)
    for (case, plan), answer, row in zip(built, answers, CASES, strict=False):
        memory, max_len = case["kv_memory"], case["max_model_len"]
        assert answer["in_flight"] == plan.in_flight, row
        if "error" in answer:
            assert not plan.fits_one(memory, max_len), (row, answer)
            assert plan.max_len(memory, max_len) == answer["estimated_max_len"], (row, answer)
            continue
        assert plan.fits_one(memory, max_len), (row, answer)
        blocks, tokens, concurrency = plan.capacity(memory, max_len)
        assert (blocks, tokens) == (answer["blocks"], answer["tokens"]), (row, answer)
        assert concurrency == pytest.approx(answer["concurrency"], rel=1e-12), row
        assert plan.num_groups == answer["groups"], row
    assert sum("error" in a for a in answers) == 2
