"""vLLM's start-up and serving failures, each a kind and a fix, from the message of an ERROR or
CRITICAL line or raw traceback text (never INFO/WARNING): the rules core/vllm_log.py's parse_line tries.
Pure: no I/O."""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable

from sparktui.core.vllm_events import TOKEN_LIMIT, Failure

DROP_CACHES = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"


def _floor2(x: float) -> float:
    return math.floor(x * 100) / 100


REPO_NAME = re.compile(r"specified: '([^']*)'|Repository Not Found for url: \S*?/api/models/([^/\s]+/[^/\s]+)")
_R_FREE_MEM = re.compile(
    r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired (GPU|CPU) memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_R_KV_TOO_SMALL = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)"
)
_R_ESTIMATED_LEN = re.compile(r"estimated maximum model length is (\d+)")


def _share(free: str, total: str) -> float | None:
    """free / total, floored to two places; None when the figures are none vLLM prints ("1.2.3", a
    total of 0, 400 digits: a damaged log)."""
    try:
        share = float(free) / float(total)
    except (ValueError, ZeroDivisionError):
        return None
    return _floor2(share) if math.isfinite(share) else None


def _free_memory(msg: str) -> Failure:
    m = _R_FREE_MEM.search(msg)
    fits = _share(m.group(1), m.group(2)) if m else None
    if not m or fits is None:
        return Failure(
            "free_memory",
            msg,
            "vLLM found less free memory at start than --gpu-memory-utilization asks for. On a DGX "
            f"Spark that is usually page cache: run `{DROP_CACHES}` and start again, or lower "
            "--gpu-memory-utilization.",
        )
    free, total, device, util, wanted = m.groups()
    where = (
        "On a DGX Spark (unified memory) the difference is usually page cache, which vLLM counts as used: "
        f"run `{DROP_CACHES}` and start again"
        if device == "GPU"
        else "On the CPU backend --gpu-memory-utilization is the share of RAM reserved: free some memory "
        f"(page cache: `{DROP_CACHES}`)"
    )
    return Failure(
        "free_memory",
        msg,
        f"vLLM wants {wanted} GiB ({util} of {total} GiB) free at start but found {free} GiB. "
        f"{where}, or lower --gpu-memory-utilization to {fits} or less.",
    )


def _kv_too_small(msg: str) -> Failure:
    m = _R_KV_TOO_SMALL.search(msg)
    est = _R_ESTIMATED_LEN.search(msg)
    if m:
        length, needed, available = m.groups()
        need = f"One request of {length} tokens needs {needed} GiB of KV cache; only {available} GiB is left. "
    else:
        need = "One request of --max-model-len tokens does not fit in the KV cache. "
    longest = est.group(1) if est and len(est.group(1)) <= len(str(TOKEN_LIMIT)) else None  # 400 digits: none
    if longest is not None and int(longest) < TOKEN_LIMIT:
        fix = f"vLLM estimates the longest that fits is {longest} tokens: set --max-model-len {longest} or less"
    else:
        fix = "Lower --max-model-len"
    return Failure(
        "kv_too_small",
        msg,
        need + fix + ", or make room for the KV cache (a higher --gpu-memory-utilization, "
        "--kv-cache-dtype fp8, or a smaller or more quantized model).",
    )


def no_kv_memory(msg: str) -> Failure:
    return Failure(
        "no_kv_memory",
        msg,
        "The weights and the profiling peak already use all the memory vLLM may claim, leaving nothing "
        "for the KV cache: raise --gpu-memory-utilization (on a Spark keep headroom for the system), "
        "lower --max-num-batched-tokens, or use a smaller or more quantized model.",
    )


def _cuda_oom(msg: str) -> Failure:
    return Failure(
        "cuda_oom",
        msg,
        "CUDA ran out of memory. Lower --gpu-memory-utilization (on a Spark CPU programs share the same "
        "memory), --max-num-seqs or --max-model-len, use --enforce-eager to skip CUDA graphs, or use a "
        "smaller or more quantized model; close other GPU programs.",
    )


def model_not_found(msg: str) -> Failure:
    m = REPO_NAME.search(msg)
    name = next((g for g in m.groups() if g), None) if m else None
    what = f"'{name}' is" if name else "The model is"
    return Failure(
        "model_not_found",
        msg,
        f"{what} neither a Hugging Face repo id vLLM can reach nor a local directory with a config.json "
        "(params.json for Mistral). Check the spelling (org/name, case-sensitive) or the path; for a "
        "gated or private repo set HF_TOKEN in the profile's env; offline, the model must already be in "
        "the Hugging Face cache.",
    )


# transformers' OSError and huggingface_hub's GatedRepoError name the repo these ways
_R_GATED_NAME = re.compile(
    r"(?:Access to model|Repo model) (\S+?) is (?:restricted|gated)|access it at https://huggingface\.co/(\S+?)\.?$"
)


def _model_gated(msg: str) -> Failure:
    m = _R_GATED_NAME.search(msg)
    name = next((g for g in m.groups() if g), None) if m else None
    what = f"'{name}'" if name else "The model"
    page = f"https://huggingface.co/{name}" if name else "the model's Hugging Face page"
    return Failure(
        "model_gated",
        msg,
        f"{what} is a gated Hugging Face repo and the request was refused (401/403): accept its terms at {page} "
        "with the account whose token vLLM uses, and set HF_TOKEN (a read token of that account) in the "
        "profile's env; offline, the model must already be in the Hugging Face cache.",
    )


_ENGINE_INIT_HINT = (
    "vLLM's engine process died while starting; the cause is earlier in the log: read it from the first "
    "ERROR or Traceback (the root cause is the first exception, the ones after it only wrap it)."
)


def _engine_init_failed(msg: str) -> Failure:
    return Failure("engine_init_failed", msg, _ENGINE_INIT_HINT)


_R_WORKER_DIED = re.compile(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+|None)\)")
# before the exit code was printed (0.8 to 0.1x), and Ray's V2 executor: "RayWorkerProc rank=[3] died unexpectedly"
_R_WORKER_DIED_BARE = re.compile(r"(?:Worker proc (\S+)|RayWorkerProc (rank=\S+)) died unexpectedly")
_WORKER_SIGNAL_HINTS = {
    signal.SIGILL: "SIGILL is an illegal instruction: a kernel or wheel built for another processor (a CPU build "
    "using instructions this CPU lacks, a CUDA build without kernels for this GPU, sm_121 on a GB10); install "
    "a vLLM and torch built for this machine",
    signal.SIGKILL: "SIGKILL on a Spark is usually the kernel's OOM killer (`journalctl -k` names it) or a guard: "
    "leave more memory free (a lower --gpu-memory-utilization, a shorter --max-model-len)",
    signal.SIGSEGV: "SIGSEGV is a crash in native code (a CUDA kernel, the driver, a compiled extension): check "
    "that vLLM, torch and the driver match, and try --enforce-eager to rule out CUDA graphs",
    signal.SIGBUS: "SIGBUS is often shared memory running out (/dev/shm, in a container --shm-size) or a "
    "truncated file mapped in",
}


def _worker_died(msg: str) -> Failure:
    """vLLM's MultiprocExecutor monitor (v1/executor/multiproc_executor.py, start_worker_monitor):
    "Worker proc %s died unexpectedly (exit code: %s), shutting down executor." — the engine then
    dies (EngineDeadError) and the API server stops, often with exit status 0."""
    m = _R_WORKER_DIED.search(msg)
    bare = None if m else _R_WORKER_DIED_BARE.search(msg)
    name, code = (m.group(1), m.group(2)) if m else (next(filter(None, bare.groups())) if bare else "a worker", None)
    signum = signal_of(int(code)) if code and code.lstrip("-").isdigit() else None
    how = f"killed by {signal_name(signum)} (exit code {code})" if signum else f"exit code {code or 'not in the log'}"
    hint = _WORKER_SIGNAL_HINTS.get(signum) if signum else None  # type: ignore[call-overload]
    return Failure(
        "worker_died",
        f"vLLM's worker process {name} died, {how}: {msg}",
        (hint or "The lines just before this one say why the worker died")
        + ". The engine stops with it (EngineDeadError) and the server no longer serves: restart it.",
    )


def _engine_dead(msg: str) -> Failure:
    return Failure(
        "engine_dead",
        msg,
        "vLLM's engine core died (EngineDeadError: 'See stack trace (above) for the root cause'): the first "
        "error above it, often a worker that died, is the cause. The server no longer serves: restart it.",
    )


def _bad_argument(msg: str) -> Failure:
    return Failure(
        "bad_argument",
        msg,
        "vLLM refused its command line before starting anything (its argument parser): fix the flag the message "
        "names in the profile's flags or extra args — a flag this vLLM release does not have (`vllm serve --help` "
        "of the vLLM the profile runs lists them), a value not among its choices, or JSON that does not parse.",
    )


def _address_in_use(msg: str) -> Failure:
    return Failure(
        "address_in_use",
        msg,
        "Another program already listens on vLLM's --host/--port (EADDRINUSE): stop it (`ss -ltnp` names it) "
        "or choose another --port.",
    )


def _address_unavailable(msg: str) -> Failure:
    return Failure(
        "address_unavailable",
        msg,
        "The --host address is not one of this machine's addresses (EADDRNOTAVAIL), so nothing can listen "
        "on it; nothing else is using the port. Use 127.0.0.1 (this machine only), 0.0.0.0 (all its "
        "interfaces), or an address `ip -brief address` lists.",
    )


FAILURE_RULES: tuple[tuple[tuple[str, ...], Callable[[str], Failure]], ...] = (
    (("less than desired GPU memory utilization", "less than desired CPU memory utilization",
      "is less than requested memory for kv", "ValueError: Free memory on device"), _free_memory),
    (("To serve at least one request with the model",), _kv_too_small),
    (("No available memory for the cache blocks",), no_kv_memory),
    # torch 2.8+ raises torch.AcceleratorError("CUDA error: out of memory") from a CUDA call, not
    # torch.OutOfMemoryError from the caching allocator; cuBLAS fails to allocate its workspace likewise.
    # On unified memory (Jetson, GB10) NVML cannot list the device's processes, so the caching
    # allocator's out-of-memory branch dies on its own assert while writing the OOM message
    # (c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo: TORCH_INTERNAL_ASSERT(NVML_SUCCESS == r)).
    (("CUDA out of memory", "OutOfMemoryError", "not enough GPU memory", "CUDA error: out of memory",
      "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "NVML_SUCCESS == r INTERNAL ASSERT FAILED"),
     _cuda_oom),
    # argparse's "PROG: error: …": `vllm serve`, the old `vllm` and `python -m vllm.entrypoints.openai.api_server`
    (("vllm serve: error: ", "vllm: error: ", "api_server.py: error: "), _bad_argument),
    (("Errno 98]", "ddress already in use"), _address_in_use),
    (("Errno 99]", "annot assign requested address"), _address_unavailable),
    (("You are trying to access a gated repo", "Cannot access gated repo", "GatedRepoError"), _model_gated),
    (("Invalid repository ID or local directory", "RepositoryNotFoundError", "Repository Not Found",
      "is not a local folder and is not a valid model identifier"), model_not_found),
    (("Engine core initialization failed",), _engine_init_failed),
    (("died unexpectedly",), _worker_died),
    # the V0 engine's (0.8 and 0.9 with VLLM_USE_V1=0): its client says the engine loop or process died,
    # then the API server "MQLLMEngine is already dead, terminating server process"
    (("EngineDeadError", "EngineCore encountered an issue", "MQLLMEngine is already dead", "Engine loop has died",
      "Engine process (pid"), _engine_dead),
)  # fmt: skip


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended the process: a negative status (as Python reports it), or 128 + N (as a
    shell, `docker run` and systemd report a child's signal death)."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode <= 128 + 64:
        return returncode - 128
    return None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
