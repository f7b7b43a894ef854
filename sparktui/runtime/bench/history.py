"""The benchmark history: every run appended to <state dir>/bench/history.jsonl, one
`HistoryRecord` per line, versioned by `schema_version` and meant to be read by other tools
(core.bench_history reads it for the speed predictor's calibration)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError

from sparktui.core.bench_history import history_lines
from sparktui.runtime.bench.results import BenchReport, RunFigures

SCHEMA_VERSION = 1


class HistoryKey(BaseModel):
    """What makes two runs comparable: the same profile, model, vLLM version and flags."""

    profile: str | None
    model: str
    vllm_version: str | None
    flags: list[str]


class HistoryRecord(RunFigures):
    """One line of <state dir>/bench/history.jsonl.

    schema_version 1 fields:
      recorded_at   unix time the run finished
      key           HistoryKey: profile, model (served name), vllm_version, flags
      server        BenchServer (url, port, model_path, max_model_len, guard_armed …)
      settings      BenchSettings (users, prompt_tokens, output_tokens, requests_per_user, api)
      runs          LevelResult per concurrency level (seconds, tokens/s, GiB, fraction, watts, joules)
      sweep         SweepResult or null
      partial, error  whether the run ended early, and why
    Readers should skip lines they cannot parse and records with a newer schema_version.
    """

    schema_version: int = SCHEMA_VERSION
    recorded_at: float
    key: HistoryKey


def history_path() -> Path:
    from sparktui.paths import bench_history_path

    return bench_history_path()


def record_of(report: BenchReport) -> HistoryRecord:
    server = report.server
    return HistoryRecord(
        recorded_at=report.finished_at,
        key=HistoryKey(
            profile=server.profile, model=server.model, vllm_version=server.vllm_version, flags=server.flags
        ),
        server=server,
        settings=report.settings,
        runs=report.runs,
        sweep=report.sweep,
        partial=report.partial,
        error=report.error,
    )


def append_history(report: BenchReport, path: Path | None = None) -> HistoryRecord:
    """Append the run as one JSON line (one write, so concurrent runs never interleave lines)."""
    record = record_of(report)
    line = record.model_dump_json() + "\n"
    fd = os.open(path or history_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return record


def read_history(path: Path | None = None) -> list[HistoryRecord]:
    """Every readable record, oldest first; lines that do not parse (or a newer schema) are skipped.
    UserError naming the file when it is no regular file (a FIFO, a folder, a symlink loop)."""
    out = []
    for line in history_lines(path or history_path()):
        try:
            record = HistoryRecord.model_validate_json(line)
        except ValidationError:
            continue
        if record.schema_version <= SCHEMA_VERSION:
            out.append(record)
    return out


def previous_run(
    records: Sequence[HistoryRecord], profile: str | None, before: float | None = None
) -> HistoryRecord | None:
    """The latest complete run of the same profile (finished before `before`, when given)."""
    for record in reversed(records):
        if record.key.profile == profile and not record.partial and (before is None or record.recorded_at < before):
            return record
    return None
