"""vLLM's log, read line by line: typed events, a start-up phase, a summary and a diagnosis.

Reads what `vllm serve` prints from 0.8.5 to 0.32: ANSI colours, `(APIServer pid=…)` /
`(EngineCore_DP0 pid=…)` / `(Worker pid=…)` prefixes, tqdm bars redrawn with carriage returns,
banner-style ("version 0.25.1" in block letters, NGC's "vLLM Version …") and line-style
("vLLM API server version …") versions. Pure: no I/O.

Speed matters (bench/log_ingest.py: tail + parser must sustain ≥ 100k lines/s): colours and
prefixes are cut with str operations, a message's first word picks the one rule that can apply
(vLLM's messages start with fixed words), and a regular expression runs only after that.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# The phase strip, in order. "failed" replaces whatever phase start-up reached.
PHASES = ("starting", "loading_weights", "profiling", "kv_cache", "cuda_graphs", "ready")
FAILED = "failed"
FAILURE_KINDS = (
    "free_memory",
    "kv_too_small",
    "no_kv_memory",
    "cuda_oom",
    "model_not_found",
    "killed",
    "engine_init_failed",
    "unknown",
)
DROP_CACHES = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Version:
    version: str
    source: str  # api_server | banner | container | engine


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
class PhaseChanged:
    """Emitted by LogSummary.feed (not parse_line) when the start-up phase moves."""

    phase: str


Event = (
    Version | Model | MaxModelLen | LoadingStarted | WeightsRead | WeightsLoaded | Profiling
    | AvailableKVMemory | KVCacheSize | MaxConcurrency | CudaGraphCapture | ServerListening
    | StartupComplete | Warning_ | Error | Failure | PhaseChanged
)  # fmt: skip


# ---------------------------------------------------------------- line anatomy

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(r"\(([A-Za-z][\w.-]*) pid=\d+\) ?")
_LEVELS = ("INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL")
_EXCEPTION = re.compile(r"((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt)): (.*)")


def _clean(raw: str) -> str:
    """The line as a terminal would show it: no colours, no newline, progress bars at their last frame."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        # the usual case is a coloured "(APIServer pid=…)" prefix: cut it with str ops, regex the rest
        if line.startswith("\x1b["):
            end = line.find("m", 2, 16)
            if end > 0 and line[2:end].replace(";", "").isdigit():
                line = line[end + 1 :]
        line = line.replace("\x1b[0;0m", "").replace("\x1b[0m", "")
        if "\x1b" in line:
            line = _ANSI.sub("", line)
    if "\r" in line:
        # a progress bar redrawn in place: keep the prefix and what the terminal showed last
        parts = line.split("\r")
        shown = next((part for part in reversed(parts[1:]) if part.strip()), "")
        head = _PREFIX.match(parts[0])
        line = parts[0] + shown if head and head.end() >= len(parts[0].rstrip()) else shown or parts[0]
    return line


def _process_end(line: str) -> int:
    """Index just past a "(EngineCore_DP0 pid=123)" prefix, or 0."""
    if line.startswith("("):
        end = line.find(")", 1, 80)
        if end > 0 and line.find(" pid=", 1, end) > 0:
            return end + 1
    return 0


def _level_and_message(line: str) -> tuple[str | None, str]:
    level = None
    # "INFO 05-12 02:45:10 [api_server.py:1043] msg" and uvicorn's "INFO:     msg"
    if line.startswith(_LEVELS):
        word, _, rest = line.partition(" ")
        if word.endswith(":") and word[:-1] in _LEVELS:
            level, line = word[:-1], rest
        elif word in _LEVELS and rest[:1].isdigit():
            cut = rest.find("] ", 0, 80)
            if cut > 0:
                level, line = word, rest[cut + 2 :]
            elif rest.endswith("]"):
                level, line = word, ""
    return level, line.strip()


def split_line(raw: str) -> tuple[str | None, str | None, str]:
    """(process, level, message) of one raw log line; the message has no colours or prefix."""
    line = _clean(raw)
    end = _process_end(line)
    process = line[1 : line.find(" pid=")] if end else None
    level, message = _level_and_message(line[end:].lstrip() if end else line)
    return process, level, message


# ---------------------------------------------------------------- rules


def _first_number(text: str) -> int:
    return int(text.replace(",", ""))


def _floor2(x: float) -> float:
    return math.floor(x * 100) / 100


_R_API_VERSION = re.compile(r"vLLM API server version (\S+)")
_R_BANNER_VERSION = re.compile(r"\bversion (\S+)\s*$")
_R_BANNER_MODEL = re.compile(r"\bmodel\s+(\S+)\s*$")
_R_CONTAINER_VERSION = re.compile(r"^vLLM Version (\S+)")
_R_ENGINE = re.compile(r"LLM engine \(v([^)]+)\)")
_R_ENGINE_MODEL = re.compile(r"\bmodel='([^']*)'")
_R_ENGINE_SEQ = re.compile(r"\bmax_seq_len=(\d+)")
_R_ARGS_MODEL = re.compile(r"'model': '([^']*)'|\bmodel_tag='([^']*)'|\bmodel='([^']*)'")
_R_ARGS_LEN = re.compile(r"'max_model_len': (\d+)|\bmax_model_len=(\d+)")
_R_USING_LEN = re.compile(r"Using max model len (\d+)")
_R_LOAD_START = re.compile(r"Starting to load model (.+?)(?:\.\.\.)?$")
_R_WEIGHTS_READ = re.compile(r"Loading weights took ([\d.]+) seconds")
_R_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_R_AVAIL_KV = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_R_CPU_KV = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_R_KV_SIZE = re.compile(r"^(.+?) KV cache size: ([\d,]+) tokens")
_R_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_R_GRAPH_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?, took ([\d.-]+) GiB")
_R_LISTEN = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
_R_FREE_MEM = re.compile(
    r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired (GPU|CPU) memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_R_KV_TOO_SMALL = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)"
)
_R_ESTIMATED_LEN = re.compile(r"estimated maximum model length is (\d+)")
_R_REPO = re.compile(r"specified: '([^']*)'|Repository Not Found for url: \S*?/api/models/([^/\s]+/[^/\s]+)")


def _engine_config(msg: str, out: list[Event]) -> None:
    # "Initializing a V1 LLM engine (v0.10.2) with config: model='…', …, max_seq_len=4096, …"
    if m := _R_ENGINE.search(msg):
        out.append(Version(m.group(1), "engine"))
    if m := _R_ENGINE_MODEL.search(msg):
        out.append(Model(m.group(1), "engine"))
    if m := _R_ENGINE_SEQ.search(msg):
        out.append(MaxModelLen(int(m.group(1)), "engine"))


def _args(msg: str, out: list[Event]) -> None:
    # "non-default args: {'model': '…', 'max_model_len': 4096}" or 0.8's "args: Namespace(model_tag='…')"
    if m := _R_ARGS_MODEL.search(msg):
        out.append(Model(next(g for g in m.groups() if g is not None), "args"))
    if m := _R_ARGS_LEN.search(msg):
        out.append(MaxModelLen(int(next(g for g in m.groups() if g is not None)), "args"))


def _on_version(msg: str, out: list[Event]) -> None:
    # "vLLM API server version 0.8.5.post1", or NGC's banner "vLLM Version 0.13.0+faa43dbf"
    if m := _R_API_VERSION.search(msg):
        out.append(Version(m.group(1), "api_server"))
    elif m := _R_CONTAINER_VERSION.match(msg):
        out.append(Version(m.group(1), "container"))


def _on_banner(msg: str, out: list[Event]) -> None:
    # 0.2x's block-letter banner: "▄▄ ▄█ █ … version 0.25.1" and "█▄█▀ █ … model   poolside/…"
    if "version " in msg and (m := _R_BANNER_VERSION.search(msg)):
        out.append(Version(m.group(1), "banner"))
    elif "model " in msg and (m := _R_BANNER_MODEL.search(msg)):
        out.append(Model(m.group(1), "banner"))


def _on_args(msg: str, out: list[Event]) -> None:
    if msg.startswith(("non-default args:", "args: Namespace(")):
        _args(msg, out)


def _on_initializing(msg: str, out: list[Event]) -> None:
    if "LLM engine (v" in msg:
        _engine_config(msg, out)


def _on_using(msg: str, out: list[Event]) -> None:
    if msg.startswith("Using max model len") and (m := _R_USING_LEN.search(msg)):
        out.append(MaxModelLen(int(m.group(1)), "resolved"))


def _on_starting(msg: str, out: list[Event]) -> None:
    if msg.startswith("Starting to load model"):
        if m := _R_LOAD_START.search(msg):
            out.append(LoadingStarted(m.group(1)))
    elif msg.startswith("Starting vLLM") and (m := _R_LISTEN.search(msg)):
        out.append(ServerListening(m.group(1)))


def _on_loading(msg: str, out: list[Event]) -> None:
    if msg.startswith("Loading weights took") and (m := _R_WEIGHTS_READ.search(msg)):
        out.append(WeightsRead(float(m.group(1))))


def _on_model(msg: str, out: list[Event]) -> None:
    if msg.startswith("Model loading took") and (m := _R_WEIGHTS.search(msg)):
        out.append(WeightsLoaded(float(m.group(1)), float(m.group(2))))


def _on_available(msg: str, out: list[Event]) -> None:
    if msg.startswith("Available KV cache memory") and (m := _R_AVAIL_KV.search(msg)):
        out.append(AvailableKVMemory(float(m.group(1))))
    elif msg.startswith("Available routes are"):
        out.append(ServerListening(None))


def _on_cpu_kv(msg: str, out: list[Event]) -> None:
    # CPU backend: "Explicitly set (0.06/9.46) GiB for KV cache on node 0." / "Auto set (…) GiB …"
    if "GiB for KV cache" in msg and (m := _R_CPU_KV.search(msg)):
        out.append(AvailableKVMemory(float(m.group(1))))


def _on_kv_size(msg: str, out: list[Event]) -> None:
    # "GPU KV cache size: 18,400 tokens"; 0.32 adds ", Maximum concurrency for … : 256.00x"
    if m := _R_KV_SIZE.search(msg):
        out.append(KVCacheSize(_first_number(m.group(2)), m.group(1)))
    if "Maximum concurrency" in msg:
        _on_concurrency(msg, out)


def _on_concurrency(msg: str, out: list[Event]) -> None:
    if m := _R_CONCURRENCY.search(msg):
        out.append(MaxConcurrency(_first_number(m.group(1)), float(m.group(2))))


def _on_capturing(msg: str, out: list[Event]) -> None:
    if msg.startswith("Capturing CUDA graphs"):
        out.append(CudaGraphCapture(finished=False))


def _on_graph(msg: str, out: list[Event]) -> None:
    if msg.startswith("Graph capturing finished") and (m := _R_GRAPH_DONE.search(msg)):
        out.append(CudaGraphCapture(True, float(m.group(1)), float(m.group(2))))


def _on_application(msg: str, out: list[Event]) -> None:
    if msg.startswith("Application startup complete"):
        out.append(StartupComplete())


def _profiling_rule(*starts: str) -> Callable[[str, list[Event]], None]:
    def rule(msg: str, out: list[Event]) -> None:
        if msg.startswith(starts):
            out.append(Profiling(msg))

    return rule


# vLLM's messages start with a fixed word, so one dict lookup on the first word picks the only rule
# that can apply; most lines match none and cost a split and a lookup.
_RULES_BY_FIRST_WORD: dict[str, Callable[[str, list[Event]], None]] = {
    "vLLM": _on_version,
    "non-default": _on_args,
    "args:": _on_args,
    "Initializing": _on_initializing,
    "Using": _on_using,
    "Starting": _on_starting,
    "Loading": _on_loading,
    "Model": _on_model,
    "Available": _on_available,
    "Explicitly": _on_cpu_kv,
    "Auto": _on_cpu_kv,
    "GPU": _on_kv_size,  # also "GPU + host KV cache size" (hisparse)
    "CPU": _on_kv_size,
    "XPU": _on_kv_size,
    "TPU": _on_kv_size,
    "HPU": _on_kv_size,
    "Maximum": _on_concurrency,
    "Capturing": _on_capturing,
    "Graph": _on_graph,
    "Application": _on_application,
    "Dynamo": _profiling_rule("Dynamo bytecode transform time"),
    "torch.compile": _profiling_rule("torch.compile take", "torch.compile took"),
    "Initial": _profiling_rule("Initial profiling/warmup run"),
    "Warming": _profiling_rule("Warming up model"),
    "Profiling": _profiling_rule("Profiling CUDA graph memory"),
    "Memory": _profiling_rule("Memory profiling takes"),
    "Estimated": _profiling_rule("Estimated CUDA graph memory"),
}


def _info_rules(msg: str, out: list[Event]) -> None:
    """Progress facts, from the message's first word."""
    if msg[0] == "[" and "] " in msg[:40]:
        msg = msg[msg.index("] ") + 2 :]  # "[backbone] Initial profiling/warmup run took 0.02 s"
    first = msg[0]
    if first in "█▄▀":
        _on_banner(msg, out)
        return
    space = msg.find(" ")
    rule = _RULES_BY_FIRST_WORD.get(msg[:space] if space > 0 else msg)
    if rule is not None:
        rule(msg, out)


# ---- failures (only from ERROR/CRITICAL lines and raw traceback text, never INFO/WARNING)


def _free_memory(msg: str) -> Failure:
    m = _R_FREE_MEM.search(msg)
    if not m:
        return Failure(
            "free_memory",
            msg,
            "vLLM found less free memory at start than --gpu-memory-utilization asks for. On a DGX "
            f"Spark that is usually page cache: run `{DROP_CACHES}` and start again, or lower "
            "--gpu-memory-utilization.",
        )
    free, total, device, util, wanted = m.groups()
    fits = _floor2(float(free) / float(total))
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
    if est:
        fix = (
            f"vLLM estimates the longest that fits is {est.group(1)} tokens: set --max-model-len {est.group(1)} or less"
        )
    else:
        fix = "Lower --max-model-len"
    return Failure(
        "kv_too_small",
        msg,
        need + fix + ", or make room for the KV cache (a higher --gpu-memory-utilization, "
        "--kv-cache-dtype fp8, or a smaller or more quantized model).",
    )


def _no_kv_memory(msg: str) -> Failure:
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


def _model_not_found(msg: str) -> Failure:
    m = _R_REPO.search(msg)
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


def _engine_init_failed(msg: str) -> Failure:
    return Failure(
        "engine_init_failed",
        msg,
        "vLLM's engine process died while starting; the cause is earlier in the log (the first ERROR or "
        "Traceback). Run `sparktui inspect-log` on the whole log, or read it from the first ERROR.",
    )


_FAILURE_RULES: tuple[tuple[tuple[str, ...], Callable[[str], Failure]], ...] = (
    (("less than desired GPU memory utilization", "less than desired CPU memory utilization",
      "is less than requested memory for kv"), _free_memory),
    (("To serve at least one request with the model",), _kv_too_small),
    (("No available memory for the cache blocks",), _no_kv_memory),
    (("CUDA out of memory", "OutOfMemoryError", "not enough GPU memory"), _cuda_oom),
    (("Invalid repository ID or local directory", "RepositoryNotFoundError", "Repository Not Found",
      "is not a local folder and is not a valid model identifier"), _model_not_found),
    (("Engine core initialization failed",), _engine_init_failed),
)  # fmt: skip


def parse_line(raw: str) -> list[Event]:
    """The events in one line of vLLM output (most lines have none)."""
    line = _clean(raw)
    end = _process_end(line)
    level, msg = _level_and_message(line[end:].lstrip() if end else line)
    out: list[Event] = []
    if not msg:
        return out
    if level is None or level == "INFO":
        _info_rules(msg, out)
    if level in (None, "ERROR", "CRITICAL"):
        if "Error" in msg or "Exception" in msg or "failed" in msg or "memory" in msg or "Repository" in msg:
            for needles, build in _FAILURE_RULES:
                if any(n in msg for n in needles):
                    out.append(build(msg))
                    if build is _model_not_found and (m := _R_REPO.search(msg)) and m.group(1):
                        out.append(Model(m.group(1), "error"))
                    break
        if level is None:
            if "Error: " in msg or "Exception: " in msg or "Interrupt: " in msg:
                m = _EXCEPTION.match(msg)
                if m:
                    out.append(Error(msg, m.group(1)))
        else:
            m = _EXCEPTION.match(msg) if ("Error: " in msg or "Exception: " in msg) else None
            out.append(Error(msg, m.group(1) if m else None))
    elif level == "WARNING":
        out.append(Warning_(msg))
    return out


# ---------------------------------------------------------------- summary

# which source wins when several lines say the same thing (higher wins; ties: first seen)
_VERSION_RANK = {"api_server": 3, "banner": 2, "container": 1, "engine": 0}
_MODEL_RANK = {"engine": 4, "banner": 3, "args": 2, "loading": 1, "error": 0}
_LEN_RANK = {"engine": 2, "resolved": 1, "args": 0}
# failures that name a cause beat the generic ones
_GENERIC = ("engine_init_failed", "unknown", "killed")

_PHASE_OF = {
    LoadingStarted: "loading_weights",
    WeightsRead: "loading_weights",
    WeightsLoaded: "profiling",
    Profiling: "profiling",
    AvailableKVMemory: "kv_cache",
    KVCacheSize: "kv_cache",
    MaxConcurrency: "kv_cache",
    CudaGraphCapture: "cuda_graphs",
    StartupComplete: "ready",
}
_PHASE_INDEX = {name: i for i, name in enumerate(PHASES)}


class LogSummary:
    """What a vLLM log says so far. Feed it lines (or events); call finish() at end of input."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.model: str | None = None
        self.max_model_len: int | None = None
        self.weights_gib: float | None = None
        self.weights_seconds: float | None = None
        self.available_kv_gib: float | None = None
        self.kv_cache_tokens: int | None = None
        self.kv_cache_device: str | None = None
        self.max_concurrency: float | None = None
        self.cuda_graph_gib: float | None = None
        self.url: str | None = None
        self.ready = False
        self.failure: Failure | None = None
        self.phase = PHASES[0]
        self.reached = PHASES[0]  # the furthest start-up phase, kept when phase becomes "failed"
        self.warnings = 0
        self.errors = 0
        self.last_error: Error | None = None
        self.lines = 0
        self.finished = False
        self._ranks: dict[str, int] = {}

    # -- feeding

    def feed(self, raw: str) -> list[Event]:
        self.lines += 1
        events = parse_line(raw)
        if events:
            extra = self.apply(events)
            if extra:
                events.extend(extra)
        return events

    def feed_lines(self, lines: Iterable[str]) -> None:
        for raw in lines:
            self.lines += 1
            events = parse_line(raw)
            if events:
                self.apply(events)

    def _take(self, field: str, value: object, rank: int) -> None:
        if getattr(self, field) is None or rank > self._ranks.get(field, -1):
            setattr(self, field, value)
            self._ranks[field] = rank

    def apply(self, events: list[Event]) -> list[PhaseChanged]:
        """Update from parsed events; returns the phase changes they caused."""
        before = self.phase
        for ev in events:
            kind = type(ev)
            if isinstance(ev, Version):
                self._take("version", ev.version, _VERSION_RANK[ev.source])
            elif isinstance(ev, Model):
                self._take("model", ev.model, _MODEL_RANK[ev.source])
            elif isinstance(ev, MaxModelLen):
                self._take("max_model_len", ev.tokens, _LEN_RANK[ev.source])
            elif isinstance(ev, LoadingStarted):
                self._take("model", ev.model, _MODEL_RANK["loading"])
            elif isinstance(ev, WeightsLoaded):
                if self.weights_gib is None:
                    self.weights_gib, self.weights_seconds = ev.gib, ev.seconds
            elif isinstance(ev, AvailableKVMemory):
                if self.available_kv_gib is None:
                    self.available_kv_gib = ev.gib
            elif isinstance(ev, KVCacheSize):
                if self.kv_cache_tokens is None:
                    self.kv_cache_tokens, self.kv_cache_device = ev.tokens, ev.device
            elif isinstance(ev, MaxConcurrency):
                if self.max_concurrency is None:
                    self.max_concurrency = ev.concurrency
            elif isinstance(ev, CudaGraphCapture):
                if ev.finished and self.cuda_graph_gib is None:
                    self.cuda_graph_gib = ev.gib
            elif isinstance(ev, ServerListening):
                if ev.url:
                    self.url = ev.url
            elif isinstance(ev, StartupComplete):
                self.ready = True
            elif isinstance(ev, Warning_):
                self.warnings += 1
            elif isinstance(ev, Error):
                self.errors += 1
                if ev.exception:
                    self.last_error = ev
            elif isinstance(ev, Failure):
                self._fail(ev)
            phase = _PHASE_OF.get(kind)
            if phase and _PHASE_INDEX[phase] > _PHASE_INDEX[self.reached]:
                self.reached = phase
                if self.phase != FAILED:
                    self.phase = phase
        return [PhaseChanged(self.phase)] if self.phase != before else []

    def _fail(self, failure: Failure) -> None:
        current = self.failure
        if current is None or (current.kind in _GENERIC and failure.kind not in _GENERIC):
            if failure.kind == "engine_init_failed" and self.last_error is not None:
                failure = Failure(
                    failure.kind,
                    f"{failure.message} (last error before it: {self.last_error.text})",
                    failure.hint,
                )
            self.failure = failure
        self.phase = FAILED

    def finish(self, returncode: int | None = None, *, requested: bool = False) -> list[Event]:
        """End of input (or the process exited): a start-up that never got ready has failed.

        `returncode` is the exit status when known (negative: killed by that signal); `requested`
        says sparktui itself stopped it (stop/kill/guard), so an exit is no failure of vLLM's.
        """
        self.finished = True
        if self.failure is not None or requested or (self.ready and returncode in (None, 0)):
            return []
        if returncode is not None and returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            when = "while serving" if self.ready else f"during {self.reached.replace('_', ' ')}"
            failure = _killed(f"vLLM was killed by {name} {when}.")
        elif self.ready:
            failure = Failure(
                "unknown",
                f"vLLM exited with status {returncode} after start-up completed.",
                "Read the end of the log for the reason.",
            )
        elif self.last_error is not None:
            failure = Failure(
                "unknown",
                self.last_error.text,
                "vLLM stopped with an error sparktui does not recognise; the first ERROR or Traceback "
                "in the log is usually the cause.",
            )
        else:
            stopped = f"The log stops during {self.reached.replace('_', ' ')} with no error"
            if returncode is not None:
                stopped += f" (exit status {returncode})"
            failure = _killed(stopped + ".")
        self._fail(failure)
        return [failure, PhaseChanged(self.phase)]

    # -- reading

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "weights_gib": self.weights_gib,
            "available_kv_gib": self.available_kv_gib,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "ready": self.ready,
            "failure": self.failure.to_dict() if self.failure else None,
        }


def _killed(message: str) -> Failure:
    return Failure(
        "killed",
        message,
        "Something outside vLLM stopped it (its log shows no error). On a DGX Spark that is usually the kernel's "
        "OOM killer when unified memory ran out (check `sudo dmesg | grep -iE 'killed process|out of "
        "memory'`). Lower --gpu-memory-utilization, --max-model-len or --max-num-seqs, close other "
        "programs, or use a smaller model.",
    )


def describe(event: Event) -> str | None:
    """One short line for a person (the supervisor's recent events, the TUI's log pane); None for noise."""
    if isinstance(event, Version):
        return f"vLLM {event.version}"
    if isinstance(event, LoadingStarted):
        return f"loading {event.model}"
    if isinstance(event, WeightsLoaded):
        return f"weights loaded: {event.gib} GiB in {event.seconds:.1f} s"
    if isinstance(event, AvailableKVMemory):
        return f"KV cache memory: {event.gib} GiB"
    if isinstance(event, KVCacheSize):
        return f"{event.device} KV cache: {event.tokens:,} tokens"
    if isinstance(event, MaxConcurrency):
        return f"max concurrency {event.concurrency}x at {event.tokens_per_request:,} tokens per request"
    if isinstance(event, CudaGraphCapture):
        return f"CUDA graphs captured in {event.seconds:g} s ({event.gib} GiB)" if event.finished else None
    if isinstance(event, ServerListening):
        return f"listening on {event.url}" if event.url else None
    if isinstance(event, StartupComplete):
        return "ready"
    if isinstance(event, Failure):
        return f"failed ({event.kind}): {event.message}"
    if isinstance(event, PhaseChanged):
        return f"phase: {event.phase.replace('_', ' ')}"
    return None


def summarize(lines: Iterable[str], *, finished: bool = True, returncode: int | None = None) -> LogSummary:
    """Summary of a whole log. `finished=False` for a log that may still grow (no killed verdict)."""
    summary = LogSummary()
    summary.feed_lines(lines)
    if finished:
        summary.finish(returncode)
    return summary
