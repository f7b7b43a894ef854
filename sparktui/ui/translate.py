"""Record → view: what core and runtime return (state records, fit results, GPU reports), turned
into the `ui.viewmodels` the panes render. Pure translation, no I/O and no policy: the verdicts
are core's (the pool verdict too: core.pool.beside_others); the live calls are `ui.backend`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.ui.viewmodels import FitView, GpuView, GuardView, Rows, predicted_rows

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.fit import FitResult, Suggestion
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec
    from sparktui.core.pool import BesideOthers, Reservation
    from sparktui.core.profiles import GuardSettings, Profile
    from sparktui.runtime.host.memory import GpuReport
    from sparktui.runtime.records.protocol import (
        GuardRecord,
        LogSummaryRecord,
        MetricsRecord,
        StateRecord,
        TripRecord,
    )
    from sparktui.runtime.route.record import RouteRecord
    from sparktui.runtime.server.cluster_launch import ClusterLaunch
    from sparktui.ui.serverviews import Launched, RouteView, ServerEntry, ServerStatus


def launched(status: ServerStatus, summaries: Sequence[str], warnings: Sequence[str], profile: Profile) -> Launched:
    """A launch's state with its preflight's lines, as `sparktui serve` prints them (each node's
    summary, then the warnings), with every value of the profile's environment and its secrets
    (the API key) blanked: a line that quotes one (a node's error, say) shows ***, not the value."""
    from sparktui.ui.serverviews import Launched, PreflightNote  # not needed by the first screen

    hidden = sorted(
        {v for v in (*profile.env.values(), *profile.serve.to_env().values()) if len(v) >= MIN_HIDDEN_CHARS},
        key=len,
        reverse=True,  # a value inside a longer one is blanked with it
    )

    def blank(text: str) -> str:
        for value in hidden:
            text = text.replace(value, "***")
        return text

    notes = [PreflightNote(blank(line)) for line in summaries]
    notes += [PreflightNote(blank(line), warning=True) for line in warnings]
    return Launched(status, tuple(notes))


# A shorter value ("1", "0", "yes") is a setting, not a secret, and blanking it would garble the lines.
MIN_HIDDEN_CHARS = 4


def cluster_launched(done: ClusterLaunch, profile: Profile) -> Launched:
    """runtime.cluster_launch's result (the head's state, each node's preflight summary, the
    warnings: node checks, links, the ports open on every address) in the panel's words."""
    return launched(server_status(done.state), done.summaries, done.warnings, profile)


def metric_rows(metrics: MetricsRecord | None) -> Rows:
    """The supervisor's /metrics figures (its state record) as the server pane shows them."""
    if metrics is None:
        return ()
    if metrics.error:
        return (("metrics", metrics.error),)

    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else fmt.format(value)

    return (
        ("KV", num(metrics.kv_cache_usage_pct, "{:.1f}%")),
        ("run", num(metrics.running, "{:.0f}")),
        ("wait", num(metrics.waiting, "{:.0f}")),
        ("gen", num(metrics.generation_tokens_per_s, "{:.1f} tok/s")),
        ("prompt", num(metrics.prompt_tokens_per_s, "{:.1f} tok/s")),
        ("", ""),
        ("TTFT p50", num(metrics.ttft_p50_s, "{:.2f}s")),
        ("p95", num(metrics.ttft_p95_s, "{:.2f}s")),
    )


def actual_rows(summary: LogSummaryRecord | None) -> Rows:
    """What vLLM's log said (the supervisor's summary of it)."""
    if summary is None:
        return ()
    rows: list[tuple[str, str]] = []
    if summary.available_kv_gib is not None:
        rows.append(("KV GiB", f"{summary.available_kv_gib:.2f}"))
    if summary.kv_cache_tokens is not None:
        rows.append(("KV tokens", f"{summary.kv_cache_tokens:,}"))
    if summary.max_concurrency is not None:
        rows.append(("concurrency", f"{summary.max_concurrency:.2f}x"))
    if summary.weights_gib is not None:
        rows.append(("weights GiB", f"{summary.weights_gib:.2f}"))
    return tuple(rows)


def guard_view(guard: GuardRecord | None, trip: TripRecord | None, live: bool) -> GuardView:
    """The supervisor's guard record in the memory pane's words.

    What the guard watched is shown only while the server lives: a stopped server's last reading
    is history, not the guard's view of memory now."""
    if guard is None:
        return GuardView(state="tripped" if trip else "disarmed", last_trip=trip_text(trip) if trip else None)
    if trip or guard.state == "tripped":
        state = "tripped"
    elif guard.armed:
        state = "armed"
    else:
        state = "disarmed"
    lines, last = guard.lines, guard.last
    detail = None
    if live and guard.stale and guard.beat_doubt and state == "armed":
        detail = f"guard not known to sample: its heartbeat is not trusted ({guard.beat_doubt})"
    elif live and guard.stale and state == "armed":
        detail = f"guard not sampling for {guard.sample_age_s or 0:.0f} s: its supervisor is stopped or starved"
    elif live and last and state == "armed":
        detail = (
            f"watching: MemAvailable {last.available_gib:.1f} GiB, "
            f"{'falling' if last.rate_gib_s > 0 else 'change'} {abs(last.rate_gib_s):.2f} GiB/s, "
            f"every {last.interval_s * 1000:.0f} ms"
        )
    kernel = guard.kernel
    if live and kernel is not None:  # the kernel tripwire: what it saw, or that it cannot see
        news = [
            f"kernel log: Xid {e.xid} for pid {e.pid}"
            if e.kind == "xid"
            else f"kernel log: NVIDIA driver out of memory ({kernel.mode})"
            if e.kind == "no_memory"
            else f"kernel log: {e.kind} ({kernel.mode})"  # a kind another sparktui version recorded
            for e in kernel.events[-2:]
        ]
        if kernel.source is None and kernel.mode != "off":
            news.append("cannot see driver errors (kernel log unreadable): `sparktui status` says how to allow it")
        detail = "; ".join([detail, *news] if detail else news) or None
    return GuardView(
        state=state,
        lines=lines,
        last_trip=trip_text(trip) if trip else None,
        why_na=detail,
    )


def profile_guard_view(settings: GuardSettings | None, last_trip: str | None) -> GuardView:
    """The guard a profile launches with, when no server of it runs (`last_trip`: how the last one
    ended, shown until the next launch)."""
    from sparktui.errors import UserError

    if settings is None:
        return GuardView("n/a", last_trip=last_trip, why_na="open a profile: the guard's lines live in it")
    lines = None
    try:
        lines = settings.guard_lines()
    except UserError as exc:
        why = str(exc)
    else:
        why = "it watches the server once launched"
    armed = "disarmed" if settings.armed is False else "armed"
    return GuardView(
        state="tripped" if last_trip else armed,  # the last server's end, until the next launch
        lines=lines,
        last_trip=last_trip,
        why_na=why,
        for_next_launch=True,
    )


def trip_text(trip: TripRecord) -> str:
    """The guard's TripReport (as recorded by the supervisor) in a few lines."""
    from sparktui.runtime.guard.guard import TripReport

    fields = trip.model_dump(exclude=set(trip.model_extra or {}))  # what a newer version added is not shown
    return TripReport(**fields).summary()


TRIP_HINT = (
    "Memory ran short while vLLM ran. Lower --gpu-memory-utilization or --max-model-len / "
    "--max-num-seqs, use --kv-cache-dtype fp8, or free memory used by other programs; "
    "the guard's lines are in the profile's [guard] table (Ctrl+G)."
)


def entry_reservation(entry: ServerEntry, machine: Machine) -> Reservation:
    """A line of the server list as core.pool counts it (the reservation it recorded, else its
    --gpu-memory-utilization on `machine`)."""
    from sparktui.core import pool

    recorded = (
        pool.Reservation(entry.port, entry.profile, entry.reserved_bytes, entry.reserve_basis, entry.priority)
        if entry.reserved_bytes is not None
        else None
    )
    return pool.recorded_or_counted(machine, entry.port, entry.profile, recorded, entry.utilization)


def show_beside(view: FitView, fit_verdict: str, beside: BesideOthers) -> None:
    """Show core's pool verdict (core.pool.beside_others, the one preflight uses): the verdict and the
    line it gives, and the others' share on the bar."""
    taken = beside.check.reserved_by_others
    view.others_bytes = taken
    if view.segments and view.segments[-1][0] in ("os", "headroom"):
        key, label, rest = view.segments[-1]
        view.segments[-1:] = [("others", "other servers", taken), (key, label, max(0, rest - taken))]
    view.verdict = beside.check.verdict_with(fit_verdict)
    if beside.fits:
        view.reasons.append(beside.check.beside_line())
    else:
        view.reasons.insert(0, beside.check.beside_line())


def server_entry(record: StateRecord) -> ServerEntry:
    """A record as one line of the server list (its cluster's nodes, when it is a head)."""
    from sparktui.core.pool import utilization_in
    from sparktui.runtime.cluster.link import read_nodes
    from sparktui.runtime.records.protocol import condition_of
    from sparktui.ui.serverviews import NodeView, ServerEntry

    utilization = utilization_in(record.argv or [])
    nodes = []
    for node in read_nodes(record.port) if record.alive else []:
        try:
            gib = node.get("available_gib")
            nodes.append(
                NodeView(
                    host=str(node.get("host", "?")),
                    rank=int(node.get("rank", 0)),
                    status=str(node.get("status", "?")),
                    phase=str(node["phase"]) if node.get("phase") else None,
                    available_gib=float(gib) if isinstance(gib, (int, float)) else None,
                    exit_reason=str(node["exit_reason"]) if node.get("exit_reason") else None,
                )
            )
        except (TypeError, ValueError):
            continue  # a node written by another version: the others still show
    reservation = record.reservation
    return ServerEntry(
        port=record.port,
        profile=record.profile or "?",
        condition=condition_of(record),
        alive=record.alive,
        reserved_bytes=reservation.bytes if reservation is not None else None,
        reserve_basis=reservation.basis if reservation is not None else "",
        priority=reservation.priority if reservation is not None else 0,
        utilization=utilization,
        started_at=record.started_at,
        nodes=tuple(nodes),
    )


def server_status(record: StateRecord) -> ServerStatus:
    """The supervisor's state record in the panel's words."""
    from sparktui.runtime.records.protocol import condition_of
    from sparktui.ui.serverviews import Diagnosis, ServerStatus

    condition = condition_of(record)
    exit_info = record.exit
    trip = record.trip
    failure = (exit_info.failure if exit_info else None) or (record.summary.failure if record.summary else None)
    diagnosis = None
    leak = exit_info.leak if exit_info else None
    if leak is not None and leak.leaked:  # it blocks the next launch: the first thing to fix
        from sparktui.core.leak import fix_for

        diagnosis = Diagnosis("memory did not come back", leak.summary(), f"Fix: {fix_for(leak.holders)}.")
    elif trip:
        diagnosis = Diagnosis("memory guard trip", trip_text(trip), TRIP_HINT)
    elif condition.condition == "failed" and failure:
        diagnosis = Diagnosis(failure.kind, failure.message, failure.hint or "")
    fit = record.preflight.fit
    return ServerStatus(
        condition=condition,
        returncode=exit_info.returncode if exit_info else None,
        port=record.port,
        host="127.0.0.1" if record.host in ("0.0.0.0", "") else record.host,
        pid=record.tree.pid if record.tree else None,
        url=record.url or "",
        log_path=Path(record.log_path) if record.log_path else None,
        profile=record.profile,
        profile_path=Path(record.profile_path) if record.profile_path else None,
        started_at=record.started_at,
        guard=guard_view(record.guard, trip, record.running),
        trip=trip_text(trip) if trip else None,
        diagnosis=diagnosis,
        predicted=predicted_rows(fit.kv_cache_bytes, fit.kv_cache_tokens, fit.max_concurrency) if fit else (),
        actual=actual_rows(record.summary),
        metrics=metric_rows(record.metrics) if condition.condition == "ready" else (),
    )


def gpu_view(report: GpuReport) -> GpuView:
    """The sampler's GpuReport in the memory pane's words; a missing figure says why."""
    if not report.available or not report.gpus:
        return GpuView(note=report.reason or "no NVIDIA GPU found", present=False)
    g = report.gpus[0]

    def fmt(value: float | None, unit: str, digits: int = 0) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    return GpuView(
        util=fmt(g.utilization_pct, "%"),
        temp=fmt(g.temperature_c, "°C"),
        power=fmt(g.power_w, " W", 1),
        memory=g.memory_text(),
        note=g.name,
    )


def fit_view(result: FitResult, machine: Machine | None) -> FitView:
    """A FitResult as the fit panel draws it: vLLM's claim from the left (weights, activations,
    CUDA graphs, KV cache, CUDA context), then what the OS keeps (unified memory) or spare."""

    b = result.budget
    pool = b.get("mem_total") or b["total"]
    segments = [
        ("weights", "weights", b["weights"]),
        ("activations", "act", b["activation_peak"] + b["non_torch"]),
        ("graphs", "graphs", b["cuda_graphs"]),
        ("kv", "KV", b["kv_cache"]),
        ("os", "ctx", b["cuda_context"] + b.get("sampler_at_run_time", 0)),
    ]
    claimed = sum(n for _, _, n in segments)
    rest = max(0, pool - claimed)
    if machine is not None and machine.unified:
        # On unified memory everything beside vLLM's claim is the OS's: one segment, with the
        # figure the fit's reasons give ("the OS keeps …").
        segments.append(("os", "OS keeps", b.get("os_left", rest)))
    else:
        segments.append(("headroom", "spare", rest))
    return FitView(
        verdict=result.verdict,
        reasons=list(result.reasons),
        segments=segments,
        pool_bytes=pool,
        mem_available=b.get("mem_available"),
        suggestions=list(result.suggestions),
        kv_cache_bytes=result.kv_cache_bytes,
        kv_cache_tokens=result.kv_cache_tokens,
        max_concurrency=result.max_concurrency,
        kv_bytes_per_token=result.kv_bytes_per_token,
        speed=_speed_line(result),
        vllm_version=getattr(result, "vllm_version", None) or None,
        vllm_version_assumed=str(getattr(result, "vllm_version_source", "")).startswith("assumed"),
        term_sources=term_sources(result.kv_memory_source),
    )


def term_sources(sources: dict[str, str]) -> dict[str, str]:
    """The fit's per-term sources under the panel's segment keys (act = activation peak + non-torch)."""
    pairs = (("weights", "weights"), ("activations", "activation_peak"), ("graphs", "cuda_graphs"))
    return {segment: sources[term] for segment, term in pairs if term in sources}


def model_flag_suggestions(spec: ModelSpec, config: ServeConfig, present: list[Suggestion]) -> list[Suggestion]:
    """The flags the model's family needs, as fit-panel suggestions a key applies (never applied
    unasked); a field the fit's own suggestions already change is left to them."""
    from sparktui.core.fit import Suggestion
    from sparktui.core.model_flags import suggest_flags

    taken = {name for s in present for name in s.changes}
    out: list[Suggestion] = []
    for flag in suggest_flags(spec, config):
        changes = flag.changes(config)
        if changes and not (set(changes) & taken):
            out.append(Suggestion(f"add {' '.join(flag.argv())}: {flag.why}", changes))
            taken |= set(changes) - {"extra_args"}
    return out


def _speed_line(result: FitResult) -> str | None:
    speed = getattr(result, "speed", None)
    if speed is None:
        return None
    from sparktui.core.speed import summary_line

    return summary_line(speed)


def route_view(r: RouteRecord) -> RouteView:
    from sparktui.ui.serverviews import RouteModelView, RouteSwapView, RouteView  # not needed by the first screen

    models = tuple(RouteModelView(m.name, m.status, m.in_flight, m.queued, m.port, m.keep) for m in r.models)
    swaps = tuple(
        RouteSwapView(s.at, s.model, s.stopped, s.ok, s.total_s, s.stop_s, s.memory_s, s.start_s, s.error, s.reason)
        for s in r.history
    )
    swapping = (r.swapping.model, r.swapping.step) if r.swapping is not None else None
    return RouteView(r.listen, models, r.queued, swapping, swaps)
