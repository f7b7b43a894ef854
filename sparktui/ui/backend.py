"""What the app needs from core and runtime, in one place, so the UI stays thin.

Every call here may do I/O; the app calls them only from workers. A part of sparktui that is
missing raises `Unavailable` with a sentence a person can act on; the UI shows it in place of
the figures (never made-up data).
"""

from __future__ import annotations

import importlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparktui.errors import UserError
from sparktui.runtime.protocol import GuardRecord, StateRecord
from sparktui.ui.widgets.fitpanel import FitView
from sparktui.ui.widgets.gauge import GpuView, GuardView


class Unavailable(Exception):
    """This part cannot work here (no NVML, no vLLM, no supervisor…); str() says why."""


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
            raise Unavailable(f"{name} is not available yet in this build of sparktui") from None
        raise


@dataclass
class ServerStatus:
    """A server the supervisor runs (whether or not this app started it)."""

    state: str  # starting | ready | failed | stopping | stopped | exited
    pid: int | None = None
    log_path: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    profile: str | None = None
    detail: str = ""
    guard: GuardView = field(default_factory=GuardView)
    tree_bytes: int | None = None
    tree_procs: int | None = None
    phase: str | None = None
    trip: dict[str, Any] | None = None  # the guard's TripReport, when it stopped this server


class Backend:
    """The live implementation over sparktui.core and sparktui.runtime."""

    def host(self) -> str:
        return socket.gethostname()

    # -- memory and GPU ---------------------------------------------------------------------------
    def memory(self):
        return _module("sparktui.runtime.memory").read_memory()

    def gpu(self) -> GpuView:
        memory = _module("sparktui.runtime.memory")
        info = memory.read_gpu()
        return gpu_view(info)

    # -- profiles, models, fit --------------------------------------------------------------------
    def list_profiles(self) -> list[Any]:
        """ProfileRef (name, path, source, description) for the shipped and the user's profiles."""
        return _module("sparktui.core.profiles").list_profiles()

    def load_profile(self, name_or_path: str | Path):
        return _module("sparktui.core.profiles").load_profile(name_or_path)

    def save_profile(self, profile, path: Path) -> None:
        _module("sparktui.core.profiles").save_profile(profile, path)

    def model_spec(self, model: str):
        return _module("sparktui.core.modelspec").load_model_spec(model)

    def local_models(self) -> list[str]:
        """Repo ids in the local Hugging Face cache (with a config.json), then the built-in catalog."""
        modelspec = _module("sparktui.core.modelspec")
        cached: list[str] = []
        for hub in modelspec.hub_dirs():
            for folder in sorted(hub.glob("models--*")):
                if any(folder.glob("snapshots/*/config.json")):
                    repo = folder.name.removeprefix("models--").replace("--", "/")
                    if repo not in cached:
                        cached.append(repo)
        catalog = [name for name in modelspec.catalog_names() if name not in cached]
        return cached + catalog

    def machine(self, name: str):
        fit_module = _module("sparktui.core.fit")
        meminfo = None
        if str(name).strip().lower() == "auto":
            meminfo = Path("/proc/meminfo").read_text()
        return fit_module.machine_from_name(name, meminfo)

    def fit(self, config, spec, machine, sample) -> FitView:
        """Fit against this host's MemAvailable only when the profile's machine is this host."""
        fit_module = _module("sparktui.core.fit")
        live = sample is not None and fit_module.reading_applies(machine, sample.mem_total)
        mem_available = sample.mem_available if live else None
        view = fit_view(fit_module.fit(config, spec, machine, mem_available=mem_available), machine)
        view.mem_available_live = live
        view.suggestions += model_flag_suggestions(spec, config, view.suggestions)
        return view

    # -- the server, through the supervisor ---------------------------------------------------------
    def runner_problem(self, profile) -> str | None:
        """Why this profile's vLLM cannot be started here (not installed, bad runner), or None."""
        runner = _module("sparktui.runtime.runner")
        try:
            runner.build_command(profile)
        except UserError as exc:
            return str(exc)
        return None

    def attach(self, port: int | None = None) -> ServerStatus | None:
        """The server on `port` (the one this app follows), else the newest live one, else None."""
        state_mod = _module("sparktui.runtime.state")
        if port is not None:
            try:
                state = state_mod.read_state(state_mod.state_path(port))
            except UserError as exc:  # a wrong-shaped state file
                raise Unavailable(str(exc)) from None
            if state is not None:
                return self._with_tree(server_status(state_mod.with_liveness(state)))
        live = [s for s in state_mod.list_states() if s.alive]
        return self._with_tree(server_status(live[0])) if live else None

    def _with_tree(self, status: ServerStatus) -> ServerStatus:
        if status.pid and status.state in ("starting", "ready", "stopping"):
            try:
                tree = _module("sparktui.runtime.memory").tree_memory(status.pid)
                status.tree_bytes, status.tree_procs = tree.total_bytes, len(tree.pids)
            except (Unavailable, OSError):
                pass
        return status

    def launch(self, profile, force: bool = False) -> ServerStatus:
        """Start a detached supervisor; force: start even what the preflight fit refuses."""
        supervisor = _module("sparktui.runtime.supervisor")
        return server_status(supervisor.launch(profile, detach=True, force=force))

    def stop(self, status: ServerStatus) -> ServerStatus:
        return server_status(_module("sparktui.runtime.supervisor").stop(status.port))

    def kill(self, status: ServerStatus) -> ServerStatus:
        return server_status(_module("sparktui.runtime.supervisor").kill(status.port))

    def restart(self, status: ServerStatus, profile) -> ServerStatus:
        supervisor = _module("sparktui.runtime.supervisor")
        if status is not None and status.state in ("starting", "ready", "stopping"):
            supervisor.stop(status.port)
        return server_status(supervisor.launch(profile, detach=True))

    def set_guard(
        self, status: ServerStatus, armed: bool | None = None, lines: dict[str, Any] | None = None
    ) -> GuardView:
        """Arm/disarm or move the lines of the guard of a running server, through its supervisor."""
        state_mod = _module("sparktui.runtime.state")
        reply = state_mod.request(status.port, state_mod.guard_request(armed, lines), timeout=5)
        if not reply.ok or reply.state is None:
            raise Unavailable(
                f"the supervisor on port {status.port} cannot change its guard: {reply.error or 'no reason given'}"
            )
        return guard_view(reply.state.guard, reply.state.trip)

    def default_guard_lines(self, settings) -> dict[str, Any]:
        """The profile's guard lines with the guard's defaults filled in (GiB)."""
        guard = _module("sparktui.runtime.guard")
        lines = guard.GuardLines.from_settings(settings)
        return {
            "warn_below_gib": lines.warn_below_gib,
            "term_below_gib": lines.term_below_gib,
            "kill_below_gib": lines.kill_below_gib,
        }

    def follow_log(self, path: Path, stop: threading.Event) -> Iterator[list[str]]:
        """Batches of lines from `path` (from its start), as the file grows, until `stop` is set."""
        logtail = _module("sparktui.runtime.logtail")
        # Small reads keep each hold of the GIL short, so keys stay quick while a flood is read.
        with logtail.LogTail(path, keep=1, chunk_bytes=1 << 16) as tail:
            yield from tail.follow(interval_s=0.1, stop=stop)

    def metrics(self, status: ServerStatus, previous: Any) -> tuple[Any, list[tuple[str, str]]]:
        """Fetch /metrics from the server and derive the live figures (rates need `previous`)."""
        import time

        import httpx

        from sparktui.core.metrics import MetricsError, derive, parse_metrics

        url = f"http://{status.host}:{status.port}/metrics"
        try:
            response = httpx.get(url, timeout=2.0)
            response.raise_for_status()
            snapshot = parse_metrics(response.text, time.time())
        except (httpx.HTTPError, MetricsError) as exc:
            raise Unavailable(f"{url}: {exc}") from None
        return snapshot, metric_figures(derive(snapshot, previous))


def metric_figures(stats: Any) -> list[tuple[str, str]]:
    def num(value, fmt):
        return "n/a" if value is None else fmt.format(value)

    return [
        ("KV", num(stats.kv_cache_usage_pct, "{:.1f}%")),
        ("run", num(stats.running, "{:.0f}")),
        ("wait", num(stats.waiting, "{:.0f}")),
        ("gen", num(stats.generation_tokens_per_s, "{:.1f} tok/s")),
        ("prompt", num(stats.prompt_tokens_per_s, "{:.1f} tok/s")),
        ("", ""),
        ("TTFT p50", num(stats.ttft_p50_s, "{:.2f}s")),
        ("p95", num(stats.ttft_p95_s, "{:.2f}s")),
    ]


def guard_view(guard: GuardRecord | None, trip: dict[str, Any] | None) -> GuardView:
    """The supervisor's guard record (armed, state: starting|watching|disarmed|tripped, lines,
    last) in the gauge's words."""
    if guard is None:
        return GuardView(state="tripped" if trip else "disarmed", last_trip=trip_text(trip) if trip else None)
    if trip or guard.state == "tripped":
        state = "tripped"
    elif guard.armed:
        state = "armed"
    else:
        state = "disarmed"
    lines = guard.lines
    last = guard.last
    detail = None
    if last and state == "armed":
        detail = (
            f"watching: MemAvailable {last.available_gib:.1f} GiB, "
            f"{'falling' if last.rate_gib_s > 0 else 'change'} {abs(last.rate_gib_s):.2f} GiB/s, "
            f"every {last.interval_s * 1000:.0f} ms"
        )
    return GuardView(
        state=state,
        warn_gib=lines.warn_below_gib,
        term_gib=lines.term_below_gib,
        kill_gib=lines.kill_below_gib,
        last_trip=trip_text(trip) if trip else None,
        why_na=detail,
    )


def trip_text(trip: dict[str, Any] | str) -> str:
    """The guard's TripReport (as recorded by the supervisor) in a few words."""
    if isinstance(trip, str):
        return trip
    try:
        from sparktui.runtime.guard import TripReport

        return TripReport(**trip).summary()
    except (ImportError, TypeError):
        return json.dumps(trip, default=str)


def server_status(state: StateRecord) -> ServerStatus:
    """The supervisor's state record in the app's words."""
    status = state.status
    exit_info = state.exit
    if status == "running":
        ui_state = "ready"
    elif status in ("starting", "stopping", "lost"):
        ui_state = status
    else:  # exited: why
        reason = exit_info.reason if exit_info else None
        ui_state = {"stopped": "stopped", "killed": "killed", "failed": "failed", "guard": "tripped"}.get(
            reason or "", "exited"
        )
    pid = state.tree.pid if state.tree else None
    detail = ""
    if ui_state in ("starting", "ready", "stopping"):
        detail = f"pid {pid or '?'}  {state.url or ''}"
    elif exit_info:
        detail = f"{exit_info.reason} (exit {exit_info.returncode})"
    elif ui_state == "lost":
        detail = state.lost_reason or "its supervisor died; the next launch sweeps what it left"
    return ServerStatus(
        state=ui_state,
        pid=pid,
        log_path=Path(state.log_path) if state.log_path else None,
        host="127.0.0.1" if state.host in ("0.0.0.0", "") else state.host,
        port=state.port,
        profile=state.profile,
        detail=detail,
        guard=guard_view(state.guard, state.trip),
        phase=state.phase,
        trip=state.trip,
    )


def gpu_view(report: Any) -> GpuView:
    """The sampler's GpuReport in the gauge's words; a missing figure says why."""
    if not report.available or not report.gpus:
        return GpuView(note=report.reason or "no NVIDIA GPU found")
    g = report.gpus[0]

    def fmt(value, unit, digits=0):
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    return GpuView(
        util=fmt(g.utilization_pct, "%"),
        temp=fmt(g.temperature_c, "°C"),
        power=fmt(g.power_w, " W", 1),
        memory=g.memory_text(),
        note=g.name,
    )


def fit_view(result: Any, machine: Any) -> FitView:
    """A FitResult as the fit panel draws it: vLLM's claim from the left (weights, activations,
    CUDA graphs, KV cache, CUDA context), then what stays for the OS, then headroom."""

    b = result.budget
    pool = b.get("mem_total") or b["total"]
    segments = [
        ("weights", "weights", b["weights"]),
        ("activations", "act", b["activation_peak"] + b["non_torch"]),
        ("graphs", "graphs", b["cuda_graphs"]),
        ("kv", "KV", b["kv_cache"]),
        ("os", "ctx", b["cuda_context"]),
    ]
    claimed = sum(n for _, _, n in segments)
    rest = max(0, pool - claimed)
    if machine is not None and getattr(machine, "unified", False):
        reserve = min(rest, machine.os_need)
        segments.append(("os", "OS", reserve))
        rest -= reserve
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
    )


def model_flag_suggestions(spec: Any, config: Any, present: list[Any]) -> list[Any]:
    """The flags the model's family needs, as fit-panel suggestions a key applies (never applied
    unasked); a field the fit's own suggestions already change is left to them."""
    fit_module = _module("sparktui.core.fit")
    taken = {name for s in present for name in s.changes}
    out = []
    for flag in _module("sparktui.core.model_flags").suggest_flags(spec, config):
        changes = flag.changes(config)
        if changes and not (set(changes) & taken):
            out.append(fit_module.Suggestion(f"add {' '.join(flag.argv())}: {flag.why}", changes))
            taken |= set(changes) - {"extra_args"}
    return out


def _speed_line(result: Any) -> str | None:
    speed = getattr(result, "speed", None)
    if speed is None:
        return None
    return _module("sparktui.core.speed").summary_line(speed)
