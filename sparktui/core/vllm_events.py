"""What vLLM's log says, as typed events (core.vllm_log reads them out of lines), the start-up phases
and the failure kinds; each event's stable name in a state record (EVENT_KINDS). Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The phase strip, in order. "failed" replaces whatever phase start-up reached.
PHASES = ("starting", "loading_weights", "profiling", "kv_cache", "cuda_graphs", "ready")
FAILED = "failed"
# The phases in words (the panel's phase strip and server list, `sparktui status`)
PHASE_LABELS = {
    "starting": "starting",
    "loading_weights": "loading weights",
    "profiling": "profiling",
    "kv_cache": "KV cache",
    "cuda_graphs": "CUDA graphs",
    "ready": "ready",
}


def phase_label(phase: str) -> str:
    """A phase in words ("KV cache", not "kv_cache"); one it does not know, readable."""
    return PHASE_LABELS.get(phase, phase.replace("_", " "))


FAILURE_KINDS = (
    "free_memory",
    "kv_too_small",
    "no_kv_memory",
    "cuda_oom",
    "model_not_found",
    "model_gated",  # a gated Hugging Face repo the token may not read
    "address_in_use",
    "bad_argument",  # vLLM's argparse refused its command line ("vllm serve: error: argument --x: …")
    "address_unavailable",
    "killed",  # a signal death (SIGKILL, SIGTERM, …) or the shell's "Killed"
    "crashed",  # SIGSEGV, SIGABRT, SIGBUS, …
    "exited_early",  # a non-zero exit before start-up completed, with no error in the log
    "log_ended",  # the log stops before start-up completed, no error, no exit status known
    "empty_log",
    "engine_init_failed",
    "worker_died",  # a worker process died (vLLM's own monitor says so), at start-up or while serving
    "engine_dead",  # EngineDeadError: the engine core is gone, the API server stops serving
    "unknown",
)


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Version:
    version: str
    source: str  # api_server | headless | banner | container | engine


@dataclass(frozen=True, slots=True)
class Model:
    model: str
    source: str  # engine | banner | args | loading | error


@dataclass(frozen=True, slots=True)
class MaxModelLen:
    tokens: int
    source: str  # engine | resolved | args


@dataclass(frozen=True, slots=True)
class LoadingStarted:
    model: str


@dataclass(frozen=True, slots=True)
class WeightsRead:
    """ "Loading weights took N seconds" (reading the checkpoint; printed by every backend)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class WeightsLoaded:
    """ "Model loading took X GiB and N seconds": the weights' memory, as vLLM measured it."""

    gib: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Profiling:
    detail: str


@dataclass(frozen=True, slots=True)
class AvailableKVMemory:
    gib: float


# A token count (KV cache size, context length) or a concurrency past this is none vLLM prints (a
# damaged or edited log: 400 digits): 2**40 tokens would be a TiB of KV cache at one byte a token.
TOKEN_LIMIT = 1 << 40
TOKEN_FIELDS = ("kv_cache_tokens", "max_model_len", "max_concurrency")  # the summary fields they fill


@dataclass(frozen=True, slots=True)
class UnreadableFigure:
    """A figure line whose number is none vLLM prints ("1.2.3", 400 digits: a damaged or edited log):
    kept out of the summary's figures and said instead; `field` is the summary field it would have
    filled, `text` the number as the log has it, cut to its first 24 characters (a line may hold a
    MiB of digits, and events go into the state record), `length` how long it was, `phase` the
    start-up phase its line shows was reached."""

    field: str
    text: str
    phase: str
    length: int

    def shown(self) -> str:
        return self.text if self.length == len(self.text) else f"{self.text}… ({self.length:,} characters)"


@dataclass(frozen=True, slots=True)
class KVCacheSize:
    tokens: int
    device: str  # "GPU" or "CPU"


@dataclass(frozen=True, slots=True)
class MaxConcurrency:
    tokens_per_request: int
    concurrency: float


@dataclass(frozen=True, slots=True)
class CudaGraphCapture:
    finished: bool
    seconds: float | None = None
    gib: float | None = None


@dataclass(frozen=True, slots=True)
class ServerListening:
    url: str | None  # None when only the route listing was seen


@dataclass(frozen=True, slots=True)
class StartupComplete:
    pass


@dataclass(frozen=True, slots=True)
class Warning_:
    text: str


@dataclass(frozen=True, slots=True)
class Error:
    text: str
    exception: str | None = None  # "ValueError" when the line is a Python exception


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # one of FAILURE_KINDS
    message: str
    hint: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "hint": self.hint}


@dataclass(frozen=True, slots=True)
class KilledNotice:
    """A shell's "Killed" (or the kernel's "Killed process N") in the output: evidence of a SIGKILL."""

    text: str


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    """Emitted by LogSummary.feed (not parse_line) when the start-up phase moves."""

    phase: str


Event = (
    Version | Model | MaxModelLen | LoadingStarted | WeightsRead | WeightsLoaded | Profiling
    | AvailableKVMemory | KVCacheSize | MaxConcurrency | CudaGraphCapture | ServerListening
    | StartupComplete | Warning_ | Error | Failure | KilledNotice | PhaseChanged | UnreadableFigure
)  # fmt: skip

# Each event's "kind" in a state record's events: part of the file format, so stated here rather
# than taken from the class name (a renamed class must not change what old and new files say).
EVENT_KINDS: dict[type, str] = {
    Version: "Version", Model: "Model", MaxModelLen: "MaxModelLen", LoadingStarted: "LoadingStarted",
    WeightsRead: "WeightsRead", WeightsLoaded: "WeightsLoaded", Profiling: "Profiling",
    AvailableKVMemory: "AvailableKVMemory", KVCacheSize: "KVCacheSize", MaxConcurrency: "MaxConcurrency",
    CudaGraphCapture: "CudaGraphCapture", ServerListening: "ServerListening",
    StartupComplete: "StartupComplete", Warning_: "Warning", Error: "Error", Failure: "Failure",
    KilledNotice: "KilledNotice", PhaseChanged: "PhaseChanged", UnreadableFigure: "UnreadableFigure",
}  # fmt: skip


def event_kind(event: Event) -> str:
    """The stable name of a log event in a state record."""
    return EVENT_KINDS[type(event)]
