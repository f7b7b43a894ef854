"""The key a launch's measured figures are filed under (core.calibration): the model, the vLLM
version, the machine, and per measured term the settings that change it, as the fit derives them."""

from __future__ import annotations

from sparktui.core.calibration import Calibration, LogFigures, machine_key
from sparktui.core.config import ServeConfig
from sparktui.core.fit_settings import FitSettings, settings_from
from sparktui.core.machine import Machine
from sparktui.core.modelspec import ModelSpec, online_quantized
from sparktui.core.modelspec.dtype import served_dtype
from sparktui.core.record import record


def term_flags(config: ServeConfig, spec: ModelSpec, s: FitSettings) -> dict[str, dict[str, str]]:
    """Per measured term (calibration.TERMS), the settings that change it: a launch's figure for a
    term is reused only while these are as they were."""
    shared = {"tensor_parallel_size": str(s.tp), "dtype": spec.dtype, "quantization": str(config.quantization or "")}
    speculative = f"{s.speculative_method or ''} {s.num_spec}".strip()
    return {
        "weights": {**shared, "speculative": speculative, "language_model_only": str(bool(config.language_model_only))},
        "activation_non_torch": {
            **shared,
            "speculative": speculative,
            "max_num_batched_tokens": str(s.max_num_batched_tokens),
            "max_num_seqs": str(s.max_num_seqs),
            "model_runner": s.model_runner,
            "load_format": s.load_format or "auto",
            "enforce_eager": str(s.enforce_eager),
        },
        "cuda_graphs": {
            **shared,
            "speculative": speculative,
            "enforce_eager": str(s.enforce_eager),
            "max_num_seqs": str(s.max_num_seqs),
            "max_num_batched_tokens": str(s.max_num_batched_tokens),
            "max_model_len": str(s.max_model_len),
            "kv_cache_dtype": s.kv_cache_dtype,
            "attention_backend": s.attention_backend or "auto",
            "cudagraph_mode": s.cudagraph_mode or "default",
            "capture_sizes": ",".join(map(str, s.capture_sizes or ())) or "default",
            "max_capture_size": str(s.max_capture_size or "default"),
        },
    }


@record
class CalibrationKey:
    """What a launch's figures are filed under, for these flags on this machine."""

    model: str
    vllm_version: str
    machine: str
    flags: dict[str, dict[str, str]]
    utilization: float
    graphs_counted: bool  # this vLLM subtracts its CUDA-graph estimate from the KV memory


def calibration_key(config: ServeConfig, spec: ModelSpec, machine: Machine) -> CalibrationKey:
    spec = served_dtype(online_quantized(spec, config.quantization), config.dtype)
    s = settings_from(config, spec, machine)
    return CalibrationKey(
        config.model,
        str(s.rules.version),
        machine_key(machine.name, machine.total),
        term_flags(config, spec, s),
        s.utilization,
        s.cuda_graphs_counted,
    )


def calibration_of_log(
    config: ServeConfig, spec: ModelSpec, machine: Machine, figures: LogFigures, *, where: str, source: str, date: str
) -> Calibration:
    """vLLM's own start-up split, read from a log of this config's run, under this fit's key
    (the supervisor's record of a launch, and `sparktui fit --calibrate-from LOG`)."""
    from sparktui.core.calibration import calibration_from_log

    key = calibration_key(config, spec, machine)
    return calibration_from_log(
        figures,
        where=where,
        model=key.model,
        vllm_version=key.vllm_version,
        machine=key.machine,
        total=machine.total,
        utilization=key.utilization,
        flags=key.flags,
        graphs_counted=key.graphs_counted,
        source=source,
        date=date,
    )
