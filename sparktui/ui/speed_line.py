"""The fit panel's speed line: core.fit_speed's figure (the one `sparktui fit` prints), rendered
in one line, with the latest `sparktui bench` measurement of this model beside it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.fit import FitResult
    from sparktui.core.machine import Machine
    from sparktui.core.modelspec import ModelSpec


class BenchHistory:
    """`sparktui bench`'s history, re-read only when the file changes."""

    def __init__(self) -> None:
        self._cache: tuple[tuple[Path, int], Any] | None = None

    def runs(self) -> list[Any]:
        from sparktui.paths import bench_history_path

        path = bench_history_path()
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return []
        from sparktui.core import bench_history as history  # with a history only (no bench yet: no import)

        cached = self._cache
        if cached is None or cached[0] != (path, stamp):
            try:  # history_lines: a FIFO there hangs nothing
                cached = ((path, stamp), history.parse_history(history.history_lines(path)))
            except (UserError, OSError):
                return []
            self._cache = cached
        return list(cached[1])

    def speed_line(
        self, config: ServeConfig, spec: ModelSpec, machine: Machine, result: FitResult, host_mem_total: int | None
    ) -> str | None:
        """The predicted speed for the fit's result, as `sparktui fit` decides it (SPARKTUI_BANDWIDTH_GBS
        as its --bandwidth; this history's runs where they apply), kept on the result as its speed;
        None where none is predicted."""
        from sparktui.core import speed as sp
        from sparktui.core.fit_speed import bandwidth_setting, speed_for_fit

        try:
            bandwidth = bandwidth_setting(None, os.environ)
        except UserError as exc:  # as `sparktui fit` refuses it
            return f"speed not predicted: {exc}"
        speed = speed_for_fit(
            result.served_spec or spec,  # the weights as served (--dtype, drafter), as the fit's own figure
            config,
            machine,
            max_model_len=result.max_model_len,
            max_concurrency=result.max_concurrency,
            bandwidth_gbs=bandwidth,
            host_mem_total=host_mem_total,
            history=self.runs,
        )
        result.speed = speed.estimate
        if speed.estimate is None:
            return None
        line = sp.summary_line(speed.estimate)
        return f"{line}\n{sp.measured_line(*speed.measured[-1])}" if speed.measured else line
