"""The constants of vLLM's start-up memory that sparktui takes from real start-ups (each with its
spread and the logs it was fitted on): vLLM measures them while it starts, they are not its flags."""

from __future__ import annotations

from typing import Literal

from sparktui.core.record import record
from sparktui.core.units import GiB, MiB

# --------------------------------------------------------------------------- the profile run's memory
#
# Worker.determine_available_memory (vllm/v1/worker/gpu_worker.py) gives the KV cache
#     ceil(total × gpu_memory_utilization) − weights − torch peak increase − non-torch increase
#     − CUDA-graph estimate (0.20 on; opt-in 0.18–0.19)
# The last three are measured by vLLM while it starts, not computed from its flags. sparktui
# models what the flags decide (how many tokens and sequences the profile run pushes, how many
# CUDA graphs are captured) and takes the rest from real start-ups: the constants below, each
# with the spread seen and the logs it was fitted on (bench/fit_accuracy.py refits them and
# tests/core/test_fit.py checks the two agree).

FIT_LOGS = (  # the DGX Spark start-ups the constants were fitted on; the other Spark logs are held out
    "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log",
    "spark_vdev-g9759e3b06_gemma-3-12b-it_bf16_success.log",
    "spark_vdev-g9759e3b06_gemma-4-26b-a4b-it_bf16_success.log",
    "spark_vdev-g9759e3b06_gemma-4-31b-it_bf16_success.log",
)


@record
class MeasuredConstant:
    """A figure vLLM measures at start-up that no flag decides: the value sparktui assumes (the
    median over the start-ups it was fitted on), the lowest and highest seen on every real start-up
    with the figure, and where in vLLM the measurement is made."""

    key: str
    value: float
    low: float
    high: float
    unit: Literal["GiB", "MiB", "x"]
    summary: str
    source: str
    fitted_on: tuple[str, ...] = FIT_LOGS

    def _scale(self, x: float) -> int:
        return int(x * (GiB if self.unit == "GiB" else MiB if self.unit == "MiB" else 1))

    @property
    def bytes(self) -> int:
        return self._scale(self.value)

    @property
    def spread_bytes(self) -> tuple[int, int]:
        return self._scale(self.low), self._scale(self.high)

    def describe(self) -> str:
        unit = "×" if self.unit == "x" else f" {self.unit}"
        return f"{self.value:g}{unit} (seen {self.low:g}–{self.high:g}{unit}; {self.source})"


MODEL_RUNNER = "vllm/v1/worker/gpu_model_runner.py"

# The profile run's sampler pass is not a measured constant: fit_settings.v1_sampler_pass_bytes and
# v2_sampler_pass_bytes read it from vLLM's code, per version (vllm_rules v1_sampler_top_k_top_p).

UMA_NON_TORCH = MeasuredConstant(
    "uma_non_torch", 3.36, 0.09, 5.46, "GiB",
    "non-torch memory growth during start-up on unified memory: vLLM reads free memory as the host's "
    "MemAvailable there, so whatever else the process (compiler, libraries, loader) or the OS takes "
    "counts (reclaimable page cache does not: MemAvailable holds it); not knowable before launch, and not "
    "repeatable: launches of one configuration on one Spark measured 0.09 and 2.54 GiB (Gemma-3-27B fp8, DEBUG "
    "split), 1.27 and 3.73 (the same build and flags, nvfp4 KV), while their torch peak read 1.72 GiB every "
    "time (tests/fixtures/vllm-repeats, bench/repeat_launches.py); the spread is over those launches too. Fitted on "
    "0.21-era logs, whose window also holds the CUDA-graph profiling (vllm_rules non_torch_window); the "
    "one 0.13 log, whose window does not, implies 1.91 GiB, inside their spread; and an --enforce-eager "
    "Gemma-3-27B run on a 0.21-era build (no graph profiling in its window; DEBUG split, jethac/dgx-spark-hijinks "
    "results/vllm_gemma3_flashinfer_prefill_debug_20260609T143948JST_nvfp4_kv_flashinfer_eager_server.log) "
    "measured 3.87 GiB, more than its graph-profiled fp8 twin (4.27 − 1.72 logged = 2.55): the window does not size it",
    "vllm/utils/mem_utils.py: MemorySnapshot.measure (integrated GPU: psutil available), memory_profiling",
)  # fmt: skip
DISCRETE_NON_TORCH = MeasuredConstant(
    "discrete_non_torch", 0.25, 0.02, 0.25, "GiB",
    "non-torch memory growth (NCCL, cuBLAS workspaces) on a GPU with its own memory; the one discrete "
    "log that prints it says 0.02 GiB (llava-1.5-7b, 0.10.2)",
    "vllm/utils/mem_utils.py: memory_profiling",
    fitted_on=("discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_success.log",),
)  # fmt: skip
CUDAGRAPH_FIRST_CAPTURE = MeasuredConstant(
    "cudagraph_first_capture", 0.30, 0.05, 2.49, "GiB",
    "free memory lost to the first CUDA graph captured while profiling (per mode, the largest counts); "
    "measured with cudaMemGetInfo, so it holds the attention backend's workspaces (FlashInfer FULL graphs: "
    "flashinfer_full_first_capture)",
    f"{MODEL_RUNNER}: GPUModelRunner.profile_cudagraph_memory",
)  # fmt: skip
CUDAGRAPH_PER_GRAPH = MeasuredConstant(
    "cudagraph_per_graph", 1.0, 1.0, 23.75, "MiB",
    "each further CUDA graph: vLLM counts at least 1 MiB (1.00 MiB measured for PIECEWISE graphs, "
    "23.75 MiB for FlashInfer FULL graphs, gemma-3-27b)",
    f"{MODEL_RUNNER}: GPUModelRunner.profile_cudagraph_memory (max(second capture, 1 MiB))",
    fitted_on=(FIT_LOGS[0],),
)  # fmt: skip
# VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (vllm/envs.py, 394 MiB since 0.10): each FlashInfer metadata
# builder zero-fills one on its first FULL-graph warm-up (flashinfer.py _get_workspace_buffer)
FLASHINFER_WORKSPACE_BYTES = 394 * MiB
FLASHINFER_FIT_LOGS = (FIT_LOGS[0], "spark_vdev-g9759e3b06_gemma-3-12b-it_fp8kv_success.log")
FLASHINFER_FULL_FIRST_CAPTURE = MeasuredConstant(
    "flashinfer_full_first_capture", 129.66, 29.15, 158.15, "MiB",
    "what the first FULL CUDA graph with FlashInfer attention adds per attention KV-cache group beyond "
    "that group's workspace buffer; the mean of the two Gemma 3 fp8 runs on a Spark: gemma-3-27b (7 groups, "
    "3466.15 MiB = 7 × (394 + 101)) and gemma-3-12b (6 groups, 3.96 GiB total: 158). Held out: Qwen3.6-35B-A3B "
    "fp8 on vLLM 0.20 (1 group, 1 FULL graph: 0.43 GiB total, 46). The low end is a repeated launch of the "
    "gemma-3-27b run (same flags, another build: 3.73 GiB total, 29; tests/fixtures/vllm-repeats). "
    "Nemotron-Cascade-2 on an RTX 5090 (1 group, 19 FULL graphs) logged 0.48 GiB in all, at this model's "
    "floor there (0.48): not carried to that GPU",
    f"{MODEL_RUNNER}: GPUModelRunner.profile_cudagraph_memory; v1/attention/backends/flashinfer.py: "
    "FlashInferMetadataBuilder._get_workspace_buffer",
    fitted_on=FLASHINFER_FIT_LOGS,
)  # fmt: skip
FLASHINFER_FULL_PER_GRAPH = MeasuredConstant(
    "flashinfer_full_per_graph", 3.39, 1.0, 3.39, "MiB",
    "each further FULL CUDA graph with FlashInfer attention, per attention KV-cache group (one decode "
    "wrapper each): gemma-3-27b's 23.75 MiB over its 7 groups; vLLM counts at least 1 MiB a graph",
    f"{MODEL_RUNNER}: GPUModelRunner.profile_cudagraph_memory (max(second capture, 1 MiB)); "
    "flashinfer.py: FlashInferMetadataBuilder._get_decode_wrapper",
    fitted_on=(FIT_LOGS[0],),
)  # fmt: skip
# Unresolved (bench/activation_oracle.py): vLLM's own profile pass returns from the Gated-DeltaNet core
# before its chunked prefill (no attention metadata: _warmup_prefill_kernels on 64 tokens, then return;
# qwen_gdn_linear_attn.py _forward_core at 0.32, gdn_linear_attn.py from 0.19.0), so in eager code these
# buffers are not in the torch peak: Qwen3-Next's forward at 2048 tokens measures 0.352 GiB there, the fit
# says 0.434 (Qwen3.6-35B-A3B NVFP4: 0.271 against 0.403; both ratios the same at 8192 tokens: the eager
# pass is linear in tokens). The compiled Spark runs hold more, and more the more tokens they batch: with
# only the oracle's forward (142 KB a token for Qwen3.6-35B-A3B) what is left for non-torch memory is 1.9
# GiB at 8192 tokens, 4.2 at 32768 and 6.8-7.6 at 65536, against 3.4 on the other Spark runs; this term
# takes up about that token-proportional part. Kept until a log or a GPU says where it goes.
GDN_PREFILL_COPIES = MeasuredConstant(
    "gdn_prefill_copies", 1.00, 0.64, 1.00, "x",
    "a Gated-DeltaNet layer's prefill buffers over max_num_batched_tokens tokens, as a multiple of what "
    "sparktui reads vLLM's code to allocate (fit.py gdn_prefill_per_token): what the reading leaves out "
    "(the drafter's own pass, kernel temporaries). Fitted on one Qwen3.6-35B-A3B run at 65536 tokens "
    "(1.09: the reading explains 92% of it); its held-out runs imply 0.82-1.09",
    "vllm/model_executor/layers/mamba/gdn_linear_attn.py: forward_cuda, _forward_core; "
    "vllm/model_executor/layers/fla/ops/chunk.py: chunk_gated_delta_rule_fwd",
    fitted_on=("spark_vdev-g101584af0_qwen3.6-35b-a3b-nvfp4-dflash_success.log",),
)  # fmt: skip
UMA_RELAUNCH = MeasuredConstant(
    "uma_relaunch", 3.70, 0.21, 3.70, "GiB",
    "how far vLLM's own start-up measurements on unified memory (activation peak + non-torch + the CUDA-graph "
    "estimate) moved between launches of one build with every flag the same on one DGX Spark: the KV memory "
    "of one configuration moved by up to 3.70 GiB (Gemma-3-27B nvfp4 KV, build ge2a8197a9: 39.29 and 42.99), "
    "0.21 at the least, 2.02 over nine launches of Gemma-4-31B. So a launch's own figures leave the next "
    "launch's up to that far either way: the range of a fit from measured terms",
    "bench/repeat_launches.py relaunch_movement (tests/fixtures/vllm-repeats); vllm/utils/mem_utils.py "
    "MemorySnapshot.measure (integrated GPU: psutil available)",
    fitted_on=("tests/fixtures/vllm-repeats",),
)  # fmt: skip
INSTANTTENSOR_REPORT = "MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#204 (reported figures, no raw log)"
INSTANTTENSOR_NON_TORCH = MeasuredConstant(
    "instanttensor_non_torch", 4.43, 4.42, 5.75, "GiB",
    "--load-format instanttensor on a DGX Spark: what the loader keeps outside torch counts as non-torch "
    "memory. Measured as the fall in available KV memory against vLLM's default loader, same image, "
    "commit and flags, on two 2x GB10 kits (GLM-5.3-Flash EXL3, TP 2): 15.01 against 10.58 GiB, then "
    "16.93-18.13 against 12.38-13.08 GiB over three runs each; one model only",
    "vllm/model_executor/model_loader/weight_utils.py: instanttensor_weights_iterator; "
    "vllm/utils/mem_utils.py: memory_profiling",
    fitted_on=(INSTANTTENSOR_REPORT,),
)  # fmt: skip
MEASURED_CONSTANTS = (
    UMA_RELAUNCH,
    INSTANTTENSOR_NON_TORCH,
    GDN_PREFILL_COPIES,
    FLASHINFER_FULL_FIRST_CAPTURE,
    FLASHINFER_FULL_PER_GRAPH,
    UMA_NON_TORCH,
    DISCRETE_NON_TORCH,
    CUDAGRAPH_FIRST_CAPTURE,
    CUDAGRAPH_PER_GRAPH,
)
