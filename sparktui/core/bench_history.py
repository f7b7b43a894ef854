"""Measured runs from `sparktui bench`'s history, read tolerantly, to calibrate the speed estimate.

`sparktui bench` appends one JSON object per run to <state dir>/bench/history.jsonl
(runtime.bench.history.HistoryRecord, schema_version 1): `key` {profile, model, vllm_version, flags},
`server` {model_path, max_model_len, …}, `settings` {prompt_tokens, output_tokens, …} and `runs`,
one per concurrency level {users, decode_tok_s_per_user, ttft_p50_s, prompt_tokens_mean, partial,
errors, …}. Only the fields below are read; a line that is not JSON, a record of a newer schema, or
a level without a decode figure is skipped, never an error: the history belongs to another tool.

Pure: the caller reads the file and passes its lines.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktui.files import read_regular, warn_shared_folder

HISTORY_LIMIT = 256 << 20  # ~100,000 runs; past that the file is not one sparktui wrote

HISTORY_SCHEMA = 1  # the newest schema this reader knows (the file: sparktui.paths.bench_history_path)


@dataclass(frozen=True)
class MeasuredRun:
    """One concurrency level of one benchmark run."""

    model: str  # the served model name
    model_path: str | None  # what the profile serves, when sparktui started the server
    vllm_version: str | None
    flags: tuple[str, ...]
    users: int
    decode_tok_s: float  # per user
    ttft_s: float | None
    prompt_tokens: float | None
    output_tokens: int | None
    recorded_at: float

    def names(self) -> set[str]:
        """Every name this run's model goes by (served name, path, its last part)."""
        out = {self.model}
        if self.model_path:
            out |= {self.model_path, self.model_path.rstrip("/").split("/")[-1]}
        return {n.strip().lower() for n in out if n}

    def flag(self, name: str) -> str | None:
        """The value of `--name` among the recorded flags (either `--x v` or `--x=v`)."""
        for i, tok in enumerate(self.flags):
            if tok == name and i + 1 < len(self.flags):
                return self.flags[i + 1]
            if tok.startswith(name + "="):
                return tok.split("=", 1)[1]
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and value not in (float("inf"), float("-inf")) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _record_runs(record: Mapping[str, Any]) -> list[MeasuredRun]:
    schema = record.get("schema_version", 1)
    if not isinstance(schema, int) or schema > HISTORY_SCHEMA:
        return []
    key, server, settings = (_mapping(record.get(name)) for name in ("key", "server", "settings"))
    model = _str(key.get("model")) or _str(server.get("model"))
    if model is None:
        return []
    raw_flags = key.get("flags") if isinstance(key.get("flags"), list) else server.get("flags")
    flags = tuple(f for f in raw_flags if isinstance(f, str)) if isinstance(raw_flags, list) else ()
    recorded = _num(record.get("recorded_at")) or 0.0
    out = []
    levels = record.get("runs")
    for level in levels if isinstance(levels, list) else []:  # a damaged record: "runs": 7
        if not isinstance(level, Mapping) or level.get("partial") or (_num(level.get("errors")) or 0) > 0:
            continue
        users = _num(level.get("users"))
        decode = _num(level.get("decode_tok_s_per_user"))
        if users is None or users < 1 or decode is None or decode <= 0:
            continue
        output = _num(settings.get("output_tokens"))
        out.append(
            MeasuredRun(
                model=model,
                model_path=_str(server.get("model_path")),
                vllm_version=_str(key.get("vllm_version")) or _str(server.get("vllm_version")),
                flags=flags,
                users=int(users),
                decode_tok_s=decode,
                ttft_s=_num(level.get("ttft_p50_s")),
                prompt_tokens=_num(level.get("prompt_tokens_mean")) or _num(settings.get("prompt_tokens")),
                output_tokens=int(output) if output else None,
                recorded_at=recorded,
            )
        )
    return out


def history_lines(path: Path) -> list[str]:
    """The history file's lines that are UTF-8 text (a damaged line is skipped, as one that is not
    JSON is); none when there is no file. UserError naming it when it is no regular file (an open()
    of a FIFO there waited for a writer forever) or larger than HISTORY_LIMIT."""
    warn_shared_folder(path.parent, "benchmark record")  # its figures are shown (the speed line), never acted on
    try:
        data = read_regular(path, HISTORY_LIMIT, "benchmark history (JSON lines)")
    except FileNotFoundError:
        return []
    out = []
    for raw in data.splitlines():
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if line.strip():
            out.append(line)
    return out


def parse_history(lines: Iterable[str]) -> list[MeasuredRun]:
    """Every usable level of every record, oldest first; anything unreadable is skipped."""
    runs: list[MeasuredRun] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, Mapping):
            runs.extend(_record_runs(record))
    return runs


def matching(
    runs: Iterable[MeasuredRun],
    model: str,
    *,
    vllm_version: str | None = None,
    quantization: str | None = None,
    also: Iterable[str] = (),
) -> list[MeasuredRun]:
    """Runs of the same model (by any of its names), the same vLLM version when one is given, and
    the same `--quantization` (None matches runs without the flag: the checkpoint's own format)."""
    wanted = {n.strip().lower() for n in (model, model.rstrip("/").split("/")[-1], *also) if n}
    out = []
    for run in runs:
        if not (run.names() & wanted):
            continue
        if vllm_version is not None and run.vllm_version not in (None, vllm_version):
            continue
        if (run.flag("--quantization") or None) != (quantization or None):
            continue
        out.append(run)
    return out


@dataclass(frozen=True)
class SpeedCalibration:
    factor: float  # measured / predicted, the median over the runs compared
    runs: int
    note: str


def calibrate(pairs: list[tuple[MeasuredRun, float]], *, latest: int = 8) -> SpeedCalibration | None:
    """From (measured run, what the uncorrected model predicts for it) pairs: the median ratio over
    the `latest` runs, kept within 0.25–4 (beyond that the run measured something else)."""
    usable = [(run, predicted) for run, predicted in pairs if predicted > 0]
    if not usable:
        return None
    usable.sort(key=lambda pair: pair[0].recorded_at)
    recent = usable[-latest:]
    ratios = [run.decode_tok_s / predicted for run, predicted in recent]
    factor = min(4.0, max(0.25, statistics.median(ratios)))
    versions = sorted({run.vllm_version or "?" for run, _ in recent})
    note = (
        f"calibrated by {len(recent)} measured level{'s' if len(recent) != 1 else ''} "
        f"(sparktui bench, vLLM {', '.join(versions)}): measured / predicted = {factor:.2f}"
    )
    return SpeedCalibration(factor, len(recent), note)
