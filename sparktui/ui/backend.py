"""What the app needs from core and runtime, in one place, so the UI stays thin.

Every call here may do I/O; the app calls them only from workers. A part of sparktui that is
missing raises `Unavailable` with a sentence a person can act on; the UI shows it in place of
the figures (never made-up data).
"""

from __future__ import annotations

import importlib
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

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
    def list_profiles(self) -> list:
        """ProfileRef (name, path, source, description) for the shipped and the user's profiles."""
        return _module("sparktui.core.profiles").list_profiles()

    def load_profile(self, name_or_path: str | Path):
        return _module("sparktui.core.profiles").load_profile(name_or_path)

    def save_profile(self, profile, path: Path) -> None:
        _module("sparktui.core.profiles").save_profile(profile, path)

    def model_spec(self, model: str):
        return _module("sparktui.core.modelspec").load_model_spec(model)

    def local_models(self) -> list[str]:
        modelspec = _module("sparktui.core.modelspec")
        lister = getattr(modelspec, "list_cached_models", None) or getattr(modelspec, "local_models", None)
        if lister is None:
            raise Unavailable("listing the local Hugging Face cache is not available yet")
        return [getattr(m, "repo_id", None) or getattr(m, "name", None) or str(m) for m in lister()]

    def machine(self, name: str):
        return _module("sparktui.core.fit").machine_from_name(name)

    def fit(self, config, spec, machine, mem_available: int | None) -> FitView:
        fit_module = _module("sparktui.core.fit")
        return fit_view(fit_module.fit(config, spec, machine, mem_available=mem_available), mem_available)

    # -- the server, through the supervisor ---------------------------------------------------------
    def runner_problem(self, profile) -> str | None:
        """Why vLLM cannot be launched here (not installed, bad runner), or None."""
        try:
            preflight = _module("sparktui.runtime.preflight")
        except Unavailable as exc:
            return str(exc)
        check = getattr(preflight, "runner_problem", None)
        return check(profile) if check else None

    def attach(self) -> ServerStatus | None:
        _module("sparktui.runtime.supervisor")
        raise Unavailable("attaching to the supervisor is not wired yet")

    def launch(self, profile) -> ServerStatus:
        _module("sparktui.runtime.supervisor")
        raise Unavailable("launching through the supervisor is not wired yet")

    def stop(self, status: ServerStatus) -> ServerStatus:
        _module("sparktui.runtime.supervisor")
        raise Unavailable("stopping through the supervisor is not wired yet")

    def kill(self, status: ServerStatus) -> ServerStatus:
        _module("sparktui.runtime.supervisor")
        raise Unavailable("killing through the supervisor is not wired yet")

    def set_guard(self, status: ServerStatus | None, armed: bool | None = None, lines: dict | None = None) -> GuardView:
        _module("sparktui.runtime.guard")
        raise Unavailable("the guard is not wired yet")

    def follow_log(self, path: Path, stop) -> Iterator[list[str]]:
        """Batches of new lines from `path` (from its start) until `stop()` is true."""
        logtail = _module("sparktui.runtime.logtail")
        yield from logtail.follow_batches(path, stop)

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
        ("TTFT p50", num(stats.ttft_p50_s, "{:.2f}s")),
        ("p95", num(stats.ttft_p95_s, "{:.2f}s")),
    ]


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


def fit_view(result: Any, mem_available: int | None) -> FitView:
    """Turn a FitResult into what the fit panel draws."""
    from sparktui.ui.widgets.fitpanel import Suggestion

    budget = getattr(result, "budget", None)
    segments: list[tuple[str, str, int]] = []
    pool = None
    if budget is not None:
        get = (lambda k: budget.get(k)) if isinstance(budget, dict) else (lambda k: getattr(budget, k, None))
        for key, label, names in (
            ("os", "OS", ("os_reserve", "os_reserve_bytes", "reserve")),
            ("weights", "weights", ("weights", "weights_bytes")),
            ("activations", "activations", ("activations", "activation_bytes", "activation_peak")),
            ("graphs", "graphs", ("cuda_graphs", "cuda_graph_bytes", "graphs")),
            ("kv", "KV", ("kv_cache", "kv_cache_bytes")),
            ("headroom", "headroom", ("headroom", "headroom_bytes")),
        ):
            for name in names:
                value = get(name)
                if value is not None:
                    segments.append((key, label, int(value)))
                    break
        for name in ("pool", "pool_bytes", "total", "total_bytes"):
            if get(name) is not None:
                pool = int(get(name))
                break
    suggestions = []
    for s in getattr(result, "suggestions", []) or []:
        text = getattr(s, "text", None) or getattr(s, "description", None) or str(s)
        changes = getattr(s, "changes", None) or {}
        suggestions.append(Suggestion(text, dict(changes)))
    return FitView(
        verdict=str(result.verdict),
        reasons=[str(r) for r in result.reasons],
        segments=segments,
        pool_bytes=pool,
        mem_available=mem_available,
        suggestions=suggestions,
        kv_cache_bytes=getattr(result, "kv_cache_bytes", None),
        kv_cache_tokens=getattr(result, "kv_cache_tokens", None),
        max_concurrency=getattr(result, "max_concurrency", None),
        kv_bytes_per_token=getattr(result, "kv_bytes_per_token", None),
    )
