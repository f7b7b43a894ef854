"""vLLM's log, read line by line: typed events, a start-up phase, a summary and a diagnosis.

Reads what `vllm serve` prints from 0.8.5 to 0.32: ANSI colours, `(APIServer pid=…)` /
`(EngineCore_DP0 pid=…)` / `(Worker pid=…)` prefixes, tqdm bars redrawn with carriage returns,
banner-style ("version 0.25.1" in block letters, NGC's "vLLM Version …") and line-style
("vLLM API server version …") versions. Lines may carry an outer prefix that something else added
(a `2026-04-19 17:30:52.611 | ` timestamp, `docker compose logs`' "vllm-1  | ", `docker logs -t`'s
RFC 3339 time, journald's "Apr 19 17:30:52 host vllm[12]: "): it is cut before anything else.
Pure: no I/O.

Speed matters (bench/log_ingest.py: tail + parser must sustain ≥ 100k lines/s): colours and
prefixes are cut with str operations, a message's first word picks the one rule that can apply
(vLLM's messages start with fixed words), and a regular expression runs only after that.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparktui.core.vllm_events import (
    EVENT_KINDS,
    FAILED,
    FAILURE_KINDS,
    PHASES,
    TOKEN_FIELDS,
    TOKEN_LIMIT,
    AvailableKVMemory,
    CudaGraphCapture,
    Error,
    Event,
    Failure,
    KilledNotice,
    KVCacheSize,
    LoadingStarted,
    MaxConcurrency,
    MaxModelLen,
    Model,
    PhaseChanged,
    Profiling,
    ServerListening,
    StartupComplete,
    UnreadableFigure,
    Version,
    Warning_,
    WeightsLoaded,
    WeightsRead,
    event_kind,
)
from sparktui.core.vllm_failures import (
    DROP_CACHES,
    FAILURE_RULES,
    REPO_NAME,
    model_not_found,
    no_kv_memory,
    signal_name,
    signal_of,
)
from sparktui.core.vllm_lines import ANSI, EXCEPTION, clean, level_and_message, process_end, quiet, split_line

# ---------------------------------------------------------------- rules


_R_API_VERSION = re.compile(r"vLLM API server version (\S+)")
_R_BANNER_VERSION = re.compile(r"\bversion (\S+)\s*$")
_R_BANNER_MODEL = re.compile(r"\bmodel\s+(\S+)\s*$")
_R_CONTAINER_VERSION = re.compile(r"^vLLM Version (\S+)")
_R_HEADLESS_VERSION = re.compile(r"^Launching vLLM \(v?([^)\s]+)\) headless")
_R_ENGINE = re.compile(r"LLM engine \(v([^)]+)\)")
_R_ENGINE_MODEL = re.compile(r"\bmodel='([^']*)'")
_R_ENGINE_SEQ = re.compile(r"\bmax_seq_len=(\d+)")
_R_ARGS_MODEL = re.compile(r"'model': '([^']*)'|\bmodel_tag='([^']*)'|\bmodel='([^']*)'")
_R_ARGS_LEN = re.compile(r"'max_model_len': (\d+)|\bmax_model_len=(\d+)")
_R_USING_LEN = re.compile(r"Using max model len (\d+)")
_R_LOAD_START = re.compile(r"Starting to load model (.+?)(?:\.\.\.)?$")
R_WEIGHTS_READ = re.compile(r"Loading weights took ([\d.]+) seconds")
# V0 before 0.8 said "GB" for the same GiB figure (model_runner.py: model_memory_usage / 2**30)
R_WEIGHTS = re.compile(r"Model loading took ([\d.]+) ?(?:GiB|GB)(?: memory)? and ([\d.]+) seconds")
# negative when the weights and the profile's peak already pass the request (vLLM then refuses to start)
R_AVAIL_KV = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
# the V0 engine's worker.py (0.6 to 0.10 with VLLM_USE_V1=0): "model weights take 8.63GiB; non_torch_memory
# takes 0.09GiB; PyTorch activation peak memory takes 1.16GiB; the rest of the memory reserved for KV Cache is 45.21GiB."
R_V0_KV = re.compile(r"the rest of the memory reserved for KV Cache is (-?[\d.]+) ?GiB")
_R_CPU_KV = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_R_KV_SIZE = re.compile(r"^(.+?) KV cache size: ([\d,]+) tokens")
_R_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_R_GRAPH_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?, took ([\d.-]+) GiB")
_R_LISTEN = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
# bash's "sh: line 1:  4242 Killed   vllm serve …", a bare "Killed", the kernel's "Killed process 4242"
_R_KILLED = re.compile(r"(?:^|\d\s+)Killed(?:\s|$)|\bKilled process \d+")


def _engine_config(msg: str, out: list[Event]) -> None:
    # "Initializing a V1 LLM engine (v0.10.2) with config: model='…', …, max_seq_len=4096, …"
    if m := _R_ENGINE.search(msg):
        out.append(Version(m.group(1), "engine"))
    if m := _R_ENGINE_MODEL.search(msg):
        out.append(Model(m.group(1), "engine"))
    m = _R_ENGINE_SEQ.search(msg)
    if m and (tokens := _count(out, "starting", "max_model_len", m.group(1))) is not None:
        out.append(MaxModelLen(tokens, "engine"))


def _args(msg: str, out: list[Event]) -> None:
    # "non-default args: {'model': '…', 'max_model_len': 4096}" or 0.8's "args: Namespace(model_tag='…')"
    if m := _R_ARGS_MODEL.search(msg):
        out.append(Model(next(g for g in m.groups() if g is not None), "args"))
    m = _R_ARGS_LEN.search(msg)
    tokens = _count(out, "starting", "max_model_len", next(g for g in m.groups() if g is not None)) if m else None
    if tokens is not None:
        out.append(MaxModelLen(tokens, "args"))


def _on_version(msg: str, out: list[Event]) -> None:
    # "vLLM API server version 0.8.5.post1", or NGC's banner "vLLM Version 0.13.0+faa43dbf"
    if m := _R_API_VERSION.search(msg):
        out.append(Version(m.group(1), "api_server"))
    elif m := _R_CONTAINER_VERSION.match(msg):
        out.append(Version(m.group(1), "container"))


def _on_launching(msg: str, out: list[Event]) -> None:
    # a headless rank (--headless, a worker node of --nnodes) has no API server and no banner; its
    # serve.py says "Launching vLLM (v0.30.0) headless multiproc executor, with head node address …"
    if m := _R_HEADLESS_VERSION.match(msg):
        out.append(Version(m.group(1), "headless"))


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
    m = _R_USING_LEN.search(msg) if msg.startswith("Using max model len") else None
    if m and (tokens := _count(out, "starting", "max_model_len", m.group(1))) is not None:
        out.append(MaxModelLen(tokens, "resolved"))


def _on_starting(msg: str, out: list[Event]) -> None:
    if msg.startswith("Starting to load model"):
        if m := _R_LOAD_START.search(msg):
            out.append(LoadingStarted(m.group(1)))
    elif msg.startswith("Starting vLLM") and (m := _R_LISTEN.search(msg)):
        out.append(ServerListening(m.group(1)))


def _figures(out: list[Event], phase: str, **texts: str) -> tuple[float, ...] | None:
    """The numbers of a figure line (by the summary field each fills), or None (and an UnreadableFigure)
    when one is not a finite number: the patterns take digits and dots, so a damaged log can give
    "1.2.3", and 400 digits are infinite."""
    values: list[float] = []
    for field, text in texts.items():
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (field in TOKEN_FIELDS and not 0 <= value < TOKEN_LIMIT):
            out.append(UnreadableFigure(field, text[:24], phase, len(text)))
            return None
        values.append(value)
    return tuple(values)


def _count(out: list[Event], phase: str, field: str, text: str) -> int | None:
    """A token count of a figure line ("18,400"), or None (and an UnreadableFigure) when it is none vLLM
    prints: no digits (the patterns take commas), or TOKEN_LIMIT or more (400 digits)."""
    digits = text.replace(",", "")
    try:  # int() of a few thousand digits is refused, and slow well before that: length first
        value = int(digits) if 0 < len(digits) <= len(str(TOKEN_LIMIT)) else TOKEN_LIMIT
    except ValueError:
        value = TOKEN_LIMIT
    if value < TOKEN_LIMIT:
        return value
    out.append(UnreadableFigure(field, text[:24], phase, len(text)))
    return None


def _on_loading(msg: str, out: list[Event]) -> None:
    m = R_WEIGHTS_READ.search(msg) if msg.startswith("Loading weights took") else None
    if m and (got := _figures(out, "loading_weights", weights_read_seconds=m.group(1))):
        out.append(WeightsRead(*got))


def _on_model(msg: str, out: list[Event]) -> None:
    m = R_WEIGHTS.search(msg) if msg.startswith("Model loading took") else None
    if m and (got := _figures(out, "profiling", weights_gib=m.group(1), weights_seconds=m.group(2))):
        out.append(WeightsLoaded(*got))


def _kv_memory(out: list[Event], text: str) -> None:
    if got := _figures(out, "kv_cache", available_kv_gib=text):
        out.append(AvailableKVMemory(*got))


def _on_available(msg: str, out: list[Event]) -> None:
    if msg.startswith("Available KV cache memory") and (m := R_AVAIL_KV.search(msg)):
        _kv_memory(out, m.group(1))
    elif msg.startswith("Available routes are"):
        out.append(ServerListening(None))


def _on_v0_split(msg: str, out: list[Event]) -> None:
    # one line as vLLM writes it; a quoted log may have "the rest of the memory …" wrapped onto its own
    if msg.startswith(("model weights take", "the rest of the memory")) and (m := R_V0_KV.search(msg)):
        _kv_memory(out, m.group(1))


def _on_cpu_kv(msg: str, out: list[Event]) -> None:
    # CPU backend: "Explicitly set (0.06/9.46) GiB for KV cache on node 0." / "Auto set (…) GiB …"
    if "GiB for KV cache" in msg and (m := _R_CPU_KV.search(msg)):
        _kv_memory(out, m.group(1))


def _on_kv_size(msg: str, out: list[Event]) -> None:
    # "GPU KV cache size: 18,400 tokens"; from 0.28 the same line adds ", Maximum concurrency for … : 256.00x"
    m = _R_KV_SIZE.search(msg)
    if m and (tokens := _count(out, "kv_cache", "kv_cache_tokens", m.group(2))) is not None:
        out.append(KVCacheSize(tokens, m.group(1)))
    if "Maximum concurrency" in msg:
        _on_concurrency(msg, out)


def _on_concurrency(msg: str, out: list[Event]) -> None:
    m = _R_CONCURRENCY.search(msg)
    length = _count(out, "kv_cache", "max_model_len", m.group(1)) if m else None
    if m and length is not None and (got := _figures(out, "kv_cache", max_concurrency=m.group(2))):
        out.append(MaxConcurrency(length, *got))


def _on_capturing(msg: str, out: list[Event]) -> None:
    if msg.startswith("Capturing CUDA graphs"):
        out.append(CudaGraphCapture(finished=False))


def _on_graph(msg: str, out: list[Event]) -> None:
    m = _R_GRAPH_DONE.search(msg) if msg.startswith("Graph capturing finished") else None
    if m and (got := _figures(out, "cuda_graphs", cuda_graph_seconds=m.group(1), cuda_graph_gib=m.group(2))):
        out.append(CudaGraphCapture(True, *got))


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
    "Launching": _on_launching,
    "non-default": _on_args,
    "args:": _on_args,
    "Initializing": _on_initializing,
    "Using": _on_using,
    "Starting": _on_starting,
    "Loading": _on_loading,
    "Model": _on_model,
    "Available": _on_available,
    "model": _on_v0_split,
    "the": _on_v0_split,
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


# A line at another level (or none) can fail start-up or serving only with one of the words
# parse_line tries its failure rules on, and name a root cause only with an exception's (EXCEPTION).
_SERVING_WORDS = re.compile("Error|Exception|failed|memory|Repository|Errno|FAILED|died|dead|Interrupt")
# The figures the panel shows from start-up (first seen wins), and the words of their lines: one
# not seen by "ready" is still looked for (`LogSummary.feed_serving`).
_LATE_FIGURES = (
    ("weights_gib", ("Model loading took",)),
    ("available_kv_gib", ("Available KV cache memory", "GiB for KV cache")),
    ("kv_cache_tokens", ("KV cache size:",)),
    ("max_concurrency", ("Maximum concurrency",)),
)


def parse_line(raw: str) -> list[Event]:
    """The events in one line of vLLM output (most lines have none)."""
    line = clean(raw)
    end = process_end(line)
    level, msg = level_and_message(line[end:].lstrip() if end else line)
    out: list[Event] = []
    if not msg:
        return out
    if level is None or level == "INFO":
        _info_rules(msg, out)
    if level in (None, "ERROR", "CRITICAL"):
        if (
            "Error" in msg
            or "Exception" in msg
            or "failed" in msg
            or "memory" in msg
            or "Repository" in msg
            or "Errno" in msg
            or "FAILED" in msg
            or "died" in msg
            or "dead" in msg
            or ": error: " in msg
        ):
            for needles, build in FAILURE_RULES:
                if any(n in msg for n in needles):
                    out.append(build(msg))
                    if build is model_not_found and (m := REPO_NAME.search(msg)) and m.group(1):
                        out.append(Model(m.group(1), "error"))
                    break
        if level is None:
            if "Error: " in msg or "Exception: " in msg or "Interrupt: " in msg:
                m = EXCEPTION.match(msg)
                if m:
                    out.append(Error(msg, m.group(1)))
            elif "Killed" in msg and _R_KILLED.search(msg):
                out.append(KilledNotice(msg))
        else:
            m = EXCEPTION.match(msg) if ("Error: " in msg or "Exception: " in msg) else None
            out.append(Error(msg, m.group(1) if m else None))
    elif level == "WARNING":
        out.append(Warning_(msg))
    return out


# ---------------------------------------------------------------- summary

# which source wins when several lines say the same thing (higher wins; ties: first seen)
_VERSION_RANK = {"api_server": 3, "headless": 3, "banner": 2, "container": 1, "engine": 0}
_MODEL_RANK = {"engine": 4, "banner": 3, "args": 2, "loading": 1, "error": 0}
# "Maximum concurrency for N tokens per request" prints model_config.max_model_len after the KV cache is
# sized (so after --max-model-len -1 / auto is resolved), in every version 0.10–0.32 (kv_cache_utils.py;
# one line with "GPU KV cache size" from 0.28): the length the engine runs with, beating the others.
_LEN_RANK = {"kv_capacity": 3, "engine": 2, "resolved": 1, "args": 0}
# the lines a launch prints once, at its start: a second one of the same kind in one file (a nohup.out, a
# log appended by every restart) is the next launch, and the summary starts again from it
_LAUNCH_SOURCES = frozenset(("api_server", "banner", "headless", "container"))
_LAUNCH_WORDS = ("vLLM API server version", "█  version", "Launching vLLM (", "vLLM Version ")
# failures that name a cause beat the generic ones
_GENERIC = ("engine_init_failed", "unknown", "killed", "crashed", "exited_early", "log_ended", "empty_log")
# exceptions that only wrap the one that failed (printed after it): never the root cause
_WRAPPERS = (
    "Engine core initialization failed",
    "EngineCore failed to start",
    "Worker failed with error",
    "WorkerProc initialization failed",
    "APIServer initialization failed",
)

_PHASE_OF: dict[type, str] = {
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
_PHASE_WORDS = {"starting": "start-up (before loading the model)"}


def _during(phase: str) -> str:
    return "during " + _PHASE_WORDS.get(phase, phase.replace("_", " "))


class LogSummary:
    """What a vLLM log says so far. Feed it lines (or events); call finish() at end of input."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
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
        # the first exception since start-up last made progress, wrappers aside: the root cause
        self.root_error: Error | None = None
        self.killed_notice: KilledNotice | None = None
        self.lines = 0
        self.text_lines = 0  # lines with anything but blanks
        self.events = 0  # events read from the lines: none at all, and the text may not be vLLM's
        self._last_raw: str | None = None  # the last such line: what the log ends with
        self.finished = False
        self._ranks: dict[str, int] = {}
        self.launches = 0  # how many launches the lines began; the summary is of the last
        self._launch_lines: set[str] = set()
        # figures whose number no vLLM prints, by the field each would have filled: said, not shown as one
        self.unreadable: dict[str, str] = {}

    # -- feeding

    def feed(self, raw: str) -> list[Event]:
        self._count(raw)
        events = parse_line(raw)
        if events:
            extra = self.apply(events)
            if extra:
                events.extend(extra)
        return events

    def feed_lines(self, lines: Iterable[str]) -> None:
        count = texts = 0
        last = self._last_raw
        for raw in lines:
            count += 1
            if not raw.isspace() and raw:
                texts += 1
                last = raw
            events = parse_line(raw)
            if events:
                self.apply(events)
        self.lines += count
        self.text_lines += texts
        self._last_raw = last

    def feed_serving(self, lines: list[str]) -> None:
        """`feed_lines` for a reader that shows the start-up's progress (the panel's log tail): the
        same phase, figures and failure, at a fraction of the cost once start-up has completed.
        Until then every line is parsed. After it a line at INFO, WARNING or DEBUG level is
        skipped unless it holds the words of a start-up figure not seen yet (a failure and the
        exception it names come only at other levels) or the opening line of another launch, and any
        other line unless it holds those or a failure's or an exception's words; the line counts and the
        last line are kept. Not kept after ready: the warnings counted, a version, model, length or URL
        said late."""
        if not self.ready:
            self.feed_lines(lines)
            return
        late = tuple(word for field, words in _LATE_FIGURES if getattr(self, field) is None for word in words)
        texts = 0
        last = self._last_raw
        for i, raw in enumerate(lines):
            if raw and not raw.isspace():
                texts += 1
                last = raw
            if quiet(raw):
                if not (late and any(word in raw for word in late)) and not any(w in raw for w in _LAUNCH_WORDS):
                    continue
            elif (
                not _SERVING_WORDS.search(ANSI.sub("", raw) if "\x1b" in raw else raw)
                and not (late and any(word in raw for word in late))
                and not any(w in raw for w in _LAUNCH_WORDS)
            ):
                continue  # no failure, exception, figure or new launch can be in it
            events = parse_line(raw)
            if events:
                self.apply(events)
                if not self.ready:  # vLLM started again in this file: its start-up is read line by line
                    self.lines += i + 1
                    self.text_lines += texts
                    self._last_raw = last
                    self.feed_lines(lines[i + 1 :])
                    return
        self.lines += len(lines)
        self.text_lines += texts
        self._last_raw = last

    def _count(self, raw: str) -> None:
        self.lines += 1
        if not raw.isspace() and raw:
            self.text_lines += 1
            self._last_raw = raw

    def _take(self, field: str, value: object, rank: int) -> None:
        if getattr(self, field) is None or rank > self._ranks.get(field, -1):
            setattr(self, field, value)
            self._ranks[field] = rank

    def apply(self, events: list[Event]) -> list[PhaseChanged]:
        """Update from parsed events; returns the phase changes they caused."""
        before = self.phase
        self.events += len(events)
        for ev in events:
            kind = type(ev)
            if isinstance(ev, Version):
                if ev.source in _LAUNCH_SOURCES:
                    self._launch(ev.source)
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
                # each tensor-parallel rank says its own; vLLM sizes every rank's cache by the smallest
                if self.available_kv_gib is None or (ev.gib < self.available_kv_gib and not self.ready):
                    self.available_kv_gib = ev.gib
            elif isinstance(ev, KVCacheSize):
                if self.kv_cache_tokens is None:
                    self.kv_cache_tokens, self.kv_cache_device = ev.tokens, ev.device
            elif isinstance(ev, MaxConcurrency):
                if self.max_concurrency is None:
                    self.max_concurrency = ev.concurrency
                self._take("max_model_len", ev.tokens_per_request, _LEN_RANK["kv_capacity"])
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
                    if self.root_error is None and not any(w in ev.text for w in _WRAPPERS):
                        self.root_error = ev
            elif isinstance(ev, KilledNotice):
                self.killed_notice = ev
            elif isinstance(ev, Failure):
                self._fail(ev)
            elif isinstance(ev, UnreadableFigure):
                self.unreadable.setdefault(ev.field, ev.shown())
            phase = ev.phase if isinstance(ev, UnreadableFigure) else _PHASE_OF.get(kind)
            if phase and _PHASE_INDEX[phase] > _PHASE_INDEX[self.reached]:
                self.reached = phase
                self.root_error = None  # start-up went on: errors before this were survived
                if self.phase != FAILED:
                    self.phase = phase
        return [PhaseChanged(self.phase)] if self.phase != before else []

    def _launch(self, source: str) -> None:
        """A launch's opening line. A second one of the same kind is vLLM started again in this file: the
        summary starts over from it (the line counts and the last line go on)."""
        if source in self._launch_lines:
            kept = (self.lines, self.text_lines, self._last_raw, self.launches)
            self._reset()
            self.lines, self.text_lines, self._last_raw, self.launches = kept
        if not self._launch_lines:
            self.launches += 1
        self._launch_lines.add(source)

    def _fail(self, failure: Failure) -> None:
        current = self.failure
        if current is None or (current.kind in _GENERIC and failure.kind not in _GENERIC):
            cause = self.root_error or self.last_error
            if failure.kind == "engine_init_failed" and cause is not None:
                failure = Failure(failure.kind, f"{cause.text} (then: {failure.message})", failure.hint)
            self.failure = failure
        self.phase = FAILED

    def finish(self, returncode: int | None = None, *, requested: bool = False) -> list[Event]:
        """End of input (or the process exited): a start-up that never got ready has failed.

        `returncode` is the exit status when known (negative: killed by that signal); `requested`
        says sparktui itself stopped it (stop/kill/guard), so an exit is no failure of vLLM's.
        """
        self.finished = True
        if self.failure is not None or requested:
            return []
        events: list[Event] = []
        if self.url is not None and not self.ready:
            # "Starting vLLM server on …" is printed as the server starts listening; a log that ends
            # there (uvicorn's own lines went elsewhere, or were cut) is of a server that came up
            self.ready = True
            self.reached = self.phase = "ready"
            events.append(PhaseChanged(self.phase))
        if self.ready and returncode in (None, 0):
            return events
        failure = self._exit_failure(returncode)
        self._fail(failure)
        return [failure, PhaseChanged(self.phase)]

    def _exit_failure(self, returncode: int | None) -> Failure:
        """Why start-up (or serving) ended, from what is known: the exit status and the log's last lines."""
        when = "while serving" if self.ready else _during(self.reached)
        signum = signal_of(returncode)
        if signum is not None:
            return _signal_death(signum, returncode, when)
        if self.killed_notice is not None:
            return _killed(f"The log says {self.killed_notice.text!r} {when}: the process was sent SIGKILL.")
        if self.ready:
            return Failure(
                "unknown",
                f"vLLM exited with status {returncode} after start-up completed{self._ends_with()}.",
                "Read the end of the log for the reason.",
            )
        if self.available_kv_gib is not None and self.available_kv_gib <= 0:
            # vLLM raises "No available memory for the cache blocks" right after this figure (V1
            # kv_cache_utils.check_enough_kv_cache_memory, V0 raise_if_cache_size_invalid): a log cut
            # before that error still says why
            return no_kv_memory(
                f"Available KV cache memory: {self.available_kv_gib} GiB, and the log ends there: vLLM "
                "refuses to start with no memory for the KV cache ('No available memory for the cache blocks')."
            )
        cause = self.root_error or self.last_error
        if cause is not None:
            return Failure(
                "unknown",
                cause.text,
                "vLLM stopped with an error sparktui does not recognise; this first exception of the "
                "failure is usually the cause (the ones after it wrap it).",
            )
        if self.text_lines == 0:
            status = "" if returncode is None else f" and exited with status {returncode}"
            return Failure(
                "empty_log",
                f"The log is empty: the command printed nothing{status}.",
                _exit_status_hint(returncode)
                if returncode is not None
                else "There is nothing to diagnose: check that this is the file vLLM wrote to (its "
                "standard output and error), and that the command started at all.",
            )
        if returncode is None:
            return Failure(
                "log_ended",
                f"The log ends {when} with no error{self._ends_with()}.",
                "The log alone cannot say why. Either vLLM is still starting (the log is still being "
                "written: look again later), the log was cut short, or the process was stopped from "
                "outside before it could write an error; on a DGX Spark the kernel's OOM killer does that "
                "when unified memory runs out (check `sudo dmesg | grep -iE 'killed process|out of memory'`).",
            )
        return Failure(
            "exited_early",
            f"The command exited with status {returncode} {when}, with no error in the log{self._ends_with()}.",
            _exit_status_hint(returncode),
        )

    def _ends_with(self) -> str:
        raw = self._last_raw
        if raw is None:
            return ""
        last = split_line(raw)[2]
        if len(last) > 200:
            last = last[:200] + "…"
        return f"; its last line: {last!r}" if last else ""

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


_CRASH_SIGNALS = frozenset((signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE))


def _signal_death(signum: int, returncode: int | None, when: str) -> Failure:
    name = signal_name(signum)
    how = "" if returncode is None or returncode < 0 else f" (exit status {returncode} = 128 + {signum})"
    if signum == signal.SIGKILL:
        return _killed(f"vLLM was killed by {name} {when}{how}.")
    if signum in _CRASH_SIGNALS:
        return Failure(
            "crashed",
            f"vLLM crashed with {name} {when}{how}.",
            "A crash in native code (a CUDA kernel, a driver, a compiled extension), not a setting sparktui "
            "can fix: read the last lines of the log, check that vLLM, torch and the CUDA driver match, "
            "and try --enforce-eager to rule out CUDA graphs and torch.compile.",
        )
    return Failure(
        "killed",
        f"vLLM was stopped by {name} {when}{how}.",
        f"Something outside vLLM sent it {name}: a `docker stop`, systemd, a closed terminal (SIGHUP), "
        "Ctrl-C (SIGINT) or another tool. Nothing in the log says vLLM itself failed.",
    )


def _exit_status_hint(returncode: int | None) -> str:
    """What an exit status says about a command that printed no error (the conventions of sh and docker)."""
    if returncode == 125:
        return (
            "Status 125 is `docker run` failing before the container started: the Docker daemon may be "
            "down (`sudo systemctl start docker`), or the image name or an option is wrong. The log's last "
            "line is docker's own message."
        )
    if returncode == 126:
        return "Status 126: the command was found but could not be run (not executable, or permission denied)."
    if returncode == 127:
        return "Status 127: the command was not found. Check the path of `vllm` (or the runner) in the profile."
    if returncode == 2:
        return (
            "Status 2 is what `sh` and Python's argparse give for bad usage: check the command line and the "
            "profile's extra args; the log's last line usually says what was wrong."
        )
    if returncode == 0:
        return "It stopped by itself before it was ready; the log's last lines should say why."
    return (
        "No error in the log says why; its last lines are the best clue. It exited with a status, not by a "
        "signal, so nothing outside killed it."
    )


def _killed(message: str) -> Failure:
    return Failure(
        "killed",
        message,
        "Something outside vLLM killed it (its log shows no error). On a DGX Spark that is usually the kernel's "
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


def last_launch_start(lines: Sequence[str]) -> int:
    """Where the last launch a log holds begins (0 for a log of one launch): the line at which
    LogSummary, fed these lines, starts its summary over (a nohup.out, a log every restart appends to)."""
    summary, start = LogSummary(), 0
    for i, raw in enumerate(lines):
        if events := parse_line(raw):
            before = summary.launches
            summary.apply(events)
            if before and summary.launches > before:
                start = i
    return start


def summarize(lines: Iterable[str], *, finished: bool = True, returncode: int | None = None) -> LogSummary:
    """Summary of a whole log. `finished=False` for a log that may still grow (no killed verdict)."""
    summary = LogSummary()
    summary.feed_lines(lines)
    if finished:
        summary.finish(returncode)
    return summary


# The events, phases and line anatomy live in core/vllm_events.py and core/vllm_lines.py; callers
# read them here as before.
__all__ = [
    "DROP_CACHES",
    "EVENT_KINDS",
    "FAILED",
    "FAILURE_KINDS",
    "PHASES",
    "AvailableKVMemory",
    "CudaGraphCapture",
    "Error",
    "Event",
    "Failure",
    "KVCacheSize",
    "KilledNotice",
    "LoadingStarted",
    "LogSummary",
    "MaxConcurrency",
    "MaxModelLen",
    "Model",
    "PhaseChanged",
    "Profiling",
    "ServerListening",
    "StartupComplete",
    "UnreadableFigure",
    "Version",
    "Warning_",
    "WeightsLoaded",
    "WeightsRead",
    "describe",
    "event_kind",
    "parse_line",
    "split_line",
    "summarize",
]  # fmt: skip
