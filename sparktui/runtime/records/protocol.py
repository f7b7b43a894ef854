"""The typed contract between the supervisor, the CLI and the TUI.

One module holds every shape that crosses a process boundary:
- `StateRecord`: the supervisor's state file (servers/<port>.json), also what `status --json`
  prints and what every socket reply carries;
- the socket requests (`StatusRequest`, `StopRequest`, `KillRequest`, `GuardRequest`) and the
  one `Reply`;
- `Condition`: the one vocabulary for a server's condition (starting, ready, stopping, stopped,
  failed, lost), with `condition_of()` deriving it from a record.

Bools are strict ("false" is not a bool), numbers finite. A wrong-shaped file or message is a
`ProtocolError` naming the file or message, the field, and what was expected; it never crashes
a reader and never blocks a launch.
"""

from __future__ import annotations

import dataclasses
import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from sparktui.core.guard_lines import GUARD_FIELDS, GuardLines, LineName
from sparktui.core.kernel_log import KernelEvent
from sparktui.core.leak import LeakRecord
from sparktui.core.vllm_events import phase_label
from sparktui.errors import UserError
from sparktui.files import Untrusted, read_regular

STATE_VERSION = 1
MAX_MESSAGE_BYTES = 65536
MAX_STATE_BYTES = 16 << 20  # a record is tens of KiB (50 events, the tree, the fit)

GiBValue = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
LaunchId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]  # runtime/launch_id.PATTERN


class ProtocolError(UserError):
    """A state file or socket message of the wrong shape (exit 2 in the CLI)."""


def describe(error: ValidationError, where: str, tag: str | None = None) -> str:
    """`where: field a.b: expected …, got …; field c: …` in one line (`tag`: a union's tag, dropped)."""
    parts = []
    for item in error.errors()[:4]:
        loc_parts = list(item["loc"])
        if tag is not None and loc_parts[:1] == [tag]:
            loc_parts = loc_parts[1:]
        loc = ".".join(str(p) for p in loc_parts if p != "[key]") or "(top level)"  # a dict's bad key: its name
        got = item.get("input")
        got_text = "" if isinstance(got, dict) else f", got {json.dumps(got, default=str)[:60]}"
        parts.append(f"field {loc}: {item['msg']}{got_text}")
    more = len(error.errors()) - 4
    if more > 0:
        parts.append(f"and {more} more")
    return f"{where}: " + "; ".join(parts)


class _Model(BaseModel):
    # Records are read from files other versions may have written: unknown keys are kept, not refused.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- the condition vocabulary


class Condition(StrEnum):
    """What a person wants to know about a server, in one word."""

    STARTING = "starting"  # launched; `phase` says how far (loading weights, profiling, …)
    READY = "ready"  # answers /health
    STOPPING = "stopping"
    STOPPED = "stopped"  # ended: asked to (stop, kill), or by itself with exit 0
    FAILED = "failed"  # ended badly: `kind` says how (engine failure, guard trip, exit status)
    LOST = "lost"  # its supervisor died: `reason` says why, and what was done about it
    WEDGED = "wedged"  # answers /health but its engine makes no progress: `reason` says since when


class ConditionView(BaseModel):
    condition: Condition
    phase: str | None = None
    kind: str | None = None  # for failed: the failure kind, "guard", or "exit_<status>"
    reason: str | None = None  # for lost/stopped: why, in words

    def text(self) -> str:
        """The condition in a few words: the one wording `sparktui status` and the panel (its server
        list, its server pane, its footer) all show, so they never say two things of one server."""
        c, kind = self.condition, self.kind
        if c is Condition.STARTING:  # how far it got
            shown = self.phase not in (None, "starting", "launching")
            return f"starting ({phase_label(self.phase or '')})" if shown else "starting"
        if c is Condition.FAILED and kind == "guard":
            return "stopped by the guard"  # the guard's own stop is no crash
        if c is Condition.FAILED and kind:
            return f"failed ({_exit_words(kind)})"
        if c is Condition.STOPPED and self.reason == "killed":
            return "stopped (killed)"
        if c is Condition.WEDGED and self.reason:
            return f"wedged ({self.reason})"
        return c.value  # a lost server's reason is a sentence: it is shown on a line of its own


def _exit_words(kind: str) -> str:
    """A failure kind, with condition_of's "exit_<status>" in words ("exit status 1", "signal 9")."""
    status = kind.removeprefix("exit_")
    if status == kind or not status.lstrip("-").isdigit():
        return kind
    return f"signal {status[1:]}" if status.startswith("-") else f"exit status {status}"


# ---------------------------------------------------------------- pieces of the state record


class ProcessRef(_Model):
    pid: int
    start_time: int | None = None


class GuardLast(_Model):
    action: str
    available_gib: float
    rate_gib_s: float
    interval_s: float
    at: float = 0.0


class PressureRecord(_Model):
    """The guard's PSI trigger: it wakes the guard between samples when tasks stall on memory."""

    trigger: str | None = None  # as written to /proc/pressure/memory, e.g. "some 300000 2000000"
    wakes: int = 0  # samples taken early because it fired
    error: str | None = None  # why there is none (no PSI on this kernel)


class KernelEventRecord(_Model):
    """One NVRM line the guard saw (core/kernel_log.KernelEvent), as recorded. `kind` is a string, not
    KernelEvent's literal: a newer sparktui's kind (or field) is kept and shown as written."""

    kind: str  # no_memory | xid, or a kind this version does not know
    line: str | None = None
    xid: int | None = None
    pid: int | None = None
    name: str | None = None
    usec: int | None = None

    @classmethod
    def of(cls, event: KernelEvent) -> KernelEventRecord:
        return cls.model_validate(event.to_dict())

    def as_written(self) -> dict[str, object]:
        """A field it does not have is left out, not null (KernelEvent.to_dict); unknown keys as read."""
        out = self.model_dump()
        return {k: v for k, v in out.items() if v is not None or k in (self.model_extra or {})}


class KernelRecord(_Model):
    """The guard's kernel tripwire: its mode, where it reads the kernel log, the NVRM lines it saw.
    Mode and source are strings: one this version does not know is kept, never a reason to refuse the file."""

    mode: str = "stop"  # stop | warn | off (core/kernel_log.KERNEL_MODES)
    source: str | None = None  # kmsg | journal; None: it cannot read the kernel log (`detail` says why)
    detail: str | None = None
    events: list[KernelEventRecord] = Field(default_factory=list)  # the guard's own events

    @field_serializer("events")
    def _events_as_written(self, events: list[KernelEventRecord]) -> list[dict[str, object]]:
        return [e.as_written() for e in events]


# A last sample older than the gap the guard planned to its next one (up to guard.STEADY_EVENT_INTERVAL at
# rest, far less near a line) plus this means it is not sampling (its supervisor stopped, starved).
GUARD_STALE_S = 2.0
# GuardLines' fields that None turns off: a record that leaves one out had it off
OFF_WHEN_ABSENT = ("warn_below_gib", "term_below_gib", "kill_below_gib", "fall_rate_gib_s", "psi_full_pct")


class GuardRecord(_Model):
    armed: StrictBool
    state: str = "starting"  # starting | watching | disarmed | tripped (another version's word is kept)
    lines: GuardLines  # as the guard watches them (core/guard_lines.py)
    # keys of `lines` GuardLines does not have (a newer sparktui's): kept and written back inside `lines`
    lines_extra: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)
    last: GuardLast | None = None
    pressure: PressureRecord | None = None
    kernel: KernelRecord | None = None
    alert: bool = False  # the engine stalls while MemAvailable falls: faster sampling, less patience
    # Set by readers (never stored): the real age of the guard's last sample (the supervisor's
    # live answer, or its heartbeat file when it cannot answer), and whether that is too old
    sample_age_s: float | None = None
    stale: bool = False
    beat_doubt: str | None = None  # why the heartbeat file is not trusted (then stale: not known to sample)

    @field_validator("lines", mode="before")
    @classmethod
    def _lines_as_written(cls, value: Any) -> Any:
        """Numbers only ("1.5" and true are refused, as everywhere in a record). A line or trigger a
        record does not name was not watched (as records always read; a reply leaves out what is
        None), not the guard's default."""
        if not isinstance(value, dict):
            return value
        for name in GUARD_FIELDS:
            v = value.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise ValueError(f"{name} must be a number, got {json.dumps(v, default=str)[:40]}")
        return {**dict.fromkeys(OFF_WHEN_ABSENT), **{k: v for k, v in value.items() if k in GUARD_FIELDS}}

    @model_validator(mode="before")
    @classmethod
    def _keep_unknown_lines(cls, data: Any) -> Any:
        lines = data.get("lines") if isinstance(data, dict) else None
        if isinstance(lines, dict) and "lines_extra" not in data:
            extra = {k: v for k, v in lines.items() if k not in GUARD_FIELDS}
            if extra:
                return {**data, "lines_extra": extra}
        return data

    @field_serializer("lines")
    def _lines_as_read(self, lines: GuardLines) -> dict[str, Any]:
        return {**dataclasses.asdict(lines), **self.lines_extra}

    def set_age(self, age: float | None, planned_s: float = 0.0) -> None:
        """`planned_s`: the gap the guard planned after that sample (its heartbeat says it)."""
        self.sample_age_s = None if age is None else round(max(age, 0.0), 2)
        # beyond the 0.25 s pace the guard keeps while it samples often
        self.stale = age is not None and age > GUARD_STALE_S + max(0.0, planned_s - 0.25)


class LoopStats(_Model):
    """What a supervisor's loop has done (live replies only, never in the file)."""

    wakes: dict[str, int] = Field(default_factory=dict)  # timer, log, request, exit
    metrics_scrapes: int = 0


class TreeRecord(_Model):
    """proc.ProcessTree.to_record(): enough to find and kill the tree again (pid + start time)."""

    pid: int
    start_time: int
    boot_id: str | None = None
    spawned_at: float = 0.0
    members: list[list[int]] = Field(default_factory=list)
    shm_before: list[list[Any]] | None = None
    shm_held: list[list[Any]] = Field(default_factory=list)
    argv: list[str] | None = None
    log_path: str | None = None
    cgroup: str | None = None  # the tree's own cgroup v2 directory (containment.py), when it has one

    def as_proc_record(self) -> dict[str, Any]:
        return self.model_dump()


class FailureRecord(_Model):
    """A start-up failure diagnosed from vLLM's log (core.vllm_log.Failure)."""

    kind: str
    message: str = ""
    hint: str | None = None


class SignalRecord(_Model):
    """One signal a stop sent: to whom ("group 1234", "pid 1240 (VLLM::EngineCore)", "cgroup …"), which, when."""

    target: str
    signal: str  # its name: SIGTERM, SIGKILL
    at_s: float = 0.0  # after the stop began


class StopRecord(_Model):
    """What a stop or kill did and how long the tree took to go (runtime.host.proc.StopReport)."""

    signals: list[SignalRecord] = Field(default_factory=list)
    gone: bool = False
    gone_after_s: float | None = None
    escalated: bool = False  # SIGTERM was not enough: SIGKILL after the grace period
    survivors: list[int] = Field(default_factory=list)
    shm_removed: list[str] = Field(default_factory=list)
    shm_kept: list[str] = Field(default_factory=list)


class BreakerFailureRecord(_Model):
    """A failure the crash-loop breaker counted (runtime.watch.crash_loop.BreakerFailure)."""

    at: float  # wall-clock time
    phase: str  # the start-up phase reached (or "ready")
    kind: str  # "crash" | "wedge"
    detail: str = ""


class BreakerRecord(_Model):
    """Why automatic restarts stopped: the crash-loop breaker's reason (or the leak gate's) and the failures."""

    reason: str | None = None
    failures: list[BreakerFailureRecord] = Field(default_factory=list)


class ExitRecord(_Model):
    # stopped | killed | guard | failed | exited | wedged | supervisor_died
    reason: str
    by: str | None = None
    returncode: int | None = None
    stop: StopRecord | None = None
    failure: FailureRecord | None = None  # vLLM's failure diagnosed from its log (core.vllm_events.Failure)
    message: str | None = None
    breaker: BreakerRecord | None = None  # the crash-loop breaker stopped restarts
    leak: LeakRecord | None = None  # memory that did not come back after the end (runtime/guard/leakgate.py)


class WedgeRecord(_Model):
    """runtime.watch: idle | ok | prefilling | suspect | wedged (confirmed by a probe)."""

    state: str = "idle"
    since: float | None = None  # wall-clock time the engine last made progress, once wedged
    stalled_s: float = 0.0
    running: float | None = None
    prefilling: float | None = None
    evidence: str | None = None
    after_s: float = 30.0
    probes: int = 0


class RestartRecord(_Model):
    """An automatic restart after a crash or a wedge (runtime.watch.ServerWatch.may_restart)."""

    at: float  # wall-clock time
    kind: str  # "crash" | "wedge"
    phase: str  # the start-up phase the run had reached
    detail: str = ""


class WatchRecord(_Model):
    wedge: WedgeRecord = Field(default_factory=WedgeRecord)
    restarts: list[RestartRecord] = Field(default_factory=list)
    breaker: BreakerRecord | None = None
    flight_recorder: str | None = None


class ReservationRecord(_Model):
    """What this server takes of the machine's pool (core.pool), so that the next launch counts it
    before it has allocated anything."""

    bytes: Annotated[int, Field(ge=0)]
    basis: str
    priority: int = 0


class SuggestionRecord(_Model):
    """One of the fit's suggestions (core.fit.Suggestion.to_dict): its text and the flags it sets."""

    text: str
    set: dict[str, Any] = Field(default_factory=dict)  # flag name → value, as `vllm serve` spells it


class FitRecord(_Model):
    """The fit preflight checked at launch (core.fit.FitResult.to_dict, in its order); a figure a
    record does not hold is None (not recorded), never a made-up 0."""

    model: str = ""
    machine: str = ""
    vllm_version: str = ""
    vllm_version_source: str = ""
    vllm_rules: list[dict[str, Any]] = Field(default_factory=list)  # key, span, value, summary, source
    verdict: str = ""
    reasons: list[str] = Field(default_factory=list)
    suggestions: list[SuggestionRecord] = Field(default_factory=list)
    budget: dict[str, int] = Field(default_factory=dict)
    weights_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    kv_cache_dtype: str = "auto"
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    kv_blocks: int | None = None
    kv_bytes_per_request: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    longest_max_model_len: int | None = None
    kv_working: list[str] = Field(default_factory=list)
    kv_memory_working: list[str] = Field(default_factory=list)
    kv_cache_bytes_low: int | None = None
    kv_cache_bytes_high: int | None = None
    notes: list[str] = Field(default_factory=list)
    kv_memory_source: dict[str, str] = Field(default_factory=dict)
    calibration: list[str] = Field(default_factory=list)
    predicted_decode_tok_s: float | None = None
    predicted_ttft_s: float | None = None
    speed: dict[str, Any] | None = None  # core.speed.SpeedEstimate.to_dict


class PreflightRecord(_Model):
    warnings: list[str] = Field(default_factory=list)
    fit: FitRecord | None = None


class LogSummaryRecord(_Model):
    """What vLLM's log said so far (core.vllm_log.LogSummary.to_dict)."""

    version: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    weights_gib: float | None = None
    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    ready: bool = False
    failure: FailureRecord | None = None


class EventRecord(_Model):
    """One event of the server's life: a log event (its kind from core.vllm_log.EVENT_KINDS) or the
    supervisor's own (GuardTrip, Wedge, CrashLoop …), with its fields beside the kind."""

    kind: str
    t: float = 0.0

    def field(self, name: str) -> Any:
        """One of the event's own fields (None when it has none of that name)."""
        return (self.model_extra or {}).get(name)


class TripRecord(_Model):
    """The guard's trip report (runtime.guard.TripReport), as recorded."""

    line: str
    reason: str
    threshold_gib: float
    mem_available_gib: float
    low_water_gib: float
    fall_rate_gib_s: float
    last_samples: list[list[float]] = Field(default_factory=list)
    signalled: list[SignalRecord] = Field(default_factory=list)
    escalated: bool = False
    escalation: str | None = None
    gone: bool = False
    gone_after_s: float | None = None
    shm_removed: list[str] = Field(default_factory=list)
    tripped_at: float = 0.0
    survivors: list[int] = Field(default_factory=list)
    kernel_line: str | None = None  # line "kernel": the driver's line that tripped it


class MetricsRecord(_Model):
    """The last /metrics reading (core.metrics.VllmStats and the token counters), or why there is none."""

    kv_cache_usage_pct: float | None = None
    running: float | None = None
    waiting: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_window: str | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    error: str | None = None
    at: float = 0.0


Status = Literal["starting", "running", "stopping", "exited", "lost"]
RUNNING_STATUSES: tuple[str, ...] = ("starting", "running", "stopping")


class StateRecord(_Model):
    """servers/<port>.json: one supervisor's record of its server."""

    version: int = STATE_VERSION
    status: Status
    phase: str | None = None
    profile: str | None = None
    profile_path: str | None = None
    model: str | None = None
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)]
    url: str | None = None
    log_path: str | None = None
    socket: str | None = None
    detached: bool = False
    supervisor: ProcessRef
    reaper: ProcessRef | None = None
    # the tree mark (runtime/host/provenance.py) its reaper and vLLM tree carry, from the first save: with
    # the reaper recorded it proves the supervisor before vLLM starts (fallback); None in older records
    mark: str | None = None
    # the id its launcher gave it (runtime/records/launch_id.py: a cluster's head gives one to every node's
    # supervisor); a request that names another (`only_id`) is refused
    launch_id: str | None = None
    containment: str | None = None  # "cgroup <path>" or "process group", once the tree runs
    argv: list[str] | None = None
    runner: str | None = None
    container: str | None = None
    started_at: float = 0.0
    updated_at: float | None = None
    ready_at: float | None = None
    preflight: PreflightRecord = Field(default_factory=PreflightRecord)
    preflight_warnings: list[str] = Field(default_factory=list)
    guard: GuardRecord
    reservation: ReservationRecord | None = None
    tree: TreeRecord | None = None
    summary: LogSummaryRecord | None = None
    events: list[EventRecord] = Field(default_factory=list)
    trip: TripRecord | None = None
    metrics: MetricsRecord | None = None
    exit: ExitRecord | None = None
    watch: WatchRecord | None = None  # runtime.watch: wedge, restarts, breaker, flight recorder
    page_cache: dict[str, Any] | None = None  # runtime.watch.PageCacheReport: the model's pages evicted
    lost_reason: str | None = None  # set by readers when the supervisor is gone
    alive: bool = False  # set by readers: the recorded supervisor still runs (never stored)
    loop: LoopStats | None = None  # in live replies from the supervisor (never stored)
    # set by salvage_state (never stored): why the file did not read whole; such a record is never written back
    salvaged: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(
            indent=1,
            exclude={
                "alive": True,
                "lost_reason": True,
                "loop": True,
                "salvaged": True,
                "guard": {"sample_age_s", "stale", "beat_doubt"},
                **({"mark": True} if self.mark is None else {}),  # an older record is written back as read
            },
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `status --json` prints it."""
        out: dict[str, Any] = self.model_dump(mode="json")
        return out

    @property
    def running(self) -> bool:
        return self.status in RUNNING_STATUSES


_M = TypeVar("_M", bound=BaseModel)


def parse_state(text: str | bytes, where: str) -> StateRecord:
    """A state file's text as a StateRecord; ProtocolError naming `where` and the field."""
    return _parse_object(StateRecord, text, where, "", "; remove the file")


def _parse_object(model: type[_M], text: str | bytes, where: str, what: str, fix: str) -> _M:
    """JSON text holding one object of `model`; ProtocolError naming `where`, what is wrong and `fix`."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"{where}: {what + ' is ' if what else ''}not JSON ({exc}){fix}") from None
    if not isinstance(raw, dict):
        raise ProtocolError(
            f"{where}: expected a JSON object{' as ' + what if what else ''}, got {type(raw).__name__}{fix}"
        )
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolError(describe(exc, where) + fix) from None
    except UserError as exc:  # a part's own check (guard lines out of order)
        raise ProtocolError(f"{where}: {exc}{fix}") from None


class _Essentials(BaseModel):
    """What stop and kill need of a record: the tree and who supervised it (pid + start time, cgroup),
    the port. Strict like everywhere; the rest of the file may be of any shape."""

    model_config = ConfigDict(extra="ignore")

    port: Annotated[int, Field(ge=1, le=65535)]
    supervisor: ProcessRef
    reaper: ProcessRef | None = None
    tree: TreeRecord | None = None
    launch_id: str | None = None
    status: Any = None
    mark: Any = None


def salvage_state(text: str | bytes, why: str) -> StateRecord | None:
    """The parts of a record that did not read whole (`why`) that stop and kill need, or None when
    even those are not there. Its status is the file's when it is one of ours, else "starting": a
    server that may run (the reader's liveness check calls it lost when its supervisor is gone).
    `salvaged` says why; such a record is never written back over the file."""
    try:
        raw = json.loads(text)
        core = _Essentials.model_validate(raw)
    except (ValueError, ValidationError, RecursionError):
        return None
    status = core.status if core.status in ("starting", "running", "stopping", "exited", "lost") else "starting"
    return StateRecord(
        status=status,
        port=core.port,
        supervisor=core.supervisor,
        reaper=core.reaper,
        mark=core.mark if isinstance(core.mark, str) else None,
        tree=core.tree,
        launch_id=core.launch_id,
        guard=GuardRecord(armed=False, state="unknown", lines=GuardLines(None, None, None)),
        salvaged=why,
    )


def read_state_file(path: Path) -> StateRecord | None:
    """None when there is no file; ProtocolError when it is not a state record."""
    try:
        text = read_regular(path, MAX_STATE_BYTES, "state record", own=True).decode()
    except FileNotFoundError:
        return None
    except UserError as exc:  # a FIFO, a device, a huge file: never waited on, never blocks a launch
        said = str(exc)  # an untrusted file's (or folder's) message already says what to do
        raise ProtocolError(said if isinstance(exc, Untrusted) else f"{said}; remove it") from None
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProtocolError(f"{path}: not UTF-8 text, so not a state record; remove the file") from None
    return parse_state(text, str(path))


# ---------------------------------------------------------------- condition of a record


def condition_of(state: StateRecord) -> ConditionView:
    phase = state.phase
    if state.status == "lost":
        return ConditionView(condition=Condition.LOST, phase=phase, reason=state.lost_reason or "supervisor_died")
    wedge = state.watch.wedge if state.watch is not None else None
    if state.running and wedge is not None and wedge.state == "wedged":
        since = time.strftime("%H:%M:%S", time.localtime(wedge.since)) if wedge.since else "?"
        return ConditionView(condition=Condition.WEDGED, phase=phase, reason=f"since {since}")
    if state.status == "running":
        return ConditionView(condition=Condition.READY, phase=phase)
    if state.status == "starting":
        return ConditionView(condition=Condition.STARTING, phase=phase)
    if state.status == "stopping":
        return ConditionView(condition=Condition.STOPPING, phase=phase)
    ex = state.exit
    if ex is None:
        return ConditionView(condition=Condition.STOPPED, phase=phase)
    if ex.reason in ("stopped", "killed"):
        return ConditionView(condition=Condition.STOPPED, phase=phase, reason=ex.reason)
    if ex.reason == "supervisor_died":
        return ConditionView(condition=Condition.LOST, phase=phase, reason=ex.message or ex.reason)
    if ex.reason == "guard":
        return ConditionView(condition=Condition.FAILED, phase=phase, kind="guard")
    if ex.reason == "wedged":
        return ConditionView(condition=Condition.FAILED, phase=phase, kind="wedged")
    if ex.reason == "failed":
        kind = (ex.failure.kind if ex.failure is not None else None) or "failed"
        return ConditionView(condition=Condition.FAILED, phase=phase, kind=kind)
    if ex.returncode not in (0, None):
        return ConditionView(condition=Condition.FAILED, phase=phase, kind=f"exit_{ex.returncode}")
    return ConditionView(condition=Condition.STOPPED, phase=phase, reason=ex.reason)


def guard_stop_words(state: StateRecord) -> str | None:
    """Which of the guard's triggers stopped the server, and when ("the term line, 12:03:41"), or
    None when the guard did not stop it."""
    ex, trip = state.exit, state.trip
    if ex is None or ex.reason != "guard":
        return None
    if trip is None:
        return "no report recorded"
    what = {"psi": "memory pressure", "fall": "the fall rate", "kernel": "the kernel log"}.get(
        trip.line, f"the {trip.line} line"
    )
    if trip.kernel_line and trip.line != "kernel":
        what = "the kernel log"
    when = time.strftime("%H:%M:%S", time.localtime(trip.tripped_at)) if trip.tripped_at else None
    return what + (f", {when}" if when else "")


def how_it_ended(state: StateRecord) -> str | None:
    """How a server that is no longer running ended, in one line (None while it runs): a guard
    trip with its line and reading, a crash with vLLM's words, a stop and by whom."""
    ex = state.exit
    if ex is None or state.running:
        return None
    when = time.strftime("%H:%M:%S", time.localtime(state.updated_at)) if state.updated_at else "?"
    if ex.reason == "guard":
        trip = state.trip
        if trip is not None and trip.kernel_line:
            what = f"guard trip on the kernel log (NVIDIA driver out of memory): {trip.kernel_line}"
        elif trip is not None:
            # the PSI and fall-rate triggers are no GiB line of their own ("the psi line (6.00 GiB)")
            at = {
                "psi": "on memory pressure (PSI full: every task stalled on memory)",
                "fall": f"on the fall rate (the {trip.threshold_gib:.2f} GiB line about to be crossed)",
            }.get(trip.line, f"at the {trip.line} line ({trip.threshold_gib:.2f} GiB)")
            what = (
                f"guard trip {at}: MemAvailable "
                f"{trip.mem_available_gib:.2f} GiB, falling {trip.fall_rate_gib_s:.2f} GiB/s"
            )
        else:
            what = f"guard trip: {ex.message or 'no report recorded'}"
        if ex.by == "reaper":
            what += " (by the reaper: the supervisor was not sampling)"
        if ex.failure is not None and ex.failure.kind:
            # vLLM's own error on the guard's SIGTERM (EngineDeadError): what the stop did, not why
            what += f"; vLLM's {ex.failure.kind} followed the guard's stop (its consequence, not the cause)"
    elif ex.reason == "failed":
        failure = ex.failure
        kind, message = (failure.kind, failure.message) if failure is not None else ("", "")
        what = f"crash: {kind or 'failed'}: {message or ''}".rstrip(": ")
    elif ex.reason in ("stopped", "killed"):
        # by: a signal's name, or "socket" (a request on the command socket: stop/kill, the panel, a route)
        who = "request (sparktui stop/kill, the panel or a route)" if ex.by == "socket" else ex.by
        what = f"{ex.reason}" + (f" by {who}" if who else "")
    elif ex.reason == "supervisor_died":
        what = f"its supervisor died: {ex.message or ''}".rstrip(": ")
    elif ex.reason == "wedged":
        what = "wedged: stopped by the watch"
    elif ex.returncode not in (0, None):
        what = f"crash: vLLM exited with status {ex.returncode}"
    else:
        what = f"vLLM exited by itself (status {ex.returncode})"
    return f"ended {when}: {what}"


# ---------------------------------------------------------------- socket requests and replies


class StatusRequest(_Message):
    cmd: Literal["status"]
    # A reader of the metrics (`status`, the TUI): scrape at the reading pace for a while. False
    # for a look that only finds servers (list_states, preflight): the server's pace is left alone.
    metrics: StrictBool = True


class StopRequest(_Message):
    cmd: Literal["stop"]
    wait: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 60.0
    only_id: LaunchId | None = None  # act only if this supervisor has this launch id


class KillRequest(_Message):
    cmd: Literal["kill"]
    wait: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 30.0
    only_id: LaunchId | None = None


class GuardRequest(_Message):
    """Change the guard of a running server: `armed` and `lines` are separate, both optional."""

    cmd: Literal["guard"]
    armed: StrictBool | None = None
    # The lines to move, by GuardLines' names: a line given moves (null turns it off); one left out stays
    lines: dict[LineName, GiBValue | None] | None = None
    kernel: Literal["stop", "warn", "off"] | None = None  # the kernel tripwire's mode


class ClusterReadyRequest(_Message):
    """To a cluster worker's supervisor, from its `node-watch`: the head answers /health, so this
    headless rank (which never sees "ready" in its own log) can rest."""

    cmd: Literal["cluster-ready"]
    only_id: LaunchId | None = None  # the head's launch id: another server on the port is not told


AnyRequest = StatusRequest | StopRequest | KillRequest | GuardRequest | ClusterReadyRequest
Request = Annotated[AnyRequest, Field(discriminator="cmd")]
_REQUEST: TypeAdapter[AnyRequest] = TypeAdapter(Request)
COMMANDS = ("status", "stop", "kill", "guard", "cluster-ready")


def parse_request(data: bytes) -> AnyRequest:
    """One request line from the socket; ProtocolError says what is wrong with it."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"request: longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        raw = json.loads(data or b"{}")
    except ValueError as exc:
        raise ProtocolError(f"request: not JSON ({exc})") from None
    except RecursionError:
        raise ProtocolError("request: nested too deeply to be a request") from None
    if not isinstance(raw, dict):
        raise ProtocolError(f'request: expected a JSON object like {{"cmd": "status"}}, got {type(raw).__name__}')
    cmd = raw.get("cmd")
    if cmd not in COMMANDS:
        raise ProtocolError(f"request: unknown command {cmd!r}; expected one of {', '.join(COMMANDS)}")
    try:
        return _REQUEST.validate_python(raw)
    except ValidationError as exc:
        raise ProtocolError(describe(exc, f"request {cmd!r}", tag=str(cmd))) from None


class Reply(_Message):
    ok: StrictBool
    state: StateRecord | None = None
    error: str | None = None
    notes: list[str] = Field(default_factory=list)  # e.g. a guard line turned off to make room

    def to_line(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode() + b"\n"


def parse_reply(data: bytes, where: str) -> Reply:
    return _parse_object(Reply, data, where, "the reply", "")
