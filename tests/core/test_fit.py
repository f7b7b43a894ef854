"""The fit engine: vLLM's start-up arithmetic, verdicts with their numbers, suggestions."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import (
    VERDICTS,
    activation_bytes,
    fit,
    fit_to_kv_memory,
    kv_dtype_bytes,
    plan_kv,
)
from sparktui.core.machine import DGX_SPARK_CUDA_TOTAL, Machine, dgx_spark, host_machine, machine_from_name
from sparktui.core.modelspec import load_model_spec
from sparktui.core.vllm_rules import rules_for
from sparktui.errors import UserError
from tests.support import FIT_JSON_KEYS, REPO

GiB = 1024**3


def cfg(model: str, **kw) -> ServeConfig:
    return ServeConfig(model=model, **kw)


# --------------------------------------------------------------------------- machines


def test_dgx_spark_figures():
    m = machine_from_name("dgx-spark")
    assert m.unified
    assert m.total == DGX_SPARK_CUDA_TOTAL and abs(m.total / GiB - 119.63) < 0.01  # vLLM logs 119.63 GiB
    assert m.mem_total == m.total  # one box: on GB10 CUDA's total is MemTotal (test_machine_totals)


def test_auto_machine_from_the_real_proc_meminfo():
    text = Path("/proc/meminfo").read_text()
    m = machine_from_name("auto", Machine.from_meminfo(text))
    total = int(text.split("MemTotal:")[1].split()[0]) * 1024
    assert m.mem_total == total and 0 < m.mem_available <= total
    assert m.unified and m.total == m.mem_total


def test_a_reading_is_a_machine_without_a_round_trip_through_meminfo_text():
    m = Machine.from_reading(int(121.7 * GiB), 100 * GiB)
    assert (m.name, m.mem_total, m.mem_available, m.unified) == ("auto", int(121.7 * GiB), 100 * GiB, True)
    assert m.total == int(121.7 * GiB)  # CUDA's total on a GB10 is its MemTotal
    with pytest.raises(UserError, match="no MemTotal"):
        Machine.from_reading(0, None)
    assert Machine.from_meminfo(None) is None


def test_host_machine_is_the_profiles_unless_planned_for_another_size_of_unified_memory():
    small = Machine.from_reading(int(19.8 * GiB), 12 * GiB)
    warnings: list[str] = []
    assert host_machine("dgx-spark", small, warnings) is small  # a Spark profile on a smaller box
    assert "planned for dgx-spark" in warnings[0] and "the fit check uses this host" in warnings[0]
    spark_host = Machine.from_reading(int(121.5 * GiB), 100 * GiB)
    assert host_machine("dgx-spark", spark_host).name == "dgx-spark"
    assert host_machine("80", small).total == 80 * GiB  # a discrete GPU's memory is not the host's


def test_explicit_size_and_bad_machine_names():
    m = machine_from_name("80")
    assert m.total == 80 * GiB and not m.unified
    with pytest.raises(UserError, match="--machine: got 'laptop'; expected dgx-spark, auto, or a size"):
        machine_from_name("laptop")
    with pytest.raises(UserError, match="needs /proc/meminfo"):
        machine_from_name("auto", None)


# --------------------------------------------------------------------------- the arithmetic


def test_budget_adds_up_and_dict_has_the_contract_keys():
    spec = load_model_spec("nvidia/Llama-3.1-70B-Instruct-FP8")
    r = fit(cfg(spec.name, max_model_len=32768, gpu_memory_utilization=0.85), spec, dgx_spark())
    d = r.to_dict()
    assert d.keys() >= FIT_JSON_KEYS
    b = d["budget"]
    assert b["requested"] == math.ceil(0.85 * DGX_SPARK_CUDA_TOTAL)
    assert b["kv_cache"] == b["requested"] - b["weights"] - b["activation_peak"] - b["non_torch"] - b["cuda_graphs"]
    # the V2 model runner (vLLM 0.32) does not profile the sampler's top-k / top-p pass, but here its
    # forward over 2048 tokens (0.48 GiB) outgrows that pass (0.45 GiB), so nothing is taken beyond the
    # request at run time (test_vllm_rules: a Gemma 4 vocabulary where it is)
    assert "sampler_at_run_time" not in b
    assert b["os_left"] == b["mem_total"] - b["requested"] - b["cuda_context"]
    # checkpoint asks for fp8 KV: 80 × 8 × 128 × 1 B × 2
    assert d["kv_bytes_per_token"] == 163840 and d["kv_cache_dtype"].startswith("fp8")
    # vLLM: blocks = KV // (80 layers × 16 tokens × 2048 B); concurrency = blocks / cdiv(len, 16)
    blocks = b["kv_cache"] // (80 * 16 * 2048)
    assert d["max_concurrency"] == round(blocks / (32768 // 16), 4)
    assert d["kv_cache_tokens"] == int(blocks / 2048 * 32768)


def test_concurrency_and_tokens_reproduce_a_real_log():
    """vllm-logs/discrete_v0.11.0_llama-3.1-8b-instruct_L4_success.log: 4.75 GiB → 2434 blocks."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    blocks, tokens, conc = fit_to_kv_memory(spec, cfg(spec.name, max_model_len=32000), 2434 * 16 * 131072)
    assert (blocks, tokens, round(conc, 2)) == (2434, 38944, 1.22)


def test_sliding_window_counts_window_plus_in_flight_tokens():
    spec = load_model_spec("openai/gpt-oss-20b")
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    old = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.13"))
    assert old.bytes_per_block == 12 * 16 * 8 * 64 * 2 * 2  # 2 groups of 12 layers
    # full group: 8192/16 = 512 blocks; sliding: cdiv(127 + 2048, 16) + 1 = 137
    assert old.blocks_per_request(8192) == 512 + 137
    new = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.32"))
    assert new.blocks_per_request(8192) == 512 + (-(-(127 + 2 * 2048) // 16)) + 1  # async: two batches


def test_hybrid_mamba_block_size_and_pages_match_vllm_0_24():
    """vllm-cases c09: Qwen3.6-35B-A3B NVFP4, fp8 KV, 5.98 GiB → 567,978 tokens, 4.33×."""
    spec = load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")
    plan = plan_kv(spec, 1, None, 1, 8192, True, 0, False, rules_for("0.24"))
    assert plan.block_size == 2096  # 16 × cdiv(mamba state 2,146,304 B, 16 × 1024 B)
    assert plan.bytes_per_block == 10 * 2096 * 1024  # 4 groups of 10 layers, pages equal
    assert plan.blocks_per_request(131072) == 63 + 3 * 2  # 3 Mamba groups × 2 pages (align mode)
    blocks, tokens, conc = plan.capacity(int(5.98 * GiB), 131072)
    assert (blocks, tokens, round(conc, 2)) == (299, 567978, 4.33)


def test_fp8_kv_halves_the_bytes_per_token():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    a = fit(cfg(spec.name, max_model_len=8192), spec, dgx_spark())
    b = fit(cfg(spec.name, max_model_len=8192, kv_cache_dtype="fp8"), spec, dgx_spark())
    assert b.kv_bytes_per_token * 2 == a.kv_bytes_per_token
    # twice the tokens per byte; fewer bytes, as the fp8 cache's FlashInfer graphs cost more on a Spark
    assert b.kv_cache_tokens >= 2 * a.kv_cache_tokens * b.kv_cache_bytes / a.kv_cache_bytes - 32
    assert b.kv_cache_bytes == a.kv_cache_bytes - (b.budget["cuda_graphs"] - a.budget["cuda_graphs"])


def test_kv_cache_memory_bytes_is_used_as_given():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    r = fit(cfg(spec.name, max_model_len=512, kv_cache_memory_bytes="64M"), spec, dgx_spark())
    assert r.kv_cache_bytes == 64 * 1024**2
    assert r.kv_cache_tokens == 64 * 1024**2 // 131072 == 512
    b = r.budget  # vLLM takes only what it uses, not utilization × total
    used = b["weights"] + b["activation_peak"] + b["non_torch"] + b["cuda_graphs"] + b["kv_cache"]
    used += b.get("sampler_at_run_time", 0)  # the V2 runner (0.32: Llama) leaves the sampler unprofiled
    assert b["sampler_at_run_time"] > 0
    assert b["os_left"] == b["mem_total"] - used - b["cuda_context"] > b["mem_total"] - b["requested"]


def test_enforce_eager_drops_the_cuda_graph_estimate():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    a = fit(cfg(spec.name), spec, dgx_spark())
    b = fit(cfg(spec.name, enforce_eager=True), spec, dgx_spark())
    assert a.budget["cuda_graphs"] > 0 and b.budget["cuda_graphs"] == 0
    assert b.kv_cache_bytes - a.kv_cache_bytes == a.budget["cuda_graphs"]


def test_activation_peak_grows_with_max_num_batched_tokens():
    spec = load_model_spec("Qwen/Qwen3-32B")
    small = fit(cfg(spec.name, max_num_batched_tokens=2048), spec, dgx_spark()).budget["activation_peak"]
    big = fit(cfg(spec.name, max_num_batched_tokens=16384), spec, dgx_spark()).budget["activation_peak"]
    assert big > small * 2


# --------------------------------------------------------------------------- verdicts


def test_fits():
    spec = load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")
    r = fit(cfg(spec.name, max_model_len=40960, gpu_memory_utilization=0.8), spec, dgx_spark())
    assert r.verdict == "fits" and r.verdict in VERDICTS
    assert any("tokens" in reason for reason in r.reasons)


def test_unsafe_above_0_90_on_unified_memory_but_not_on_a_discrete_gpu():
    spec = load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")
    r = fit(cfg(spec.name, max_model_len=8192, gpu_memory_utilization=0.95), spec, dgx_spark())
    assert r.verdict == "unsafe"
    assert any("0.95 is above 0.90 on unified memory" in reason for reason in r.reasons)
    r = fit(cfg(spec.name, max_model_len=8192, gpu_memory_utilization=0.95), spec, machine_from_name("120"))
    assert r.verdict == "fits"


def test_unsafe_when_the_os_is_left_too_little():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    r = fit(cfg(spec.name, kv_cache_memory_bytes=str(97 * GiB)), spec, dgx_spark())
    assert r.verdict == "unsafe"
    assert any("the OS is left" in reason and "4–6 GB" in reason for reason in r.reasons)


def test_wont_start_when_free_memory_is_below_the_request():
    spec = load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")
    r = fit(cfg(spec.name, gpu_memory_utilization=0.9), spec, dgx_spark(), mem_available=100 * GiB)
    assert r.verdict == "wont_start"
    (reason,) = [x for x in r.reasons if "free memory" in x]
    assert "100.00 GiB" in reason and "107.67 GiB" in reason  # MemAvailable and the request
    assert any(
        "smallest --gpu-memory-utilization" in s.text and "more than is free now" not in s.text for s in r.suggestions
    )


def test_tight_when_free_memory_barely_covers_the_request():
    spec = load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")
    m = dgx_spark()
    request = math.ceil(0.8 * m.total)
    r = fit(
        cfg(spec.name, gpu_memory_utilization=0.8, max_model_len=8192),
        spec,
        m,
        mem_available=request + m.cuda_context + GiB // 2,
    )
    assert r.verdict == "tight"


def test_free_pages_on_the_per_cpu_lists_make_a_short_start_up_tight_not_won_t_start():
    """Right after a server ends, its pages sit on the kernel's per-CPU free lists, which MemAvailable
    (what vLLM's own check reads) leaves out until they drain: short without them, enough with them,
    is tight; short even with them is won't start; the budget shows them."""
    spec = load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")
    m = dgx_spark()
    config = cfg(spec.name, gpu_memory_utilization=0.8, max_model_len=8192)
    request = math.ceil(0.8 * m.total)
    available = request + m.cuda_context - GiB  # 1 GiB short at vLLM's check
    assert fit(config, spec, m, mem_available=available).verdict == "wont_start"
    with_lists = fit(config, spec, m, mem_available=available, free_lists=2 * GiB)
    assert with_lists.verdict == "tight" and with_lists.budget["per_cpu_free"] == 2 * GiB
    (reason,) = [x for x in with_lists.reasons if "free memory at start-up" in x]
    assert "with the 2.00 GiB just freed on the kernel's per-CPU lists it is enough" in reason
    too_few = fit(config, spec, m, mem_available=available, free_lists=GiB // 2)
    assert too_few.verdict == "wont_start"
    assert any("even with the 0.50 GiB just freed" in x and "vLLM refuses to start" in x for x in too_few.reasons)


def test_wont_start_when_one_request_does_not_fit_with_the_longest_that_would():
    """vllm-cases c02: Llama-3.1-8B, 2.89 GiB of KV, max_model_len 29000: vLLM refused."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    kv = int(2.89 * GiB)
    r = fit(cfg(spec.name, max_model_len=29000, kv_cache_memory_bytes=kv), spec, machine_from_name("23.58"))
    assert r.verdict == "wont_start"
    # vLLM's estimate: the longest length whose blocks fit after the null block
    blocks = kv // (32 * 16 * 4096) - 1
    assert r.longest_max_model_len == blocks * 16
    assert any(f"the longest that fits is {blocks * 16:,}" in reason for reason in r.reasons)
    assert any(s.text.startswith("--kv-cache-dtype fp8 fixes it") for s in r.suggestions)


def test_wont_start_without_kv_memory():
    spec = load_model_spec("meta-llama/Llama-3.3-70B-Instruct")  # 131 GiB of bf16 weights
    r = fit(cfg(spec.name, max_model_len=8192), spec, dgx_spark())
    assert r.verdict == "wont_start" and r.kv_cache_tokens == 0
    assert any(reason.startswith("no memory left for the KV cache") for reason in r.reasons)
    (none,) = [s for s in r.suggestions if "no --gpu-memory-utilization fits" in s.text]
    assert none.changes == {}


def test_suggestions_for_a_fitting_config():
    spec = load_model_spec("openai/gpt-oss-120b")
    r = fit(cfg(spec.name, max_model_len=32768, gpu_memory_utilization=0.85), spec, dgx_spark())
    text = "\n".join(s.text for s in r.suggestions)
    assert "--max-model-len could go up to 131,072" in text
    assert f"at most {int(r.max_concurrency)} sequences at the full 32,768-token context" in text
    assert "smallest --gpu-memory-utilization" in text
    assert "--kv-cache-dtype fp8 would give" in text


def test_auto_max_model_len_takes_the_longest_that_fits():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    r = fit(cfg(spec.name, max_model_len=-1, kv_cache_memory_bytes=str(2 * GiB)), spec, dgx_spark())
    assert r.verdict in ("fits", "tight")
    assert r.max_model_len == r.longest_max_model_len < 131072


def test_mtp_speculation_adds_the_draft_layers():
    spec = load_model_spec("Qwen/Qwen3.5-35B-A3B")
    plain = fit(cfg(spec.name, max_model_len=32768), spec, dgx_spark())
    mtp = fit(
        cfg(spec.name, max_model_len=32768, speculative_config='{"method": "mtp", "num_speculative_tokens": 2}'),
        spec,
        dgx_spark(),
    )
    assert mtp.kv_bytes_per_token == plain.kv_bytes_per_token + 2 * 256 * 2 * 2
    assert mtp.weights_bytes > plain.weights_bytes
    assert mtp.max_concurrency < plain.max_concurrency


def test_fit_is_fast_enough_to_time_in_the_bench():
    """Speed is a benchmark (bench/fit_accuracy.py prints µs per call); here only that the
    cached plan is reused between calls with the same flags."""
    spec = load_model_spec("Qwen/Qwen3.5-35B-A3B")
    before = plan_kv.cache_info().hits
    fit(cfg(spec.name), spec, dgx_spark())
    fit(cfg(spec.name), spec, dgx_spark())
    assert plan_kv.cache_info().hits > before


# --------------------------------------------------------------------------- against the real figures


def load_bench():
    path = REPO / "bench" / "fit_accuracy.py"
    module_spec = importlib.util.spec_from_file_location("fit_accuracy", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["fit_accuracy"] = module  # dataclasses look their module up while defining
    module_spec.loader.exec_module(module)
    return module


def test_accuracy_against_every_fixture_case(fixtures):
    bench = load_bench()
    cases = bench.all_cases(fixtures)
    assert len([c for c in cases if c.from_log]) == 21  # every log with a config we can read
    # real DGX Spark start-ups and the Nemotron-H (Mamba2) one: KV tokens and concurrency within 1%
    strict = [bench.evaluate(c) for c in cases if c.id.startswith("spark") or "nemotron" in c.id or "tp2" in c.id]
    assert len(strict) >= 12
    for r in strict:
        assert abs(r.errors["tokens"]) <= 1.0 and abs(r.errors["conc"]) <= 1.0, (r.case.id, r.errors)
    rows = [bench.evaluate(c) for c in cases]
    counted = [r for r in rows if r.case.counted]
    assert len(counted) >= 10
    for r in counted:
        limit = 1.0 if r.case.kind == "dense" else 5.0
        for key in ("tokens", "conc"):
            if key in r.errors:
                assert abs(r.errors[key]) <= limit, (r.case.id, key, r.errors)
        if "weights" in r.errors and not r.case.quantized:
            assert abs(r.errors["weights"]) <= 3.0, (r.case.id, r.errors)
    assert sum("tokens" in r.errors for r in counted) >= 9
    assert sum("weights" in r.errors and not r.case.quantized for r in counted) >= 3


def test_online_fp8_quantization_shrinks_the_linear_layers():
    spec = load_model_spec("Qwen/Qwen3-32B")
    plain = fit(cfg(spec.name, max_model_len=8192), spec, dgx_spark())
    fp8 = fit(cfg(spec.name, max_model_len=8192, quantization="fp8"), spec, dgx_spark())
    linear = sum(n for cat, n in spec.params_by_category if cat in ("attn", "mlp"))
    assert plain.weights_bytes - fp8.weights_bytes == linear  # 2 bytes → 1 byte each
    assert fp8.kv_cache_bytes - plain.kv_cache_bytes == linear
    prequantized = load_model_spec("nvidia/Qwen3-32B-NVFP4")
    same = fit(cfg(prequantized.name, quantization="fp8"), prequantized, dgx_spark())
    assert same.weights_bytes == prequantized.weights_bytes


def test_a_live_reading_applies_only_to_the_machine_it_was_read_on():
    from sparktui.core.machine import machine_from_name, reading_applies

    spark = machine_from_name("dgx-spark")
    assert reading_applies(spark, int(121.7 * 2**30))
    assert reading_applies(spark, 120 * 2**30)  # a slightly different kernel reserve
    assert not reading_applies(spark, 24 * 2**30)  # a laptop planning for a Spark
    assert not reading_applies(machine_from_name("80"), 80 * 2**30)  # host RAM is not a discrete GPU's memory


# --------------------------------------------------------------------------- suggestions, applied

SUGGESTION_CASES = [  # (config, machine, MemAvailable): wont_start, tight and fitting starting points
    (
        cfg("meta-llama/Llama-3.1-8B-Instruct", max_model_len=29000, kv_cache_memory_bytes=int(2.89 * GiB)),
        machine_from_name("23.58"),
        None,
    ),
    (cfg("nvidia/Qwen3-30B-A3B-NVFP4", gpu_memory_utilization=0.9), dgx_spark(), 100 * GiB),
    (cfg("openai/gpt-oss-120b", max_model_len=32768, gpu_memory_utilization=0.85), dgx_spark(), None),
    (cfg("nvidia/Llama-3.1-70B-Instruct-FP8", max_model_len=131072, kv_cache_dtype="bfloat16"), dgx_spark(), None),
]


@pytest.mark.parametrize("config,machine,free", SUGGESTION_CASES)
def test_each_suggestion_applied_does_what_its_text_says(config, machine, free):
    spec = load_model_spec(config.model)
    before = fit(config, spec, machine, free)
    applied = [s for s in before.suggestions if s.changes]
    assert applied, before.suggestions
    for s in before.suggestions:
        if "(above 0.90" in s.text:
            assert s.changes == {}, s.text  # applying it would make the configuration unsafe
        if not s.changes:
            continue
        after = fit(config.replace(**s.changes), spec, machine, free)
        if "max_model_len" in s.changes:
            length = s.changes["max_model_len"]
            assert s.changes == {"max_model_len": before.longest_max_model_len} and f"{length:,}" in s.text
            assert after.verdict in ("fits", "tight"), (s.text, after.reasons)
            assert after.max_model_len == length and after.kv_cache_tokens >= length
            if length < (spec.max_position_embeddings or 0):  # else it is capped by the model's own context
                one_more = fit(config.replace(max_model_len=length + 1), spec, machine, free)
                # past the median's longest: won't start, or tight where the favourable end of vLLM's
                # measured terms would still hold the request
                high = one_more.kv_cache_bytes_high
                high_fits = high > one_more.kv_cache_bytes and high >= one_more.kv_bytes_per_request
                assert one_more.verdict == ("tight" if high_fits else "wont_start"), (s.text, one_more.reasons)
        elif "gpu_memory_utilization" in s.changes:
            util = s.changes["gpu_memory_utilization"]
            assert set(s.changes) == {"gpu_memory_utilization"} and f"request: {util:.2f}" in s.text
            # the KV cache holds the request; the verdict is what the text warns of
            warned = "wont_start" if "more than is free" in s.text else "fits"
            assert after.verdict == warned, (s.text, after.reasons)
            assert after.kv_cache_tokens >= before.max_model_len
            less = fit(config.replace(gpu_memory_utilization=round(util - 0.01, 2)), spec, machine, free)
            assert less.verdict != "fits", s.text  # it is the smallest (with room for vLLM's measurements)
        else:
            assert s.changes == {"kv_cache_dtype": "fp8"} and s.text.startswith("--kv-cache-dtype fp8")
            assert after.kv_cache_dtype.startswith("fp8")
            assert after.kv_cache_tokens > before.kv_cache_tokens
            assert f"{after.kv_cache_tokens:,} tokens" in s.text
            if "fixes it" in s.text:
                assert before.verdict == "wont_start" and after.verdict in ("fits", "tight")


def test_suggestions_in_json_name_the_vllm_flags():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    r = fit(
        cfg(spec.name, max_model_len=29000, kv_cache_memory_bytes=int(2.89 * GiB)), spec, machine_from_name("23.58")
    )
    d = r.to_dict()["suggestions"]
    assert [x["text"] for x in d] == [s.text for s in r.suggestions]
    assert {"text": r.suggestions[0].text, "set": {"--max-model-len": r.longest_max_model_len}} == d[0]
    assert {"--kv-cache-dtype": "fp8"} in [x["set"] for x in d]


def test_machine_auto_is_described_as_this_host_not_as_a_gpu():
    vm = Machine.from_reading(24000000 * 1024, 20000000 * 1024)
    words = vm.describe()
    assert words.startswith("this host (22.9 GiB MemTotal") and "like a DGX Spark" in words, words


# --------------------------------------------------------------------------- the KV memory from the flags


def test_the_verdict_is_honest_on_every_real_start_up(fixtures):
    """A start-up that started is never "won't start" / "unsafe"; one vLLM refused for memory is
    never "fits" (bench/fit_accuracy.py verdict_checks: every fixture start-up whose machine is known)."""
    checks = load_bench().verdict_checks(fixtures)
    assert len(checks) >= 14 and any(not c.started for c in checks)
    assert [c.label for c in checks if not c.honest] == []
    # the RTX 5090 Nemotron-Cascade start-up the old fused-MoE constant called "won't start"
    assert next(c for c in checks if "cascade" in c.label).verdict in ("fits", "tight")


def test_the_laguna_start_ups_are_judged_the_int4_one_vllm_refused_as_wont_start(fixtures):
    """The two Laguna-S-2.1 + DFlash start-ups on a Spark (vLLM 0.25.1), at the model's geometry with the
    checkpoints' sizes: the INT4 one vLLM refused at max_len 262,144 (18.35 GiB for one request, 8.72 GiB
    there) is "won't start", the NVFP4 one that started at 65,536 is not."""
    checks = {c.label: c for c in load_bench().laguna_checks(fixtures)}
    refused, started = checks["v0.25.1 laguna-s-2.1 int4"], checks["v0.25.1 laguna-s-2.1 nvfp4"]
    assert (refused.started, refused.verdict) == (False, "wont_start"), refused
    assert started.started and started.verdict in ("fits", "tight"), started


def test_memory_constants_are_the_ones_the_fixture_logs_give(fixtures):
    """vllm_rules' measured constants are what bench/fit_accuracy.py refits from the Spark logs."""
    fitted, logs = load_bench().fit_memory_constants(fixtures)
    assert {f.key for f in fitted} >= {"uma_non_torch", "cudagraph_first_capture"}
    for f in fitted:
        assert f.agrees, (f.key, f.value, f.in_rules)
        assert f.low <= f.value <= f.high
    assert len(logs) >= 10


def test_kv_memory_from_the_flags_on_real_spark_start_ups(fixtures):
    bench = load_bench()
    rows = [bench.evaluate(c) for c in bench.all_cases(fixtures) if c.machine == "dgx-spark"]
    rows = [r for r in rows if r.pred_kv_gib is not None]
    assert len(rows) >= 10
    held_out = [r for r in rows if r.kv_role == "held out"]
    assert len(held_out) >= 6
    within = [r for r in rows if abs(r.errors["kv"]) <= 3.0]
    assert len(within) >= 6 and sum(r in within for r in held_out) >= 3
    for r in rows:
        low, high = r.pred_kv_range
        assert low <= r.case.kv_gib <= high, r.case.id  # the spread seen covers every real figure
        if abs(r.errors["kv"]) > 3.0:
            assert r.kv_why, r.case.id  # every miss says why


def test_the_fit_says_how_it_estimated_the_kv_memory():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    r = fit(cfg(spec.name, max_model_len=8192), spec, dgx_spark())
    text = " ".join(r.memory_working)
    for part in ("request", "weights", "activation peak", "non-torch", "CUDA graphs", "= KV memory"):
        assert part in text, part
    assert r.kv_cache_bytes_low < r.kv_cache_bytes < r.kv_cache_bytes_high
    d = r.to_dict()
    assert set(d) >= FIT_JSON_KEYS and d["kv_memory_working"] == r.memory_working
    given = fit(cfg(spec.name, max_model_len=512, kv_cache_memory_bytes="64M"), spec, dgx_spark())
    assert given.kv_cache_bytes_low == given.kv_cache_bytes_high == 64 * 1024**2
    assert "--kv-cache-memory-bytes" in given.memory_working[0]


def test_activation_peak_is_the_larger_of_the_forward_and_sampler_passes():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    few = activation_bytes(spec, 2048, 1)
    many = activation_bytes(spec, 2048, 256)
    # 256 sequences: the sampler's pass over the logits (128,256 vocab; vLLM 0.32's Triton top-k / top-p,
    # the SMs not known: a 256-row buffer) dominates; one sequence: the forward pass
    assert many == 256 * spec.vocab_size * 14 + 256 * spec.vocab_size * 4 > few
    # the forward's peak as vLLM's Llama code holds it (bench/activation_oracle.py): the MLP's gate_up and
    # activation output with four hidden-size tensors
    assert few == 2048 * spec.dtype_bytes * (4 * spec.hidden_size + 3 * spec.intermediate_size)


def test_a_request_that_fits_only_with_favourable_measurements_is_tight():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    small = {"gpu_memory_utilization": 0.22}  # 26.3 GiB: about 7 GiB of KV cache, some 60k tokens
    base = fit(cfg(spec.name, max_model_len=8192, **small), spec, dgx_spark())
    assert base.verdict == "fits" and "by vLLM's start-up measurements" in base.reasons[-1]
    # the longest max_model_len that fits at the median estimate, but not at the low end of the spread
    plan = plan_kv(spec, 2, None, 1, 2048, True, 0, False, rules_for(None))
    low = plan.max_len(base.kv_cache_bytes_low, 131072)
    assert 8192 < low < base.longest_max_model_len < 131072
    # between the two, and short enough that the median cache holds 1.1 requests
    between = (low + int(base.longest_max_model_len / 1.15)) // 2
    assert low < between
    edge = fit(cfg(spec.name, max_model_len=between, **small), spec, dgx_spark())
    assert edge.verdict == "tight", edge.reasons
    assert any("can leave as little as" in r for r in edge.reasons)
    assert fit(cfg(spec.name, max_model_len=low - 4096, **small), spec, dgx_spark()).verdict == "fits"


def test_a_large_batch_on_a_moe_model_takes_the_fused_moe_workspace():
    """AEON's Spark recipes run Qwen3.6-35B-A3B with 32768–65536 batched tokens: the profile run's
    fused-MoE workspace (held once, fit.moe_workspace_per_token) and the Gated-DeltaNet layers'
    prefill buffers (fit.gdn_prefill_per_token) then outgrow the sampler pass."""
    spec = load_model_spec("Qwen/Qwen3.6-35B-A3B")
    small = activation_bytes(spec, 2048, 128)
    big = activation_bytes(spec, 65536, 128)
    workspace = 8 * (max(2 * 512, 2048) + 512) * 2  # top-k × (max(2N, K) + N) × bf16
    assert spec.experts_per_token == 8 and spec.moe_intermediate_size == 512 and spec.hidden_size == 2048
    assert big > 65536 * 4 * workspace > small
    # the logs' own figure for it: 16.26 GiB of activation + non-torch memory at 65536 tokens
    assert abs((big + dgx_spark().non_torch) / GiB - 16.26) < 0.05


def test_a_request_that_fits_only_at_the_favourable_end_of_the_measurements_is_tight_not_won_t_start():
    """Where the median of vLLM's measured terms leaves too little KV memory for one request but the high
    end of what real start-ups measured leaves enough, the range straddles the line: tight, range shown."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    small = {"gpu_memory_utilization": 0.2}
    base = fit(cfg(spec.name, max_model_len=8192, **small), spec, dgx_spark())
    plan = plan_kv(spec, 2, None, 1, 2048, True, 0, False, rules_for(None))
    high = plan.max_len(base.kv_cache_bytes_high, 1 << 20)
    assert base.longest_max_model_len < high
    straddling = fit(cfg(spec.name, max_model_len=(base.longest_max_model_len + high) // 2, **small), spec, dgx_spark())
    assert straddling.verdict == "tight", straddling.reasons
    assert any("at the favourable end of vLLM's own start-up measurements" in r for r in straddling.reasons)
    beyond = fit(cfg(spec.name, max_model_len=high + 4096, **small), spec, dgx_spark())
    assert beyond.verdict == "wont_start", beyond.reasons
    assert not any("favourable end" in r for r in beyond.reasons)


def test_no_kv_memory_at_the_median_but_some_at_the_favourable_end_is_tight():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    none_left = fit(cfg(spec.name, max_model_len=1024, gpu_memory_utilization=0.15), spec, dgx_spark())
    assert none_left.kv_cache_bytes == 0 and none_left.kv_cache_bytes_high > GiB
    assert none_left.verdict == "tight", none_left.reasons
    assert any(r.startswith("no memory left for the KV cache") and "may start" in r for r in none_left.reasons)
    # lower still: not even the favourable end leaves any
    gone = fit(cfg(spec.name, max_model_len=1024, gpu_memory_utilization=0.12), spec, dgx_spark())
    assert gone.kv_cache_bytes_high == 0 and gone.verdict == "wont_start", gone.reasons


def test_a_request_the_other_terms_pass_shows_no_negative_kv_memory():
    """The KV memory is never below nothing: where weights + activations + non-torch + graphs pass the
    request, the point figure is 0 like its range, the shortfall is said, and vLLM still won't start."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")  # 14.99 GiB of weights, 11.96 GiB requested
    r = fit(cfg(spec.name, max_model_len=8192, gpu_memory_utilization=0.1), spec, dgx_spark())
    assert r.verdict == "wont_start" and r.kv_cache_bytes == r.kv_cache_bytes_high == 0, r.reasons
    (point,) = [w for w in r.memory_working if w.startswith("= KV memory")]
    assert point.startswith("= KV memory 0.00 GiB: the other terms pass the request by ")
    (reason,) = [x for x in r.reasons if x.startswith("no memory left for the KV cache")]
    short = float(point.split("pass the request by ")[1].split(" GiB")[0])
    assert short > 0 and f"= 0.00 GiB: the other terms pass the request by {short:.2f} GiB" in reason
    negative = re.compile(r"-\d")
    assert not [line for line in [*r.memory_working, *r.reasons] if negative.search(line)]
