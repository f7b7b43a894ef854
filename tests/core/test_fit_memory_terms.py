"""The terms of the KV memory vLLM subtracts, from what its code allocates: the fused-MoE workspace
(held once), the Gated-DeltaNet prefill buffers, FlashInfer's CUDA graphs per attention group.
Checked against real start-ups in tests/fixtures/vllm-logs (SOURCES.md)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit, machine_from_name
from sparktui.core.fit_settings import (
    activation_bytes,
    activation_parts,
    gdn_prefill_per_token,
    moe_workspace_per_token,
    nvfp4_moe_padding,
)
from sparktui.core.modelspec import load_model_spec, spec_from_config
from tests.core.test_fit import load_bench
from tests.support import FIXTURES

GiB = 1024**3
LOGS = FIXTURES / "vllm-logs"
RTX_5090 = 31.36  # what CUDA reports as its total ("Free memory on device (30.86/31.36 GiB)")


def logged(name: str, pattern: str) -> float:
    m = re.search(pattern, (LOGS / name).read_text())
    assert m, pattern
    return float(m.group(1).replace(",", ""))


CASCADE = "discrete_v0.20.1rc1_nemotron-cascade-2-30b-a3b-nvfp4_rtx5090_excerpt.log"


def cascade(**kw) -> ServeConfig:
    flags = dict(
        max_model_len=256000,
        gpu_memory_utilization=0.85,
        kv_cache_dtype="fp8_e4m3",
        mamba_ssm_cache_dtype="float32",
        enable_prefix_caching=False,
        max_num_batched_tokens=32768,
        max_num_seqs=128,
        vllm_version="0.20.1",
        extra_args=["--compilation-config", '{"max_cudagraph_capture_size": 512}'],
    )
    return ServeConfig(model="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", **{**flags, **kw})


def test_nemotron_cascade_on_an_rtx_5090_started_so_it_starts():
    # vLLM 0.20.1rc: 18.54 GiB weights, 0.48 GiB graphs, 3.72 GiB KV of 0.85 × 31.36: it left 3.92 GiB for
    # the activation peak and non-torch memory. The old fit held 4.37 fused-MoE workspaces (11.71 GiB
    # at 32768 tokens) and said it would not start.
    spec = load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    result = fit(cascade(), spec, machine_from_name(RTX_5090))
    # started: never "won't start" / "unsafe" (tight: 5.7 full-length requests for 128 sequences)
    assert result.verdict in ("fits", "tight"), result.reasons
    kv = logged(CASCADE, r"Available KV cache memory: ([\d.]+) GiB")
    assert result.kv_cache_bytes_low <= kv * GiB <= result.kv_cache_bytes_high
    left = 0.85 * RTX_5090 - 18.54 - 0.48 - kv
    assert result.budget["activation_peak"] / GiB < left
    # the other side: at a utilization where weights and the peak leave nothing, it still will not start
    short = fit(cascade(gpu_memory_utilization=0.65), spec, machine_from_name(RTX_5090))
    assert short.verdict == "wont_start"


def test_the_cutlass_nvfp4_moe_kernels_pad_nemotron_h_experts_to_128_rows():
    # flashinfer_fp4_moe.py prepare_nvfp4_moe_layer_for_fi_or_cutlass: swizzle_blockscale pads the scales'
    # rows to 128 (and columns to 4); a non-gated (relu²) expert's w13 rows, w2 columns and w2 scales are
    # padded to match. Nemotron-3-Nano: intermediate 1856 -> 1920, hidden 2688, 128 experts, 23 MoE layers
    spec = load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    assert spec.nvfp4_moe == (23, 128, 2688, 1856, False)
    per_expert = 64 * 2688 // 2 + 2688 * 64 // 2 + 64 * 168 + 2688 * 4  # w13, w2, w13 scales, w2 scales
    assert nvfp4_moe_padding(spec) == 23 * 128 * per_expert == 569_769_984
    # per tensor-parallel rank: 928 -> 1024 rows
    assert nvfp4_moe_padding(spec, tp=2) == 23 * 128 * (96 * 1344 + 2688 * 48 + 96 * 168 + 2688 * 6)
    # the other side of the boundary: an intermediate already a multiple of 128 is not padded
    assert nvfp4_moe_padding(replace(spec, nvfp4_moe=(23, 128, 2688, 1920, False))) == 0
    # gated experts (Qwen3-30B-A3B: 2 × 768 rows) are aligned: nothing; unquantized experts: nothing
    assert nvfp4_moe_padding(load_model_spec("nvidia/Qwen3-30B-A3B-NVFP4")) == 0
    assert load_model_spec("Qwen/Qwen3-30B-A3B").nvfp4_moe == ()


def test_the_nvfp4_moe_padding_counts_where_the_gpu_runs_fp4_natively():
    spec = load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    pad = nvfp4_moe_padding(spec)
    # a DGX Spark (GB10) runs the CUTLASS kernels (its logs: VLLM_CUTLASS, FLASHINFER_CUTLASS): in the weights
    spark = fit(cascade(gpu_memory_utilization=0.6), spec, dgx_spark())
    assert spark.budget["weights"] == spec.weights_bytes + pad
    assert any("CUTLASS NVFP4 MoE kernels pad" in line for line in spark.memory_working)
    # a GPU known only by its size: not counted, but the low end of the KV range allows for it
    unknown = machine_from_name(RTX_5090)
    assert unknown.fp4 is None
    plain = fit(cascade(), spec, unknown)
    assert plain.budget["weights"] == spec.weights_bytes
    native = fit(cascade(), spec, replace(unknown, fp4=True))
    marlin = fit(cascade(), spec, replace(unknown, fp4=False))
    assert native.budget["weights"] == spec.weights_bytes + pad == marlin.budget["weights"] + pad
    assert plain.kv_cache_bytes_low == native.kv_cache_bytes_low == marlin.kv_cache_bytes_low - pad
    # the RTX 5090 start-up ("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend") loaded 18.54 GiB
    weights = logged(CASCADE, r"Model loading took ([\d.]+) GiB")
    assert abs(native.budget["weights"] / GiB - weights) < 0.003 * weights
    assert native.verdict in ("fits", "tight"), native.reasons  # it started


def test_the_fused_moe_workspace_is_held_once_for_every_layer():
    spec = load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    n, k, top = spec.moe_intermediate_size, spec.hidden_size, spec.experts_per_token
    assert moe_workspace_per_token(spec) == top * (max(2 * n, k) + n) * 2  # workspace13 + workspace2, bf16
    # the forward pass: the residual stream and the shared expert, plus one workspace
    dense = 2 * (6 * k + 2 * spec.shared_expert_intermediate_size)
    assert activation_bytes(spec, 32768, 1) == 32768 * (dense + moe_workspace_per_token(spec))
    # a dense model has none
    assert moe_workspace_per_token(load_model_spec("Qwen/Qwen3-32B")) == 0


def test_gated_deltanet_prefill_buffers_only_for_gdn_layers():
    qwen = load_model_spec("Qwen/Qwen3.6-35B-A3B")
    assert gdn_prefill_per_token(qwen) > 0
    # Mamba2 (Nemotron-H) and plain attention have no Gated-DeltaNet buffers
    assert gdn_prefill_per_token(load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")) == 0
    assert gdn_prefill_per_token(load_model_spec("Qwen/Qwen3-32B")) == 0
    # per rank: tensor parallelism splits the heads
    assert gdn_prefill_per_token(qwen, tp=2) < 0.6 * gdn_prefill_per_token(qwen)


REDHAT = "spark_v0.20.0_qwen3.6-35b-a3b-nvfp4-redhat_fp8kv_excerpt.log"


def test_flashinfer_graphs_scale_with_the_attention_groups_captured():
    # Qwen3.6-35B-A3B: 10 attention layers in 1 KV-cache group beside 30 linear-attention layers.
    # vLLM 0.20 on a Spark, fp8 KV (FlashInfer), one FULL graph of 1 token: "Estimated CUDA graph memory:
    # 0.43 GiB". The old fit applied gemma-3-27b's 3.38 GiB first capture (7 groups) whole.
    spec = load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")
    config = ServeConfig(
        model=spec.name,
        max_model_len=65536,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="fp8_e4m3",
        enable_prefix_caching=True,
        max_num_batched_tokens=8192,
        max_num_seqs=1,
        vllm_version="0.20.0",
        extra_args=["--compilation-config", '{"max_cudagraph_capture_size": 1}'],
    )
    graphs = fit(config, spec, dgx_spark()).budget["cuda_graphs"] / GiB
    assert abs(graphs - logged(REDHAT, r"Estimated CUDA graph memory: ([\d.]+) GiB")) < 0.1
    assert any("1 attention KV-cache group" in w for w in fit(config, spec, dgx_spark()).memory_working)


def test_gemma_3_27b_fp8_keeps_its_seven_flashinfer_groups():
    # the all-attention model the old constant came from: 7 groups (52 sliding + 8 padding, 10 full)
    # google/gemma-3-27b-it's published config, as bench/fit_accuracy.py holds it
    spec = spec_from_config(load_bench().GEMMA3_27B, name="gemma-3-27b", source="bench/fit_accuracy.py")
    flags = ServeConfig(
        model="gemma-3-27b",
        max_model_len=131072,
        gpu_memory_utilization=0.85,
        kv_cache_dtype="fp8",
        max_num_batched_tokens=4096,
        vllm_version="0.21.0",
    )
    result = fit(flags, spec, dgx_spark())
    log = "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log"
    assert abs(result.budget["cuda_graphs"] / GiB - logged(log, r"Estimated CUDA graph memory: ([\d.]+) GiB")) < 0.2
    assert any("7 attention KV-cache group" in w for w in result.memory_working)


def test_fp8_kv_no_longer_costs_a_70b_gigabytes_of_graphs():
    # Llama-3-70B NVFP4 on a Spark: the old fit gave fp8 KV 3.2 GiB less KV memory than bf16 (55.3 vs
    # 58.5 GiB) for FlashInfer's graphs; one attention group costs one 394 MiB workspace and its graphs
    config = json.loads((FIXTURES / "model-configs" / "meta-llama__Llama-3.3-70B-Instruct.json").read_text())
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    spec = spec_from_config(config, name="llama-70b-nvfp4", source="fixture + NVFP4")
    bf16, fp8 = (
        fit(
            ServeConfig(model="m", max_model_len=32768, gpu_memory_utilization=0.85, kv_cache_dtype=d),
            spec,
            dgx_spark(),
        )
        for d in ("auto", "fp8")
    )
    assert bf16.kv_cache_bytes - fp8.kv_cache_bytes < 0.6 * GiB
    assert fp8.kv_cache_tokens > 1.9 * bf16.kv_cache_tokens


def test_the_workspace_takes_the_shapes_of_the_experts_that_run():
    # bytes per batched token, as vLLM 0.32's own workspace_shapes give them (bench/moe_workspace_oracle.py):
    # NVFP4 runs CutlassExpertsFp4 (N = the w13 width, 2 × 512 for Qwen3.6's gated experts), bf16
    # TritonExperts; Nemotron-H's relu² experts have no gate (N = 1856)
    assert moe_workspace_per_token(load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")) == 49_152
    assert moe_workspace_per_token(load_model_spec("Qwen/Qwen3.6-35B-A3B")) == 65_536
    assert moe_workspace_per_token(load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")) == 66_816
    assert moe_workspace_per_token(load_model_spec("deepseek-ai/DeepSeek-V3")) == 229_376


def test_experts_without_their_own_width_take_the_mlp_width():
    # Mixtral and gpt-oss have no moe_intermediate_size: vLLM builds their experts with intermediate_size
    # (models/mixtral.py, models/gpt_oss.py), and its fused-MoE workspace is held for them too; vLLM 0.32's
    # own model code measures these figures (bench/activation_oracle.py): TritonExperts, top-k × (max(N/2, K)
    # + max(N, K)) × 2 bytes with N = 2 × intermediate
    assert moe_workspace_per_token(load_model_spec("mistralai/Mixtral-8x7B-v0.1")) == 2 * (14336 + 28672) * 2
    assert moe_workspace_per_token(load_model_spec("openai/gpt-oss-120b")) == 4 * (2880 + 5760) * 2 == 69_120
    # the other side: a config with its own expert width keeps it (Qwen3-30B-A3B: 768, not its dense 6144)
    qwen = load_model_spec("Qwen/Qwen3-30B-A3B")
    assert (qwen.moe_intermediate_size, qwen.intermediate_size) == (768, 6144)
    assert moe_workspace_per_token(qwen) == 8 * (2048 + 2048) * 2 == 65_536


def test_the_v2_sampler_pass_is_the_logits_in_the_models_dtype_with_the_forwards_tensors_held():
    # vLLM 0.32's own code, run on the meta device (bench/activation_oracle.py), at 2048 tokens and 256
    # sequences: the forward's hidden states (2048 × hidden) and the sampled rows (256 × hidden) held,
    # the logits once in bf16, and the fused-MoE workspace still held
    llama = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    assert activation_parts(llama, 2048, 256, 1, "v2")[1] == 84_541_440 == 2 * (2304 * 4096 + 256 * 128_256)
    qwen_moe = load_model_spec("Qwen/Qwen3-30B-A3B")
    assert activation_parts(qwen_moe, 2048, 256, 1, "v2")[1] == 221_446_144
    # a soft-capped model (Gemma 4) holds two copies of its logits (LogitsProcessor: / cap, tanh, × cap)
    gemma4 = load_model_spec("nvidia/Gemma-4-31B-IT-NVFP4")
    assert gemma4.logit_softcap == 30.0
    assert activation_parts(gemma4, 2048, 256, 1, "v2")[1] == 293_208_064 == 2 * (2304 * 5376 + 2 * 256 * 262_144)
    gemma3 = spec_from_config(load_bench().GEMMA3_27B, name="gemma-3-27b", source="bench")  # no soft cap: one copy
    assert gemma3.logit_softcap == 0.0
    assert activation_parts(gemma3, 2048, 256, 1, "v2")[1] == 159_023_104 == 2 * (2304 * 5376 + 256 * 262_208)


def test_the_v1_sampler_pass_is_what_each_versions_top_k_top_p_code_holds():
    # 256 dummy requests × vocab logits: the runner's bf16 logits (2 bytes each) and Sampler.forward's fp32
    # copy (4) held throughout (v1/sample/sampler.py Sampler.forward)
    llama = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    logits = 256 * 128_256
    # to 0.16: apply_top_k_top_p sorts (fp32 values, int64 indices), two bool masks, the top-p
    # probabilities, then scatters into a new tensor: 2 + 4 + 4 + 8 + 1 + 4 + 1 + 4 = 28 bytes, 7 fp32 copies
    assert activation_parts(llama, 2048, 256, 1, "v1", "sort_copy", 48)[1] == logits * 28
    # 0.17 on, from 8 requests: the Triton kernel masks in place with a cached buffer of
    # min(next power of 2 of min(SMs, rows), SMs) rows (GB10: 48 SMs), then softmax and the exponential
    # draw: 2 + 4 + 4 + 4 bytes and the buffer (topk_topp_triton.py apply_top_k_top_p_triton)
    assert activation_parts(llama, 2048, 256, 1, "v1", "triton_from_8", 48)[1] == logits * 14 + 48 * 128_256 * 4
    assert activation_parts(llama, 2048, 256, 1, "v1", "triton", 48)[1] == logits * 14 + 48 * 128_256 * 4
    assert activation_parts(llama, 2048, 40, 1, "v1", "triton", 132)[1] == 40 * 128_256 * 14 + 64 * 128_256 * 4
    # the SMs not known: the most the buffer can be, the rows' next power of 2
    assert activation_parts(llama, 2048, 200, 1, "v1", "triton", None)[1] == 200 * 128_256 * 14 + 256 * 128_256 * 4


def test_under_8_requests_the_v1_sampler_sorts_in_place_until_0_31():
    # apply_top_k_top_p takes the Triton kernel only from 8 rows (0.17-0.30), always from 0.31; the
    # in-place sort holds 24 bytes a logit (6 fp32 copies with bf16 logits), as bench/activation_oracle.py
    # measures vLLM 0.32's PyTorch path (its CPU build has no Triton)
    llama = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    assert activation_parts(llama, 2048, 7, 1, "v1", "triton_from_8", 48)[1] == 7 * 128_256 * 24
    assert activation_parts(llama, 2048, 8, 1, "v1", "triton_from_8", 48)[1] == 8 * 128_256 * 14 + 8 * 128_256 * 4
    assert activation_parts(llama, 2048, 7, 1, "v1", "triton", 48)[1] == 7 * 128_256 * 14 + 8 * 128_256 * 4


def test_a_spark_fit_takes_the_v1_sampler_pass_of_its_vllm_version():
    # Llama-3.1-8B on a Spark at the GB10 defaults (2048 tokens, 256 sequences): its forward (0.23 GiB)
    # is below either sampler pass, so the activation peak is the version's sampler pass
    spec = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    logits = 256 * 128_256

    def peak(version: str) -> int:
        config = ServeConfig(model=spec.name, vllm_version=version, max_model_len=8192)
        return fit(config, spec, dgx_spark()).budget["activation_peak"]

    assert peak("0.16.0") == logits * 28
    assert peak("0.17.0") == peak("0.21.0") == logits * 14 + 48 * 128_256 * 4
    # the working says which pass it is
    config = ServeConfig(model=spec.name, vllm_version="0.16.0", max_model_len=8192)
    assert any("sorted in fp32 (7 copies" in line for line in fit(config, spec, dgx_spark()).memory_working)


def test_the_forward_peak_is_the_larger_of_vllms_attention_and_mlp_stages():
    # bytes per batched token live at the forward's peak in vLLM 0.32's model code, beside the fused-MoE
    # workspace, as bench/activation_oracle.py measures them (bf16): the dense MLP's gate_up (2 ×
    # intermediate) and activation output with 4 (Llama) or 5 (Qwen) hidden-size tensors
    assert activation_bytes(load_model_spec("meta-llama/Meta-Llama-3.1-8B"), 2048, 1) == 2048 * 118_784
    assert 118_784 == 2 * (4 * 4096 + 3 * 14_336)
    assert activation_bytes(load_model_spec("Qwen/Qwen3-32B"), 2048, 1) == 2048 * 2 * (5 * 5120 + 3 * 25_600)
    # an MoE model without a shared expert peaks in attention: 5 hidden-size tensors, qkv, the attention
    # output and the q / k norms' outputs (Qwen3: 32 × 128 query, 4 × 128 key / value)
    qwen_moe = load_model_spec("Qwen/Qwen3-30B-A3B")
    attention = 5 * 2048 + 2 * 4096 + 2 * 512 + (4096 + 512)
    assert activation_bytes(qwen_moe, 2048, 1) == 2048 * (2 * attention + 65_536) == 2048 * 113_664
    # Gemma 4 holds 3 hidden-size tensors there and normalises v as well (global layers: 16 × 512 query,
    # 2 × 512 key / value); with its workspace, as bench/activation_oracle.py measures it
    gemma4 = load_model_spec("google/gemma-4-26B-A4B")
    attention = 3 * 2816 + 2 * 8192 + 2 * 1024 + (8192 + 1024) + 1024
    assert activation_bytes(gemma4, 2048, 1) == 2048 * (2 * attention + 90_112) == 2048 * 164_352
    # MLA (DeepSeek-V3): the attention holds q (128 heads × (128 + 64)) and its output (128 × 128) through
    # o_proj, beside fused_qkv_a_proj's output (1536 + 512 + 64), the normed q latent (1536) and
    # kv_c (512), with 5 hidden-size tensors; the rope runs in place on a GB10 (FlashInfer). With its
    # workspace that is bench/activation_oracle.py's 801,374,208 bytes at 2048 tokens, to the byte
    deepseek = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert deepseek.mla_widths == (128 * (128 + 64 + 128), (1536 + 512 + 64) + 1536 + 512)
    attention = 5 * 7168 + 128 * 320 + 4160
    assert activation_bytes(deepseek, 2048, 1) == 2048 * (2 * attention + 229_376) == 801_374_208
    # at TP 2 the heads' part halves, the replicated latent projections do not
    attention_tp2 = 5 * 7168 + 128 * 320 // 2 + 4160
    assert activation_bytes(deepseek, 2048, 1, tp=2) == 2048 * (
        2 * attention_tp2 + moe_workspace_per_token(deepseek, 2)
    )
    # the other side: hybrids, which the fit does not read exactly, keep the residual-stream estimate
    for name in ("Qwen/Qwen3.6-35B-A3B",):
        spec = load_model_spec(name)
        inner = spec.shared_expert_intermediate_size
        expected = 2 * (6 * spec.hidden_size + 2 * inner) + moe_workspace_per_token(spec) + gdn_prefill_per_token(spec)
        assert activation_bytes(spec, 2048, 1) == 2048 * expected, name


def test_before_0_14_an_unquantized_moe_holds_fused_experts_caches_only_inside_the_op():
    # To 0.13 UnquantizedFusedMoEMethod.forward_cuda calls fused_experts: its caches (cache13 of
    # min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) × top-k × max(N, K), cache2 of × N / 2) and the router's
    # logits and top-k live only inside the MoE stage, beside 4 hidden-size tensors; from 0.14 the
    # modular kernel's TritonExperts workspace is held (vllm_rules moe_unquantized_workspace)
    config = json.loads((FIXTURES / "model-configs" / "Qwen__Qwen3-30B-A3B.json").read_text())
    spec = spec_from_config(config, name="Qwen/Qwen3-30B-A3B", source="fixture")
    tokens, m = 20480, dgx_spark()

    def peak(version: str, **kw) -> int:
        flags = dict(max_model_len=8192, max_num_batched_tokens=tokens, max_num_seqs=8, vllm_version=version)
        return fit(ServeConfig(model="q3", **(flags | kw)), spec, m).budget["activation_peak"]

    # bench/activation_oracle.py on vLLM 0.13's own model code, the forward's peak at 20,480 tokens
    assert peak("0.13.0") == 1_080_295_424
    # 0.14: the held workspace over every token, tokens × top-k × (max(N / 2, K) + max(N, K))
    assert moe_workspace_per_token(spec) == 8 * (2048 + 2048) * 2
    held = peak("0.14.0")
    assert held == activation_parts(spec, tokens, 8, runner="v1", sampler_path="triton_from_8", sms=m.sms)[0]
    assert held > peak("0.13.0") + 0.25 * GiB
    # the chunk: 32768 to 0.11 caches all 20,480 tokens, 16384 from 0.12
    assert peak("0.11.0") - peak("0.12.0") == (tokens - 16384) * 8 * (2048 + 768) * 2
    # a quantized MoE (--quantization fp8) runs another method: the held workspace stays the estimate
    assert peak("0.13.0", quantization="fp8") > peak("0.13.0") + 0.25 * GiB
