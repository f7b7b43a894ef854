"""Run under a real vLLM's Python (never sparktui's): the torch peak of vLLM's profile pass, measured
on vLLM's own model code without a GPU.

For each model: build it with vLLM's own model class on torch's meta device (as
tests/support/vllm_layer_oracle.py does), then, under torch's FakeTensorMode and a dispatch mode that
counts the bytes of every live tensor storage made during the pass (parameters, buffers and the
runner's persistent input buffers excluded), run what the profile run runs
(v1/worker/gpu/model_runner.py GPUModelRunner.profile_run, the V2 runner every model takes at 0.32):
the model's forward over max_num_batched_tokens tokens with no attention metadata (so attention is
skipped, as it is there: `_dummy_run(skip_attn=True)`), then `hidden_states[logits_indices]` (one
row per dummy request, min(tokens, max_num_seqs)) and `compute_logits`, the V2 dummy sampler's only
vocab-sized tensor (its dummy batch needs no logits processing and no top-k / top-p, and
gumbel_sample writes one token per request: gpu/sample/sampler.py Sampler.sample). The forward's
hidden states stay alive through the sampler pass, as in profile_run.

What is not vLLM's own code here, and why:
- CustomOps run their CUDA path (forward_cuda), the one a GB10 runs, not the CPU build's
  forward_cpu; a vLLM custom op (torch.ops._C / vllm / vllm_ir) counts its outputs only, as its
  kernel does. Its fake implementation runs where vLLM registers one; the CPU build's _C ops that
  have none get one that does what the op's CUDA kernel does to memory (writes its `out` argument
  in place, allocates nothing): listed in OUT_PARAM_OPS.
- DeepSeek's rope takes FlashInfer's in-place kernel (vllm::flashinfer_rotary_embedding, a fake that
  allocates nothing), as its __init__ chooses on CUDA with FlashInfer (use_cuda_paths); the CPU
  platform makes it choose forward_native's temporaries.
- Nemotron-H's non-gated experts: FusedMoEConfig.__post_init__ refuses is_act_and_mul=False off
  CUDA / XPU / ROCm; the check runs with is_cuda_alike() answering True, and where none of the CPU
  build's unquantized MoE backends takes the activation, TRITON / TritonExperts (CUDA's fallback) is
  chosen (take_cuda_moe_config).
- Qwen3.5 / 3.6 import qwen3_vl.py, which imports transformers' Qwen2-VL image processor, which needs
  `torchvision.transforms.v2.functional` at import time: the venv has no torchvision (and is shared:
  nothing is installed into it), so a stand-in module holding only that name is put in sys.modules
  after transformers has cached "no torchvision", and vLLM's model-class inspection runs in this
  process instead of its own subprocess (stand_in_torchvision).
- Linears run F.linear (CUDA's default_unquantized_gemm) and attention vLLM's opaque
  unified_attention_with_output op, as on CUDA.
- The fused-MoE layer's experts run as vLLM's `moe_forward` fake (an output the size of the input);
  its workspace, taken by the first MoE layer to run and kept by vLLM's WorkspaceManager, is sized
  by the experts class's own `workspace_shapes` (TritonExperts; bench/moe_workspace_oracle.py).
- Ops with no fake of their own get one from their profile-run branch in vLLM's source
  (register_profile_fakes: the Gated-DeltaNet core, Mamba2's mixer, the gated RMSNorm's kernel).
- The model is built with a few layers: enough to hold one of each layer kind. The forward's peak
  does not grow with depth once every kind has run (one layer's tensors are live at a time, beside
  the residual stream); each answer carries the peak at two depths so the caller can check that
  (DeepSeek's grows: at 4 layers its one MoE layer runs before the workspace exists).
- Quantization is dropped (the weights' format does not change the activations' dtype) and a
  multimodal model is built from its text config.
- The pass runs eagerly, as `--enforce-eager` runs it; a compiled graph frees a tensor after its
  last use, where eager code keeps what a Python variable still names (the decoder loop's inputs
  to the layer, Qwen's gate_up through down_proj), so the default compiled run can hold a few
  hidden-size tensors per token less.
- The V1 runner's sampler pass is measured too (v1_sampler: its top-k / top-p on
  TopKTopPSampler.forward_native, CUDA without FlashInfer's sampler).

At older versions (venvs from bench/setup-oracle-venv; run at 0.13.0 and 0.21.0), what differs:
- torch is PyPI's build of the release vLLM pins (a CUDA build; PyTorch's +cpu builds are not on
  PyPI), so vLLM's compiled CPU ops load; its torch.cuda.device(None) raises with no GPU, where
  vLLM's flash-linear-attention ops enter one: a no-op here (no_cuda_device_guard).
- 0.13's parameters are BasevLLMParameter with a __torch_function__ that FakeTensorMode refuses:
  plain Parameters of the same data stand in (plain_parameters).
- While the model is built, current_platform's device is the build's (meta), as on a GPU, where the
  loader's device and the platform's are both cuda (0.13's DeepSeek rope and Qwen3-Next norm ask it).
- Fused MoE before the MoE runner (0.13): forward_cuda calls fused_experts, which allocates its
  caches inside the op and frees them (no WorkspaceManager): counted as a transient, not held
  (fused_experts_bytes, "moe_workspace_held": false). From 0.21 it is 0.32's path.
- The gated RMSNorm's Triton launch in its older module (model_executor/layers/fla/ops/layernorm_guard.py).
- vLLM IR ops (rms_norm, fused_add_rms_norm; 0.21 dispatches them by the kernel config's priority
  in eager mode, where the CPU platform picks "native", fp32 temporaries): CUDA's eager priority
  ["vllm_c", "native"] (use_cuda_ir_kernels); without it 0.21's Qwen3-30B-A3B forward read 1.24x.
- DeepSeek-V4 (0.32): the CPU build imports models/deepseek_v4/cpu/ (its __init__ picks by
  platform); the NVIDIA class is built instead (nvidia_class), with torch.cuda.Event / Stream
  stand-ins (the CPU torch has dummy classes: "Tried to instantiate dummy base class Event") and a
  GB10's compute capability 12.1 while it is built. It still does not build: its SM120 attention
  (nvidia/flashinfer_sparse.py) checks at __init__ that FlashInfer has the DSV4 sparse MLA decode
  specialization for 64 q heads, top-k 128, and FlashInfer is not in the CPU venv (a CUDA library;
  the venv is shared, nothing is installed into it).
- Drafters (EAGLE-3, DFlash) are built with their target, as vLLM's proposer builds them
  (measure_drafter); alone their classes find no speculative config.
- Not run before 0.32: MLA (the CPU platform refuses it; with CUDA's Triton MLA backend, 0.13's
  needs flash_attn_varlen_func and 0.21's num_compute_units, both CUDA-only), the families the
  version's transformers or vLLM lacks (Qwen3.5 / 3.6, Gemma 4, DeepSeek-V4 at 0.13; Qwen3.5's text
  config at 0.21 asks for vision_config), Nemotron-H (its config is remote code at 0.13; 0.21 checks
  is_act_and_mul elsewhere).
- The V1 sampler's SamplingMetadata takes the fields that version has. The runner whose sampler pass
  the fit compares (V1 or V2) is the fit's choice at that version; both passes are measured.
- V1 sampler on the Triton path (v1_sampler_triton): apply_top_k_top_p takes it on a GPU from 0.17
  (batch >= 8 to 0.21; always at 0.32). From 0.21 (VLLM_USE_FLASHINFER_SAMPLER defaults on) a CUDA
  GPU FlashInfer supports runs FlashInfer's sampler instead: not measured (no FlashInfer here).

Reads JSON on stdin: {"tokens": N, "seqs": S, "models": [{"name", "config"}]}. Prints, marked, a
list of {"name", "layers": [n1, n2], "forward": [peak1, peak2], "sampler": [...], "logits",
"moe_workspace", "v1_sampler", "seconds", ...} or {"name", "error"}.
"""

import contextlib
import json
import math
import os
import sys
import tempfile
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_layer_oracle import StandInStream, text_only

ANSWER_MARK = "SPARKTUI-ACTIVATION-ORACLE "
GB10_SMS = 48  # the Triton top-k / top-p kernel sizes its buffer by the GPU's SM count (a GB10 has 48)

# The CPU build's compiled ops (csrc/cpu/torch_bindings.cpp) that write an `out` tensor in place
# and allocate nothing (csrc/*: the CUDA kernels of the same schema do the same)
OUT_PARAM_OPS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "mul_and_silu", "gelu_new", "gelu_fast",
                 "gelu_quick", "rms_norm", "fused_add_rms_norm", "rotary_embedding")  # fmt: skip


def register_fakes():
    """A fake for each out-parameter op the CPU build has without one (where vLLM has one, it stays)."""
    import torch
    import vllm._custom_ops  # noqa: F401  (loads the compiled ops)

    added = []
    for name in OUT_PARAM_OPS:
        packet = getattr(torch.ops._C, name, None)
        if packet is None:
            continue
        qualname = f"_C::{name}"
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
            continue
        try:
            torch.library.register_fake(qualname)(lambda *args, **kwargs: None)
            added.append(name)
        except Exception:  # already has a fake (a Python one)
            pass
    return added


COUNTER = None  # the LiveBytes of the pass being measured (fakes below report their transients to it)


def register_profile_fakes():
    """Fakes for vLLM's custom ops that have none, doing to memory what the op does in a profile run
    (no attention metadata), from vLLM 0.32's source:
    - vllm::qwen_gdn_attention_core, qwen_gdn_attention_core_fused_norm_packed
      (layers/mamba/gdn/qwen_gdn_linear_attn.py _forward_core and friends): with no metadata they run
      _warmup_prefill_kernels on 64 dummy tokens and return; their outputs were allocated by the caller.
    - vllm::mamba_mixer2 (layers/mamba/mamba_mixer2.py conv_ssm_forward): with no metadata it warms up
      the SSD kernels on one chunk and clones hidden_states_B_C (tokens x conv_dim) before returning:
      that clone is a transient inside the op, counted here as the projection's width less the SSM
      output's (conv_dim + the dt heads, a few hundred bytes a token more than the clone)."""
    import importlib

    import torch

    for module in ("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
                   "vllm.model_executor.layers.mamba.mamba_mixer2"):  # fmt: skip
        try:  # the ops are registered when their modules are imported
            importlib.import_module(module)
        except Exception as exc:
            print(f"{module} does not import here: {exc}", file=sys.stderr)
    added = []

    def nothing(*args, **kwargs):
        return None

    try:  # the gated RMSNorm's Triton kernel (third_party/flash_linear_attention/ops/layernorm_guard.py
        # layer_norm_fwd allocates out, mean and rstd, then the kernel writes them): a kernel that writes
        from vllm.third_party.flash_linear_attention.ops import layernorm_guard

        layernorm_guard._LAYER_NORM_FWD_KERNEL = nothing
        added.append("layernorm_guard._LAYER_NORM_FWD_KERNEL")
    except Exception as exc:
        print(f"layernorm_guard not patched: {exc}", file=sys.stderr)
    try:  # the same function before 0.2x (model_executor/layers/fla/ops/layernorm_guard.py layer_norm_fwd):
        # it allocates out, mean and rstd as above, then launches `layer_norm_fwd_kernel[grid]`; with no
        # Triton here its helpers stand in (the block size, rows per block: launch parameters only)
        import types

        from vllm.model_executor.layers.fla.ops import layernorm_guard as old_guard

        class Launch:
            def __getitem__(self, grid):
                return nothing

        old_guard.layer_norm_fwd_kernel = Launch()
        old_guard.triton = types.SimpleNamespace(next_power_of_2=lambda n: 1 << (int(n) - 1).bit_length())
        old_guard.calc_rows_per_block = lambda *args, **kwargs: 1
        added.append("fla layernorm_guard.layer_norm_fwd_kernel")
    except Exception as exc:
        print(f"fla layernorm_guard not patched: {exc}", file=sys.stderr)

    def mamba_mixer2(projected_states, output, *args, **kwargs):
        if COUNTER is not None:
            width = projected_states.shape[-1] - output.shape[-1]
            COUNTER.transient(projected_states.shape[0] * width * projected_states.element_size())
        return None

    try:  # FlashInfer's in-place rope (rotary_embedding/common.py, mutates_args query and key): registered
        # without a fake; like the kernel, it allocates nothing
        import vllm.model_executor.layers.rotary_embedding.common  # noqa: F401
    except Exception as exc:
        print(f"rotary_embedding.common does not import here: {exc}", file=sys.stderr)
    for name, fake in (("flashinfer_rotary_embedding", nothing), ("qwen_gdn_attention_core", nothing), ("qwen_gdn_attention_core_fused_norm_packed", nothing),
                       ("mamba_mixer2", mamba_mixer2)):  # fmt: skip
        if getattr(torch.ops.vllm, name, None) is None:
            continue
        try:
            torch.library.register_fake(f"vllm::{name}")(fake)
            added.append(name)
        except Exception as exc:  # vLLM has one: keep it
            print(f"fake for vllm::{name} not added: {exc}", file=sys.stderr)
    return added


def stand_in_torchvision():
    """A stand-in `torchvision` (the CI venv has none, and the shared venv is not ours to install into):
    vLLM 0.32's qwen3_5.py imports qwen3_vl.py, which imports transformers' Qwen2-VL image processor,
    whose module does `from torchvision.transforms.v2 import functional` at import time; that one name
    is all it touches while importing (its uses are in image preprocessing, which a text-only forward
    never runs). transformers is imported first and asked is_torchvision_available() (lru-cached, False
    without the package), so it keeps its no-torchvision paths everywhere else. vLLM inspects a model
    class in a subprocess of its own (models/registry.py _run_in_subprocess), which would not see the
    stand-in: it runs in this process instead (nothing here touches a GPU, which is why vLLM uses one)."""
    import importlib.machinery
    import itertools
    import types

    from transformers.utils import import_utils

    if import_utils.is_torchvision_available():
        return []
    names = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2",
             "torchvision.transforms.v2.functional")  # fmt: skip
    for name in names:
        module = types.ModuleType(name, "sparktui's activation oracle: a stand-in, not torchvision")
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.setdefault(name, module)
    for parent, child in itertools.pairwise(names):
        setattr(sys.modules[parent], child.rsplit(".", 1)[1], sys.modules[child])
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()
    return ["torchvision (stand-in)"]


def take_cuda_moe_config():
    """Nemotron-H's experts are not gated (relu2, is_act_and_mul False), which vLLM 0.32's
    FusedMoEConfig.__post_init__ (layers/fused_moe/config.py) refuses unless
    current_platform.is_cuda_alike() or is_xpu(): while that check runs, the platform it reads is the
    CPU one with is_cuda_alike() answering True, so the CUDA branch (no error) is taken; nothing else in
    __post_init__ reads the platform."""
    from vllm.model_executor.layers.fused_moe import config as moe_config

    if not hasattr(moe_config.FusedMoEConfig, "__post_init__") or not hasattr(moe_config, "current_platform"):
        return []  # an older vLLM without the check
    original, platform = moe_config.FusedMoEConfig.__post_init__, moe_config.current_platform

    class CudaAlike:
        def __getattr__(self, name):
            return getattr(platform, name)

        def is_cuda_alike(self):
            return True

    def post_init(self):
        moe_config.current_platform = CudaAlike()
        try:
            original(self)
        finally:
            moe_config.current_platform = platform

    moe_config.FusedMoEConfig.__post_init__ = post_init
    # Then UnquantizedFusedMoEMethod.__init__ picks its experts (fused_moe/oracle/unquantized.py
    # select_unquantized_moe_backend): none of the CPU build's backends takes a non-gated activation,
    # so where they all refuse, the one CUDA falls back to is taken: TRITON with TritonExperts (the
    # class whose workspace_shapes size the workspace here; its forward never runs, moe_forward's fake does)
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method

    try:  # 0.2x: the experts are chosen by an oracle of vLLM's own; before, forward_cuda called fused_experts
        from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
        from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

        select = method.select_unquantized_moe_backend
    except (ImportError, AttributeError):
        return ["FusedMoEConfig.__post_init__ (CUDA's is_act_and_mul=False branch)"]

    def select_or_triton(moe_config):
        try:
            return select(moe_config)
        except NotImplementedError:
            return UnquantizedMoeBackend.TRITON, TritonExperts

    method.select_unquantized_moe_backend = select_or_triton
    return ["FusedMoEConfig.__post_init__ (CUDA's is_act_and_mul=False branch)",
            "select_unquantized_moe_backend (TRITON where no CPU backend takes the activation)"]  # fmt: skip


@contextlib.contextmanager
def platform_device_is_meta():
    """While the model is built, the platform's device is the build's device, as on a GPU (the loader
    builds under `torch.device("cuda")` and current_platform.device_type is "cuda"): vLLM 0.13's
    DeepseekScalingRotaryEmbedding._compute_inv_freq puts one tensor on current_platform.device_type
    and the next on the default device, which here would be cpu and meta."""
    import torch
    from vllm.platforms import current_platform

    meta = {"device_type": "meta", "current_device": lambda: torch.device("meta")}  # 0.13's Qwen3-Next asks
    saved = {name: vars(current_platform)[name] for name in meta if name in vars(current_platform)}
    for name, value in meta.items():
        setattr(current_platform, name, value)
    try:
        yield
    finally:
        for name in meta:
            if name in saved:
                setattr(current_platform, name, saved[name])
            else:
                delattr(current_platform, name)


def no_cuda_device_guard():
    """The older venvs hold PyPI's torch (a CUDA build: PyTorch's +cpu builds are not on PyPI), whose
    torch.cuda.device(None) asks the CUDA runtime and raises on a machine with no GPU; vLLM's
    flash-linear-attention ops enter one around each call (fla/ops/utils.py input_guard). The CPU build
    of torch treats it as no device: so does this (nothing here runs on a GPU)."""
    import torch

    if not torch.cuda.is_available():
        torch.cuda._exchange_device = lambda device: -1
        torch.cuda._maybe_exchange_device = lambda device: -1
        return ["torch.cuda.device (no GPU: a no-op)"]
    return []


def nvidia_class(cls):
    """DeepSeek-V4's classes are per platform (models/deepseek_v4/__init__.py imports cpu/, nvidia/,
    amd/ or xpu/ by current_platform): the NVIDIA one a GB10 runs, in place of the CPU build's."""
    module = getattr(cls, "__module__", "")
    if ".deepseek_v4.cpu." not in module:
        return cls
    import importlib

    nvidia = importlib.import_module(module.replace(".cpu.", ".nvidia."))
    return getattr(nvidia, cls.__name__, cls)


class NoCudaEvent:
    """torch.cuda.Event / Stream where the CPU build of torch has only dummy classes: DeepSeek-V4's
    attention makes events and an aux stream in __init__ to overlap its norms; none of them holds memory."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def stand_in_cuda_events():
    import torch
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    saved = torch.cuda.Event, torch.cuda.Stream
    torch.cuda.Event = torch.cuda.Stream = NoCudaEvent
    # and a GB10's compute capability (12.1), which V4's attention reads to pick its kernels
    had = "get_device_capability" in vars(current_platform)
    current_platform.get_device_capability = lambda *args, **kwargs: DeviceCapability(12, 1)
    try:
        yield
    finally:
        torch.cuda.Event, torch.cuda.Stream = saved
        if not had:
            del current_platform.get_device_capability


def prefix_with_every_kind(kinds):
    """How many leading layers hold one of each kind (at least 2)."""
    seen, need = set(), 2
    for i, kind in enumerate(kinds):
        if kind not in seen:
            seen.add(kind)
            need = max(need, i + 1)
    return need


def shallow(config, extra_periods):
    """The config with its first layers only: one of each layer kind, plus extra_periods repeats of
    that prefix (so two depths can be compared)."""
    config = dict(config)
    total = config.get("num_hidden_layers") or 2
    kinds = config.get("layer_types")
    pattern = config.get("hybrid_override_pattern")
    if isinstance(kinds, list) and kinds:
        period = prefix_with_every_kind(kinds)
    elif isinstance(pattern, str) and pattern:
        period = prefix_with_every_kind(list(pattern))
    elif config.get("sliding_window_pattern"):
        period = int(config["sliding_window_pattern"])
    elif config.get("full_attention_interval"):
        period = int(config["full_attention_interval"])
    else:
        period = 2
    for dense_key in ("first_k_dense_replace",):  # DeepSeek-style leading dense layers
        if config.get(dense_key):
            period = max(period, int(config[dense_key]) + 1)
    if isinstance(config.get("mlp_layer_types"), list):  # Laguna: its first experts layer too
        period = max(period, prefix_with_every_kind(config["mlp_layer_types"]))
    n = min(total, period * (1 + extra_periods))
    config["num_hidden_layers"] = n
    if isinstance(kinds, list):
        config["layer_types"] = kinds[:n]
    for per_layer in ("mlp_layer_types", "num_attention_heads_per_layer"):  # Laguna's per-layer lists
        if isinstance(config.get(per_layer), list):
            config[per_layer] = config[per_layer][:n]
    if isinstance(pattern, str):
        config["hybrid_override_pattern"] = pattern[:n]
    return config, n


class LiveBytes:
    """A TorchDispatchMode that counts the bytes of live tensor storages made under it."""

    def __init__(self, ignore):
        from torch.utils._python_dispatch import TorchDispatchMode

        owner = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                owner.saw(out, func)
                return out

        self.mode = Mode()
        self.ignore = set(ignore)
        self.live = {}
        self.now = self.peak = 0
        self.peak_op = ""
        self.at_peak = []

    def saw(self, out, func):
        import torch
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.hold(t, str(func))

    def hold(self, t, why="held"):
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.ignore:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0, why]
            self.now += entry[0]
            if self.now > self.peak:
                self.peak, self.peak_op = self.now, why
                self.at_peak = sorted(((e[0], e[2]) for e in self.live.values()), reverse=True)[:16]
        entry[1] += 1
        weakref.finalize(t, self.drop, key)

    def drop(self, key):
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.now -= entry[0]
            del self.live[key]

    def transient(self, nbytes):
        """Bytes an op holds only while it runs (inside a custom op, unseen by the dispatch mode)."""
        if self.now + nbytes > self.peak:
            self.peak, self.peak_op = self.now + nbytes, "transient"

    def reset_peak(self):
        self.peak = self.now


def storages_of(*tensors):
    return {t.untyped_storage()._cdata for t in tensors}


def fused_experts_bytes(module, tokens, dtype_bytes):
    """What an older vLLM's unquantized fused-MoE allocates inside the op on CUDA, freed when it
    returns (vLLM 0.13 unquantized_fused_moe_method.py forward_cuda calls fused_experts, no modular
    kernel and no WorkspaceManager): fused_moe.py fused_experts_impl's cache13 (M x topk x max(N, K),
    cache1 and cache3 share it) and intermediate_cache2 (M x topk x N / 2), M = min(tokens,
    VLLM_FUSED_MOE_CHUNK_SIZE), N and K from the layer's w13 / w2; plus select_experts' topk_weights
    (fp32) and topk_ids (int32). Its output is a new tensor (disable_inplace() with torch >= 2.9), which
    moe_forward's fake allocates. moe_align_block_size's sorted ids (int32, M x topk + experts x block)
    are not counted."""
    import vllm.envs as envs

    n, k = module.w13_weight.shape[-2], module.w2_weight.shape[-2]
    topk = module.top_k
    m = min(tokens, envs.VLLM_FUSED_MOE_CHUNK_SIZE)
    return (m * topk * max(n, k) + m * topk * (n // 2)) * dtype_bytes + tokens * topk * 8


def moe_workspace_bytes(hf_text, tokens, dtype_bytes):
    """vLLM's fused-MoE workspace for `tokens` (fused_moe/modular_kernel.py _allocate_buffers:
    max(workspace13, output) + workspace2 of the experts' workspace_shapes; TritonExperts)."""
    from types import SimpleNamespace

    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    inter = hf_text.get("moe_intermediate_size") or hf_text.get("intermediate_size")
    topk = (
        hf_text.get("num_experts_per_tok")
        or hf_text.get("experts_per_token")
        or hf_text.get("top_k_experts")
        or hf_text.get("num_experts_per_token")  # Kimi-Linear
    )
    gated = hf_text.get("model_type") != "nemotron_h"
    act = MoEActivation.SILU if gated else MoEActivation.RELU2_NO_MUL
    dummy = SimpleNamespace(adjust_N_for_activation=mk.FusedMoEExpertsModular.adjust_N_for_activation)
    n = inter * (2 if gated else 1)
    ws13, ws2, output = TritonExperts.workspace_shapes(dummy, tokens, n, hf_text["hidden_size"], topk, 8, 8, None, act)
    return (max(math.prod(ws13), math.prod(output)) + math.prod(ws2)) * dtype_bytes


def use_cuda_paths(model):
    """Each CustomOp runs forward_cuda (what a GB10 runs) where its class has one of its own, with
    the compiled op its __init__ takes on CUDA (`self.op`, torch.ops._C.<its name>)."""
    import torch
    from vllm.model_executor.custom_op import CustomOp

    for module in model.modules():
        if isinstance(module, CustomOp) and "forward_cuda" in {
            k for cls in type(module).__mro__ if cls is not CustomOp for k in vars(cls)
        }:
            module._forward_method = module.forward_cuda
            name = getattr(type(module), "name", None)
            if not hasattr(module, "op") and name and getattr(torch.ops._C, name, None) is not None:
                module.op = getattr(torch.ops._C, name)
        if type(module).__name__ == "DeepseekScalingRotaryEmbedding" and not module.use_flashinfer:
            # its __init__ (rotary_embedding/deepseek_scaling_rope.py) takes FlashInfer's in-place rope
            # when enabled, fp16 / bf16, current_platform.is_cuda(), has_flashinfer() and a head size of
            # 64 / 128 / 256 / 512: all true for DeepSeek's 64-dim rope on a GB10 but the platform here.
            # forward_cuda then calls vllm::flashinfer_rotary_embedding (mutates q and k, allocates
            # nothing) instead of forward_native's temporaries (its cos / sin, two products and a
            # stack per q and k)
            module.use_flashinfer = (
                module.enabled()
                and module.dtype in (torch.float16, torch.bfloat16)
                and (module.head_size in (64, 128, 256, 512))
            )


def plain_parameters(model):
    """vLLM's parameter classes as plain torch Parameters where theirs intercept torch functions (0.13's
    BasevLLMParameter.__torch_function__, which FakeTensorMode refuses as an unknown tensor subclass):
    same meta data, same attributes, so the forward runs the same ops; the weights are not counted."""
    import torch

    base = (torch.nn.Parameter, torch.Tensor, torch._C.TensorBase, object)
    changed = 0
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or not any("__torch_function__" in vars(c) for c in type(p).__mro__ if c not in base):
                continue
            plain = torch.nn.Parameter(p.data, requires_grad=False)
            plain.__dict__.update(p.__dict__)
            module._parameters[name] = plain
            changed += 1
    return changed


def use_cuda_ir_kernels(vllm_config):
    """vLLM IR ops (rms_norm, fused_add_rms_norm, from 0.2x) dispatch by the kernel config's priority,
    which the platform sets: CUDA without Inductor (eager, as here) takes ["vllm_c", "native"]
    (platforms/cuda.py get_default_ir_op_priority), the CPU platform ["native"] (fp32 temporaries in
    Python). The CUDA priority is set, and the vllm_c implementations (kernels/vllm_c.py: the output,
    then the _C kernel; registered `supported=is_cuda_alike()`) marked supported. Returns the ops set."""
    import dataclasses

    priority = getattr(getattr(vllm_config, "kernel_config", None), "ir_op_priority", None)
    if priority is None or not dataclasses.is_dataclass(priority):
        return []
    from vllm import ir

    try:
        import vllm.kernels  # noqa: F401  (registers the providers)
    except Exception as exc:
        print(f"vllm.kernels does not import here: {exc}", file=sys.stderr)
    done = []
    for field in dataclasses.fields(priority):
        op = getattr(ir.ops, field.name, None)
        impl = getattr(op, "impls", {}).get("vllm_c")
        if impl is None:
            continue
        impl.supported = True
        setattr(priority, field.name, ["vllm_c", "native"])
        done.append(field.name)
    return done


def use_cuda_gemm(model):
    """Unquantized linears run F.linear, CUDA's default_unquantized_gemm (the CPU build's needs
    weights packed after loading)."""
    import torch
    from vllm.model_executor.layers import utils as layer_utils

    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if method is None:
            continue
        if hasattr(method, "_gemm_impl"):
            method._gemm_impl = layer_utils.default_unquantized_gemm
        module.cpu_linear = torch.nn.functional.linear  # what cpu_unquantized_gemm calls (the lm head's path)


WORKSPACE = []  # the WorkspaceManager's buffer of the pass being measured, once the first MoE layer took it


def use_fused_experts_transient(model, dtype_bytes):
    """An older vLLM (no MoE runner): FusedMoE.forward_cuda -> forward_native -> torch.ops.vllm.moe_forward,
    whose registered fake makes the output; the caches fused_experts_impl allocates and frees inside
    the op are counted as a transient at that moment (the layer's input, router logits and output live),
    and nothing is held afterwards. Returns the largest such transient."""
    largest = [0]
    try:
        from vllm.model_executor.layers.fused_moe.layer import FusedMoE
    except ImportError:  # vLLM with a MoE runner (moved): use_cuda_moe_entry's path
        return largest
    for module in model.modules():
        if not isinstance(module, FusedMoE) or hasattr(module, "_forward_entry"):
            continue
        inner = module._forward_method

        def run(hidden_states, router_logits, *args, _inner=inner, _module=module, **kwargs):
            out = _inner(hidden_states, router_logits, *args, **kwargs)
            nbytes = fused_experts_bytes(_module, hidden_states.shape[0], dtype_bytes)
            largest[0] = max(largest[0], nbytes)
            if COUNTER is not None:
                COUNTER.transient(nbytes)
            return out

        module._forward_method = run
    return largest


def use_cuda_moe_entry(model, workspace):
    """Each fused-MoE runner calls vLLM's moe_forward custom op, as on CUDA (moe_runner.py
    _select_forward; the CPU build calls the experts directly), so its registered fake runs. The first
    one to run takes the fused-MoE workspace (`workspace` bytes), which vLLM's WorkspaceManager keeps
    from then on (v1/worker/workspace.py; fused_moe/modular_kernel.py _allocate_buffers): layers before
    it (DeepSeek's leading dense layers) run without it."""
    import torch

    for module in model.modules():
        if hasattr(module, "_forward_entry") and hasattr(module, "_select_forward"):
            shared = getattr(module, "_shared_experts", None) is not None
            op = torch.ops.vllm.moe_forward_shared if shared else torch.ops.vllm.moe_forward

            def entry(*args, _op=op, **kwargs):
                if workspace and not WORKSPACE:
                    WORKSPACE.append(torch.empty(workspace, dtype=torch.uint8, device=args[0].device))
                return _op(*args, **kwargs)

            module._forward_entry = entry


def v1_sampler(logits, triton=False):
    """The V1 runner's dummy sampler pass (gpu_model_runner.py GPUModelRunner._dummy_sampler_run:
    temperature 0.5, top-p 0.9, top-k vocab - 1, no penalties), top-k / top-p in
    TopKTopPSampler.forward_native (CUDA without FlashInfer's sampler). With `triton`, the branch a GPU
    with Triton takes from 0.17 on (topk_topp_sampler.py apply_top_k_top_p: `if HAS_TRITON and
    logits.shape[0] >= 8` to 0.21, `if HAS_TRITON` at 0.32): apply_top_k_top_p_triton as vLLM wrote it
    (its buffer of min(next_power_of_2(batch), SMs) x vocab fp32, cached), a GB10's 48 SMs, the
    Triton kernels themselves stubbed (they mask the logits in place and allocate nothing). Returns
    None where this vLLM has no Triton branch."""
    import dataclasses

    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.ops import topk_topp_sampler
    from vllm.v1.sample.sampler import Sampler

    num_reqs = logits.size(0)

    def dummy(v):
        return torch.full((num_reqs,), v, device=logits.device)

    fields = {f.name for f in dataclasses.fields(SamplingMetadata)}
    metadata = SamplingMetadata(**{k: v for k, v in dict(
        temperature=dummy(0.5), all_greedy=False, all_random=False, top_p=dummy(0.9), top_k=dummy(logits.size(1) - 1),
        generators={}, max_num_logprobs=None, logprob_token_ids=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=dummy(0.1), presence_penalties=dummy(0.1), repetition_penalties=dummy(0.1),
        output_token_ids=[[] for _ in range(num_reqs)], spec_token_ids=[[] for _ in range(num_reqs)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
    ).items() if k in fields})  # fmt: skip
    sampler = Sampler()
    sampler.topk_topp_sampler.forward = sampler.topk_topp_sampler.forward_native
    sampler.greedy_sample = lambda logits: logits.argmax(dim=-1).view(-1)  # its CUDA path (the CPU's is _C)
    if not triton:
        return sampler(logits=logits, sampling_metadata=metadata)
    import inspect

    if "HAS_TRITON" not in inspect.getsource(topk_topp_sampler.apply_top_k_top_p):
        return None
    from vllm.v1.sample.ops import topk_topp_triton as kernels

    def nothing(*args, **kwargs):
        return None

    class Launch:  # `kernel[grid](...)`
        def __getitem__(self, grid):
            return nothing

    saved = {name: getattr(kernels, name) for name in ("num_compute_units", "_topk_topp", "_topk_topp_kernel")
             if hasattr(kernels, name)}  # fmt: skip
    has_triton = topk_topp_sampler.HAS_TRITON
    try:
        kernels.num_compute_units = lambda *args, **kwargs: GB10_SMS
        if "_topk_topp" in saved:  # 0.32: a launcher that runs the kernel
            kernels._topk_topp = nothing
        if "_topk_topp_kernel" in saved:
            kernels._topk_topp_kernel = Launch()
        for cache in ("_TRITON_BUFFER_CACHE", "_TRITON_TABLE_CACHE", "_TRITON_SPLIT_CACHE"):
            getattr(kernels, cache, {}).clear()  # a fake buffer from another model must not be reused
        # its two lookup tables (logits.new_tensor(list): a few hundred floats) are made from Python lists,
        # which FakeTensorMode cannot copy: tensors of their size stand in
        kernels._TRITON_TABLE_CACHE[logits.device] = (
            logits.new_zeros(len(kernels._NORMAL_CDF_TO_SIGMA_TABLE)),
            logits.new_zeros(len(kernels._PERCENTILE_TO_STD_TABLE)),
        )
        topk_topp_sampler.HAS_TRITON = True
        topk_topp_sampler.apply_top_k_top_p_triton = kernels.apply_top_k_top_p_triton
        return sampler(logits=logits, sampling_metadata=metadata)
    finally:
        topk_topp_sampler.HAS_TRITON = has_triton
        for name, value in saved.items():
            setattr(kernels, name, value)


def use_opaque_attention(model):
    """Attention runs as vLLM's opaque custom ops (unified_attention_with_output), as CUDA has it
    (platform opaque_attention_op); with no attention metadata their fakes, like the kernels in a
    profile run, write nothing new."""
    for module in model.modules():
        if hasattr(module, "use_direct_call"):
            module.use_direct_call = False


def measure(name, config, tokens, seqs, workdir, extra_periods):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.torch_utils import set_default_torch_dtype

    text, n = shallow(text_only(config), extra_periods)
    folder = Path(workdir) / f"{name.replace('/', '--')}-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(text))
    args = EngineArgs(
        model=str(folder), skip_tokenizer_init=True, max_model_len=max(tokens, 4096), enforce_eager=True,
        load_format="dummy", max_num_batched_tokens=tokens, max_num_seqs=seqs, compilation_config={"mode": 0},
        # the profile pass caches no prefix; left on, Kimi-Linear's config fails here: its Mamba cache mode
        # 'align' sets --mamba-block-size, then the CPU platform turns prefix caching off
        enable_prefix_caching=False,
    )  # fmt: skip
    vllm_config = args.create_engine_config()
    use_cuda_ir_kernels(vllm_config)
    cls, _ = get_model_architecture(vllm_config.model_config)
    nvidia = nvidia_class(cls)
    # DeepSeek-V4's NVIDIA classes make CUDA events and read the compute capability while built
    built_as_on_gb10 = stand_in_cuda_events() if nvidia is not cls else contextlib.nullcontext()
    cls = nvidia
    # the model loader's order (model_loader/base_loader.py load_model): the dtype, then the device
    dtype_default = set_default_torch_dtype(vllm_config.model_config.dtype)
    with set_current_vllm_config(vllm_config), dtype_default, torch.device("meta"), platform_device_is_meta():
        # Kimi-Linear makes an aux CUDA stream while built (vllm_layer_oracle.StandInStream)
        cuda_stream, torch.cuda.Stream = torch.cuda.Stream, StandInStream
        try:
            with built_as_on_gb10:
                model = cls(vllm_config=vllm_config, prefix="")
        finally:
            torch.cuda.Stream = cuda_stream
        use_cuda_paths(model)  # CustomOp.enabled() reads the config
    plain_parameters(model)
    use_cuda_gemm(model)
    dtype = vllm_config.model_config.dtype
    dtype_bytes = torch.finfo(dtype).bits // 8
    moe = any(hasattr(m, "_select_forward") for m in model.modules())  # a fused-MoE runner (0.2x on)
    workspace = moe_workspace_bytes(text, tokens, dtype_bytes) if moe else 0
    use_cuda_moe_entry(model, workspace)
    # an older vLLM (no MoE runner): fused_experts' caches, a transient inside the op
    fused_transient = [0] if moe else use_fused_experts_transient(model, dtype_bytes)
    use_opaque_attention(model)
    hidden_size = text["hidden_size"]

    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with torch.inference_mode(), set_current_vllm_config(vllm_config), fake:
        input_ids = torch.zeros(tokens, dtype=torch.long, device="meta")
        positions = torch.zeros(tokens, dtype=torch.long, device="meta")
        # one sampled position per dummy request (the last token of each): gpu/input_batch logits_indices
        logits_indices = torch.zeros(min(tokens, seqs), dtype=torch.long, device="meta")
        # FakeTensorMode turns each meta parameter into a fake tensor of its own on first use (and keeps
        # it): convert them all now, so their storages are known as the weights', not activations
        weights = [fake.from_tensor(t) for t in [*model.parameters(), *model.buffers()]]
        kept = [*model.parameters(), *model.buffers(), *weights, input_ids, positions, logits_indices]
        counter = LiveBytes(storages_of(*kept))
        global COUNTER
        COUNTER = counter
        with set_forward_context(None, vllm_config, num_tokens=tokens), counter.mode:
            WORKSPACE.clear()
            hidden = model(input_ids=input_ids, positions=positions)
            if isinstance(hidden, tuple):
                hidden = hidden[0]
            forward = counter.peak
            forward_live = counter.at_peak
            counter.reset_peak()
            sample_hidden = hidden[logits_indices]
            logits = model.compute_logits(sample_hidden)
            sampler = counter.peak
            v1 = v1_triton = v1_error = None
            try:  # the V1 runner's sampler pass, on the same hidden states (rand_like, then the logits)
                counter.reset_peak()
                before = counter.now
                v1_logits = model.compute_logits(torch.rand_like(sample_hidden))
                out = v1_sampler(v1_logits)
                v1 = counter.peak - before
                del out, v1_logits
                counter.reset_peak()
                before = counter.now
                v1_logits = model.compute_logits(torch.rand_like(sample_hidden))
                out = v1_sampler(v1_logits, triton=True)
                v1_triton = None if out is None else counter.peak - before
                del out, v1_logits
            except Exception as exc:
                v1_error = f"{type(exc).__name__}: {str(exc)[:200]}"
        logits_bytes = logits.untyped_storage().nbytes()
        WORKSPACE.clear()  # kept alive to here, as vLLM's manager keeps it
    return {
        "layers": n, "forward": forward, "sampler": sampler, "logits": logits_bytes,
        "moe_workspace": workspace or fused_transient[0], "moe_workspace_held": bool(workspace),
        "v1_sampler_triton": v1_triton,
        "hidden_bytes": tokens * hidden_size * (torch.finfo(dtype).bits // 8), "peak_op": counter.peak_op, "forward_live": forward_live, "sampler_live": counter.at_peak,
        "dtype": str(dtype), "v1_sampler": v1, "v1_error": v1_error,
    }  # fmt: skip


def measure_drafter(item, tokens, seqs, workdir):
    """A drafter built as vLLM's proposer builds it, and its dummy pass (the drafter cannot be built
    alone: EAGLE-3 and DFlash classes read vllm_config.speculative_config.draft_model_config, None for
    a model served alone, hence the bare AssertionError / AttributeError). The target's config (a few
    layers: only its config is read) and the speculative config go to EngineArgs, as `vllm serve`
    takes them; the drafter's class is the draft model config's architecture, built with the target's
    VllmConfig (model_executor/model_loader get_model(vllm_config, model_config=draft_model_config),
    as llm_base_proposer.py _get_model calls it). vLLM's check that the V2 runner has Triton
    (config/vllm.py) sees Triton, as a GPU has it. The pass (v1/spec_decode):
    - DFlash (dflash.py DFlashProposer.dummy_run): precompute_and_store_context_kv over `tokens`
      context states (the proposer's persistent hidden-state buffer, not counted), then the forward
      over min(tokens, max_query_tokens) query tokens, max_num_seqs x (1 + speculative tokens);
    - EAGLE / EAGLE-3 / MTP (llm_base_proposer.py dummy_run): the forward over `tokens` tokens with
      the proposer's hidden-state buffer.
    Returns the drafter's own peak beyond what the runner holds."""
    import vllm.config.vllm as config_module
    from vllm.engine.arg_utils import EngineArgs

    target = item["target"]
    text, _ = shallow(text_only(target["config"]), 0)
    base = Path(workdir) / f"draft-{item['name'].replace('/', '--')}"
    (base / "target").mkdir(parents=True, exist_ok=True)
    (base / "drafter").mkdir(parents=True, exist_ok=True)
    (base / "target" / "config.json").write_text(json.dumps(text))
    (base / "drafter" / "config.json").write_text(json.dumps(item["config"]))
    k = int(item.get("num_speculative_tokens", 3))
    speculative = {"method": item["method"], "model": str(base / "drafter"), "num_speculative_tokens": k}
    args = EngineArgs(
        model=str(base / "target"), skip_tokenizer_init=True, max_model_len=max(tokens, 4096), enforce_eager=True,
        load_format="dummy", max_num_batched_tokens=tokens, max_num_seqs=seqs, compilation_config={"mode": 0},
        speculative_config=speculative,
    )  # fmt: skip
    had_triton = getattr(config_module, "HAS_TRITON", None)
    if had_triton is not None:
        config_module.HAS_TRITON = True
    try:
        return run_drafter(item, args, tokens, seqs, k)
    finally:
        if had_triton is not None:
            config_module.HAS_TRITON = had_triton


def run_drafter(item, args, tokens, seqs, k):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.torch_utils import set_default_torch_dtype

    vllm_config = args.create_engine_config()
    use_cuda_ir_kernels(vllm_config)
    draft_config = vllm_config.speculative_config.draft_model_config
    cls, _ = get_model_architecture(draft_config)
    dtype_default = set_default_torch_dtype(draft_config.dtype)
    with set_current_vllm_config(vllm_config), dtype_default, torch.device("meta"), platform_device_is_meta():
        model = cls(vllm_config=vllm_config, prefix="")
        use_cuda_paths(model)
    plain_parameters(model)
    use_cuda_gemm(model)
    if any(hasattr(m, "_select_forward") for m in model.modules()):  # an MTP drafter's MoE layer
        use_cuda_moe_entry(model, 0)  # the workspace is the target's, made by its forward: not the drafter's
    use_opaque_attention(model)
    inner = getattr(model, "model", model)
    if hasattr(inner, "_build_fused_kv_buffers"):  # what loading the weights does (qwen3_dflash.py load_weights)
        inner._build_fused_kv_buffers()
    hidden = draft_config.get_hidden_size()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with torch.inference_mode(), set_current_vllm_config(vllm_config), fake:
        # the proposer's persistent buffers (llm_base_proposer.py __init__): not the pass's
        hidden_states = torch.zeros(tokens, hidden, dtype=draft_config.dtype, device="meta")
        input_ids = torch.zeros(tokens, dtype=torch.long, device="meta")
        positions = torch.zeros(tokens, dtype=torch.long, device="meta")
        weights = [fake.from_tensor(t) for t in [*model.parameters(), *model.buffers()]]
        attrs = [v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        attrs += [fake.from_tensor(t) for t in attrs]
        kept = [*model.parameters(), *model.buffers(), *weights, *attrs, hidden_states, input_ids, positions]
        counter = LiveBytes(storages_of(*kept))
        global COUNTER
        COUNTER = counter
        if item["method"] == "dflash":
            queries = min(tokens, seqs * (1 + k))
            with counter.mode:
                model.precompute_and_store_context_kv(hidden_states, positions)
                context = counter.peak
                with set_forward_context(None, vllm_config, num_tokens=queries):
                    model(input_ids=input_ids[:queries], positions=positions[:queries], inputs_embeds=None)
        else:
            context = 0
            with counter.mode, set_forward_context(None, vllm_config, num_tokens=tokens):
                model(input_ids=input_ids, positions=positions, hidden_states=hidden_states)
    return {"drafter": counter.peak, "context_kv": context, "drafter_class": cls.__name__, "peak_op": counter.peak_op}


def main():
    request = json.load(sys.stdin)
    answer_to, sys.stdout = sys.stdout, sys.stderr  # vLLM's prints must not mix with the answer
    # Kimi-Linear's fused GEMM + all-reduce (a CUTLASS DSL kernel, not in the CPU build) is on unless turned
    # off (vllm/models/kimi_k3/nvidia/model.py maybe_init_gemm_rs_ar); one GPU never runs it
    os.environ["VLLM_KIMI_K3_GEMM_AR"] = "0"
    stand_ins = stand_in_torchvision()  # before vLLM imports its model classes
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    fakes = stand_ins + no_cuda_device_guard() + register_fakes() + register_profile_fakes() + take_cuda_moe_config()
    import vllm

    out = {"fakes_added": fakes, "models": [], "version": vllm.__version__}
    with tempfile.TemporaryDirectory() as workdir:
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{workdir}/dist", backend="gloo"
            )
            initialize_model_parallel(1, 1)
        for item in request["models"]:
            started = time.monotonic()
            try:
                if "target" in item:  # a drafter: built with its target, as vLLM's proposer builds it
                    answer = measure_drafter(item, request["tokens"], request["seqs"], workdir)
                    answer.update(name=item["name"], seconds=round(time.monotonic() - started, 1))
                    out["models"].append(answer)
                    continue
                runs = [
                    measure(item["name"], item["config"], request["tokens"], request["seqs"], workdir, extra)
                    for extra in (0, 1)
                ]
                answer = {k: [r[k] for r in runs] for k in runs[0]}
                answer.update(name=item["name"], seconds=round(time.monotonic() - started, 1))
                out["models"].append(answer)
            except Exception as exc:
                import traceback

                traceback.print_exc()
                out["models"].append({"name": item["name"], "error": f"{type(exc).__name__}: {str(exc)[:400]}"})
    answer_to.write("\n" + ANSWER_MARK + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
