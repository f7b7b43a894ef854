"""The rows of core/vllm_rules.py's table about CUDA graphs and the model runner: whether vLLM sets
memory aside for its graphs, which batch sizes it captures and in which cudagraph mode, and which
model runner (V1 or V2, which rounds the decode graphs its own way) a model runs on
(CUDAGRAPH_RULES, with the V2 runner's architectures per rule). vllm_rules.RULES splices them in;
VllmRules answers the fit's questions from them."""

from __future__ import annotations

from sparktui.core.version_rule import Rule
from sparktui.core.vllm_version import VllmVersion

V = VllmVersion

# fmt: off
CUDAGRAPH_RULES: tuple[Rule, ...] = (
    Rule("cudagraph_estimate", V(0, 10, 0), V(0, 18, 0), "none",
         "CUDA graphs are captured after the KV cache is sized: nothing is set aside for them",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory"),
    Rule("cudagraph_estimate", V(0, 18, 0), V(0, 20, 0), "opt_in",
         "CUDA-graph memory is estimated but subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory; vllm/envs.py"),
    Rule("cudagraph_estimate", V(0, 20, 0), None, "subtracted",
         "CUDA-graph memory is estimated and subtracted from the KV cache (unless --enforce-eager or "
         "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); the 0.20.0 wheel already defaults it on, though "
         "vLLM's own message says 'default since v0.21.0'",
         "vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory; vllm/envs.py"),
    Rule("cudagraph_decode_query_len", V(0, 10, 0), V(0, 11, 1), "no",
         "the largest CUDA-graph batch is min(2 × max_num_seqs, 512, max_num_batched_tokens); "
         "speculative tokens do not change the capture sizes",
         "vllm/config/__init__.py: VllmConfig._set_cudagraph_sizes"),
    Rule("cudagraph_decode_query_len", V(0, 11, 1), V(0, 12, 0), "round_or_keep",
         "as before, but with speculative decoding and FULL decode graphs (an attention backend that "
         "takes uniform multi-token batches) every size is rounded up to a multiple of 1 + speculative "
         "tokens, within the largest size; when none is left the sizes stay as they were",
         "vllm/v1/worker/gpu_model_runner.py: GPUModelRunner._check_and_update_cudagraph_mode; "
         "vllm/config/compilation.py: CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"),
    Rule("cudagraph_decode_query_len", V(0, 12, 0), V(0, 13, 0), "round",
         "as 0.11.1, but when no rounded size is left it captures 1 + speculative tokens alone, or "
         "refuses to start if that passes the largest size",
         "vllm/config/compilation.py: CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"),
    Rule("cudagraph_decode_query_len", V(0, 13, 0), None, "yes",
         "the largest CUDA-graph batch is min(2 × max_num_seqs × (1 + speculative tokens), 512, "
         "max_num_batched_tokens), and with FULL decode graphs every size is rounded up to a multiple "
         "of 1 + speculative tokens (0.25: decided in the compilation config)",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes; vllm/config/compilation.py: "
         "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode (0.25: resolve_cudagraph_mode_and_sizes)"),
    Rule("cudagraph_sizes_stride", V(0, 10, 0), V(0, 11, 1), "8",
         "the capture sizes are 1, 2, 4 and every multiple of 8 up to min(2 × max_num_seqs, 512) "
         "(--cuda-graph-sizes), within max_num_batched_tokens",
         "vllm/config/__init__.py: VllmConfig._set_cudagraph_sizes; vllm/config/scheduler.py: "
         "SchedulerConfig.cuda_graph_sizes (0.10.0: vllm/config.py)"),
    Rule("cudagraph_sizes_stride", V(0, 11, 1), None, "8_then_16",
         "the capture sizes are 1, 2, 4, multiples of 8 below 256 and of 16 from 256 up to the largest "
         "size (max_cudagraph_capture_size)",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes"),
    Rule("cudagraph_mode_default", V(0, 10, 0), V(0, 11, 0), "PIECEWISE",
         "vllm serve captures PIECEWISE graphs only unless --compilation-config asks for FULL ones",
         "vllm/config/__init__.py: VllmConfig.__post_init__ (0.10.0: CompilationConfig.full_cuda_graph)"),
    Rule("cudagraph_mode_default", V(0, 11, 0), None, "FULL_AND_PIECEWISE",
         "vllm serve captures FULL graphs for uniform decode batches and PIECEWISE graphs for the rest",
         "vllm/config/vllm.py: VllmConfig.__post_init__ (0.11.0: vllm/config/__init__.py)"),
    Rule("cudagraph_sizes_max_tokens", V(0, 10, 0), V(0, 20, 1), "no",
         "the capture sizes are the candidate list up to the largest size",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes"),
    Rule("cudagraph_sizes_max_tokens", V(0, 20, 1), None, "yes",
         "max_num_batched_tokens joins the capture sizes when it is within the largest size and off "
         "the candidates' stride",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes"),
    Rule("cudagraph_decode_sizes", V(0, 10, 0), V(0, 29, 0), "no",
         "the capture sizes do not follow the decode batches' widths",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes"),
    Rule("cudagraph_decode_sizes", V(0, 29, 0), V(0, 31, 0), "speculative",
         "with speculative decoding and default sizes, every uniform decode batch width on vLLM's "
         "request stride (1, 2, 4, multiples of 8, of 16 from 256, and max_num_seqs) times "
         "1 + speculative tokens joins the capture sizes",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes (uniform_decode_sizes)"),
    Rule("cudagraph_decode_sizes", V(0, 31, 0), None, "speculative_and_max_num_seqs",
         "as 0.29, and without speculative decoding max_num_seqs itself joins the capture sizes",
         "vllm/config/vllm.py: VllmConfig._set_cudagraph_sizes (uniform_decode_sizes)"),
    Rule("model_runner_default", V(0, 10, 0), V(0, 22, 0), "v1",
         "every model runs on the V1 model runner (GPUModelRunner)",
         "vllm/v1/worker/gpu_worker.py: Worker.init_device"),
    Rule("model_runner_default", V(0, 22, 0), V(0, 23, 0), "v2_qwen3_dense",
         "the V2 model runner (vllm/v1/worker/gpu) by default for Qwen3 dense unquantized checkpoints "
         "only; V1 for the rest",
         "vllm/config/vllm.py: VllmConfig.use_v2_model_runner, _is_default_v2_model_runner_model"),
    Rule("model_runner_default", V(0, 23, 0), V(0, 24, 0), "v2_listed_dense",
         "the V2 model runner (vllm/v1/worker/gpu) by default for Llama, Mistral and Qwen3 dense "
         "unquantized checkpoints; V1 for the rest",
         "vllm/config/vllm.py: VllmConfig.use_v2_model_runner, _is_default_v2_model_runner_model"),
    Rule("model_runner_default", V(0, 24, 0), V(0, 25, 0), "v2_listed",
         "the V2 model runner by default for Llama, Mistral, Qwen3, Qwen2-MoE, DeepSeek-V2 and "
         "Granite-MoE architectures; V1 for the rest",
         "vllm/config/vllm.py: VllmConfig._is_default_v2_model_runner_model"),
    Rule("model_runner_default", V(0, 25, 0), V(0, 29, 0), "v2_dense",
         "the V2 model runner by default for every model without experts or Mamba layers (and the "
         "listed MoE architectures); V1 for MoE and hybrid models",
         "vllm/config/vllm.py: VllmConfig._is_default_v2_model_runner_model"),
    Rule("model_runner_default", V(0, 29, 0), None, "v2",
         "the V2 model runner by default for every model on CUDA, unless the config asks for "
         "something it does not support",
         "vllm/config/vllm.py: VllmConfig.use_v2_model_runner, _get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 10, 0), V(0, 24, 0), "eagle eagle3 mtp",
         "speculative methods the V2 model runner takes (others fall back to V1)",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 24, 0), V(0, 25, 0), "eagle eagle3 mtp dflash",
         "speculative methods the V2 model runner takes (others fall back to V1)",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 25, 0), V(0, 29, 0), "eagle eagle3 mtp dflash dspark",
         "speculative methods the V2 model runner takes (others fall back to V1)",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 29, 0), V(0, 30, 0),
         "eagle eagle3 mtp dflash dspark extract_hidden_states",
         "speculative methods the V2 model runner takes (others fall back to V1)",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 30, 0), V(0, 32, 0),
         "-ngram ngram_gpu draft_model suffix medusa mlp_speculator custom_class",
         "every speculative method but these runs on the V2 model runner",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_speculative", V(0, 32, 0), None, "-suffix medusa mlp_speculator custom_class",
         "every speculative method but these runs on the V2 model runner",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_mamba", V(0, 10, 0), V(0, 25, 0), "align",
         "a hybrid model in mamba cache mode 'align' falls back to the V1 model runner",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_mamba", V(0, 25, 0), V(0, 30, 0), "none",
         "the V2 model runner takes every mamba cache mode",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_mamba", V(0, 30, 0), V(0, 32, 0), "all",
         "a hybrid model in mamba cache mode 'all' falls back to the V1 model runner",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("model_runner_v2_mamba", V(0, 32, 0), None, "none",
         "the V2 model runner takes every mamba cache mode",
         "vllm/config/vllm.py: VllmConfig._get_v2_model_runner_unsupported_features"),
    Rule("cudagraph_v2_rounding", V(0, 10, 0), V(0, 25, 0), "sizes",
         "the V2 model runner rounds the capture sizes for speculative decoding, in every cudagraph mode",
         "vllm/v1/worker/gpu/cudagraph_utils.py: CudaGraphManager.__init__"),
    Rule("cudagraph_v2_rounding", V(0, 25, 0), None, "per_graph",
         "the V2 model runner keeps the capture sizes and rounds each FULL decode graph to whole "
         "requests instead",
         "vllm/config/compilation.py: resolve_cudagraph_mode_and_sizes (use_v2_model_runner); "
         "vllm/v1/worker/gpu/cudagraph_utils.py: CudaGraphManager._init_candidates"),
    Rule("cudagraph_gpt_oss_1024", V(0, 10, 0), V(0, 10, 2), "no",
         "gpt-oss captures CUDA graphs like any model",
         "vllm/model_executor/models/config.py: (no GptOssForCausalLMConfig override)"),
    Rule("cudagraph_gpt_oss_1024", V(0, 10, 2), None, "yes",
         "gpt-oss raises the largest CUDA-graph batch to 1024 (in place of 2 × max_num_seqs and 512) "
         "unless --compilation-config sets the sizes",
         "vllm/model_executor/models/config.py: GptOssForCausalLMConfig.verify_and_update_config"),
)
# fmt: on


# The architectures vLLM runs on its V2 model runner by default, per model_runner_default rule
# (vllm/config/vllm.py: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES; 0.26–0.28 add Inkling, Longcat,
# Kimi-K3 and DeepSeek-V4, none of them servable on a Spark).
V2_RUNNER_ARCHITECTURES: dict[str, frozenset[str]] = {
    "v2_qwen3_dense": frozenset({"Qwen3ForCausalLM"}),
    "v2_listed_dense": frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"}),
    "v2_listed": frozenset(
        {
            "LlamaForCausalLM",
            "MistralForCausalLM",
            "Qwen3ForCausalLM",
            "Qwen2MoeForCausalLM",
            "DeepseekV2ForCausalLM",
            "GraniteMoeForCausalLM",
        }
    ),
    "v2_dense": frozenset({"Qwen2MoeForCausalLM", "DeepseekV2ForCausalLM", "GraniteMoeForCausalLM"}),
}
