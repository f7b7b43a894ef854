"""The speed figure a fit shows, decided once for `sparktui fit` and the panel (they only render it):
which hardware (the machine's, or the bandwidth given), the spec as vLLM loads it, the context
(given, or a short chat's), and which `sparktui bench` runs calibrate it (this model, this vLLM
version and quantization, measured on this host). Pure: the callers read files and the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparktui.core import speed as sp
from sparktui.core.config import ServeConfig
from sparktui.core.machine import Machine, reading_applies
from sparktui.core.modelspec import ModelSpec, online_quantized
from sparktui.errors import UserError

if TYPE_CHECKING:  # read only with a bench history: most fits have none
    from sparktui.core.bench_history import MeasuredRun


@dataclass(frozen=True)
class FitSpeed:
    """The estimate (None: no bandwidth known for the machine) and the measured runs that
    calibrated it, each beside what the uncorrected model predicted for it."""

    estimate: sp.SpeedEstimate | None
    measured: tuple[tuple[MeasuredRun, float], ...] = ()


def bandwidth_setting(flag: str | None, env: Mapping[str, str]) -> float | None:
    """GB/s from --bandwidth, else SPARKTUI_BANDWIDTH_GBS, else None; a bad value is an error
    naming where it came from."""
    source, text = ("--bandwidth", flag) if flag is not None else (sp.BANDWIDTH_ENV, env.get(sp.BANDWIDTH_ENV))
    if not text:
        return None
    try:
        gbs = float(text)
    except ValueError:
        gbs = float("nan")
    if not (0 < gbs < 100_000):
        raise UserError(f"{source}: got {text!r}; expected a positive figure in GB/s such as 273")
    return gbs


def history_applies(machine: Machine, host_mem_total: int | None) -> bool:
    """Bench runs measured on this host calibrate a fit for this host only (`auto`, or a machine
    of this host's unified-memory size)."""
    if machine.name == "auto":
        return True
    return host_mem_total is not None and reading_applies(machine, host_mem_total)


def speed_for_fit(
    spec: ModelSpec,
    config: ServeConfig,
    machine: Machine,
    *,
    max_model_len: int,
    max_concurrency: float,
    bandwidth_gbs: float | None = None,
    context: int | None = None,
    host_mem_total: int | None = None,
    history: Callable[[], Iterable[MeasuredRun]] | None = None,
) -> FitSpeed:
    """The speed for a fit's result (`max_model_len` and `max_concurrency` as the fit resolved
    them; `context` None: 1,024 tokens, or max_model_len when shorter). `history` (called only
    when its runs apply to this machine) gives `sparktui bench`'s runs; those of this model,
    vLLM version and --quantization calibrate the estimate."""
    hardware = sp.with_bandwidth(
        sp.hardware_for(machine.name, machine.mem_total, machine.unified), bandwidth_gbs, machine.name
    )
    if hardware is None:
        return FitSpeed(None)
    spec = online_quantized(spec, config.quantization)
    runs: list[MeasuredRun] = []
    if history is not None and history_applies(machine, host_mem_total):
        from sparktui.core.bench_history import matching

        runs = matching(history(), config.model, vllm_version=config.vllm_version, quantization=config.quantization)
    if runs:
        est, pairs = sp.calibrated(
            spec,
            config,
            hardware,
            runs,
            max_model_len=max_model_len,
            max_concurrency=max_concurrency,
            context=context,
        )
        return FitSpeed(est, tuple(pairs))
    est = sp.estimate_for_config(
        spec, config, hardware, max_model_len=max_model_len, max_concurrency=max_concurrency, context=context
    )
    return FitSpeed(est)
