"""What vLLM measured at a start-up on this box, kept so the next fit of the same key uses it.

vLLM prints its own split of the memory outside the KV cache when it starts: the weights it
loaded ("Model loading took"), the CUDA-graph estimate it subtracted ("Estimated CUDA graph
memory"), the KV memory left ("Available KV cache memory") and, in the line that starts "Free
memory on device", its torch peak and non-torch figures. Whatever of the request is not weights,
graphs or KV is the activation peak plus non-torch memory. A launch (or `sparktui fit
--calibrate-from LOG`) turns those into a Calibration, keyed by model, vLLM version and machine,
and per term by the flags that change that term: a fit with the same flags uses the measured
terms (its KV memory is then the launch's), a changed flag sends that term back to the model.

Pure: the caller reads the log and stores the records (commands/fit.py, runtime).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, field
from typing import Any

from sparktui.core.record import record
from sparktui.core.units import GiB
from sparktui.errors import UserError

# the terms a launch measures, as the fit's budget names them
TERMS = ("weights", "activation_non_torch", "cuda_graphs")
SOURCES = ("measured", "calibrated")  # a launch sparktui ran / a log the user gave
STORE_VERSION = 1
FIGURE_LIMIT = 1 << 60  # bytes: an exabyte, far past any GPU a log describes


@record
class Calibration:
    """What one launch measured for a model, vLLM version and machine, and the flags it ran with."""

    model: str
    vllm_version: str
    machine: str  # Machine.name and its total, as `machine_key` spells it
    figures: dict[str, int]  # TERMS (bytes) and kv_memory, requested
    flags: dict[str, dict[str, str]]  # per term: the flags that change it, as they were at the launch
    source: str  # "measured" or "calibrated"
    date: str  # ISO date of the launch or of the calibration
    log: str = ""  # where the figures came from
    split: dict[str, int] = field(default_factory=dict)  # vLLM's own torch peak / non-torch, when printed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Calibration | None:
        """A stored record, or None when it is not one this sparktui understands."""
        if not isinstance(data, dict):
            return None
        try:
            figures = {str(k): int(v) for k, v in data["figures"].items()}
            flags = {str(t): {str(k): str(v) for k, v in f.items()} for t, f in data["flags"].items()}
            split = {str(k): int(v) for k, v in (data.get("split") or {}).items()}
            record = cls(
                str(data["model"]),
                str(data["vllm_version"]),
                str(data["machine"]),
                figures,
                flags,
                str(data["source"]),
                str(data["date"]),
                str(data.get("log") or ""),
                split,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if record.source not in SOURCES or not all(t in figures for t in (*TERMS, "kv_memory")):
            return None
        return record

    def describe(self) -> str:
        where = "measured on this box" if self.source == "measured" else "calibrated from a log"
        return f"{where}, {self.date}" + (f" ({self.log})" if self.log else "")


def machine_key(name: str, total: int) -> str:
    return f"{name} {total / GiB:.2f} GiB"


@record
class LogFigures:
    """What one start-up log says about the memory outside the KV cache (bytes; None: not printed)."""

    weights: int | None
    kv_memory: int | None
    graphs: int | None
    total: int | None  # what CUDA called the device's total ("Free memory on device (x/TOTAL GiB)")
    utilization: float | None
    torch_peak: int | None = None
    non_torch: int | None = None
    version: str | None = None  # as the engine's banner spells it
    # the V0 engine prints its request ("x gpu_memory_utilization (0.70) = 55.09GiB") with the fraction
    # rounded to two places: the request is the figure to take, not total × the rounded fraction
    requested: int | None = None


def _unreadable(line: int, what: str, shown: str, unit: str = "") -> UserError:
    """The one wording of a damaged log's refusal: the line (as `grep -n` counts it) and the figure."""
    return UserError(f"line {line}: {what} of {shown}{unit}, which no vLLM prints; give the log vLLM wrote, undamaged")


def _number(figure: str, what: str, limit: float, unit: str, line: int) -> float:
    """A figure of the log as a number; UserError naming its line for one no vLLM prints (400 digits,
    1e999, "1.2.3": the patterns take digits and dots; a damaged log)."""
    from sparktui.core.vllm_events import UnreadableFigure

    try:
        value = float(figure)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or abs(value) > limit:
        raise _unreadable(line, what, UnreadableFigure(what, figure[:24], "", len(figure)).shown(), unit)
    return value


class _Launch:
    """The last launch's text and the number of its first line, to name the line of a figure."""

    def __init__(self, text: str, first_line: int) -> None:
        self.text, self.first_line = text, first_line

    def line_of(self, m: re.Match[str], group: int | str = 1) -> int:
        return self.first_line + self.text.count("\n", 0, m.start(group))  # "\r" (progress bars) is no line

    def bytes(self, m: re.Match[str]) -> int:
        """The match's first group, in GiB, as bytes."""
        return int(_number(m.group(1), "a memory figure", FIGURE_LIMIT / GiB, " GiB", self.line_of(m)) * GiB)

    def readable(self, patterns: tuple[str | re.Pattern[str], ...]) -> None:
        """UserError naming the line where a pattern's words stand with a figure that is no number
        ("Available KV cache memory: x GiB", "(x/119.63 GiB)"): the strict pattern would pass it by, and the
        log would read as one without that line."""
        for pattern in patterns:
            for m in _loose(pattern).finditer(self.text):
                for name, figure in m.groupdict().items():
                    gib = self.text.startswith(("G", " G", "/"), m.end(name))  # not the seconds of "Model loading took"
                    what, unit = ("a memory figure", " GiB") if gib else ("a figure", "")
                    _number(figure, what, FIGURE_LIMIT / GiB, unit, self.line_of(m, name))


_LOOSE: dict[str, re.Pattern[str]] = {}


def _loose(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    """The pattern with each figure ([\\d.]+) taking any word, named f0, f1, …"""
    text = pattern if isinstance(pattern, str) else pattern.pattern
    if text not in _LOOSE:
        parts = text.split(r"[\d.]+")
        _LOOSE[text] = re.compile(
            "".join(part + (f"(?P<f{i}>[^\\s/()]+)" if i < len(parts) - 1 else "") for i, part in enumerate(parts))
        )
    return _LOOSE[text]


def _gib(launch: _Launch, *patterns: str | re.Pattern[str]) -> int | None:
    """The first figure the first pattern that matches finds (signed: vLLM prints negative ones)."""
    launch.readable(patterns)
    for pattern in patterns:
        if m := re.search(pattern, launch.text):
            return launch.bytes(m)
    return None


def _device_total(launch: _Launch) -> int | None:
    """What CUDA called the device's total; UserError naming the line of a total of 0 (a damaged log:
    the fit would silently take the profile's machine instead)."""
    patterns = (r"Free memory on device (?:\S+ )?\([\d.]+/([\d.]+) GiB\)", r"total_gpu_memory \(([\d.]+) ?GiB\)")
    total = _gib(launch, *patterns)
    if total is not None and total <= 0:
        m = next(m for p in patterns if (m := re.search(p, launch.text)))
        raise _unreadable(launch.line_of(m), "a device total", m.group(1), " GiB")
    return total


def _least_gib(launch: _Launch, *patterns: str | re.Pattern[str]) -> int | None:
    """The least of the figures the first pattern that matches finds: each tensor-parallel rank prints
    its own KV memory, and vLLM sizes every rank's cache by the smallest."""
    launch.readable(patterns)
    for pattern in patterns:
        if found := list(re.finditer(pattern, launch.text)):
            return min(launch.bytes(m) for m in found)
    return None


_COUNT_WORDS = {  # the log's token counts (core.vllm_events.TOKEN_FIELDS), in words and unit
    "kv_cache_tokens": ("a KV cache size", " tokens"),
    "max_model_len": ("a max model len", " tokens"),
    "max_concurrency": ("a maximum concurrency", "x"),
}
_COUNT_LINES = ("KV cache size", "Maximum concurrency", "max model len", "max_seq_len", "max_model_len")


def _counts_readable(lines: list[str], first: int, number: int) -> None:
    """UserError naming the line when the last launch has a token count or concurrency no vLLM prints
    (a KV cache size of 400 digits): the log is damaged, and a calibration from it would be too."""
    from sparktui.core.vllm_events import UnreadableFigure
    from sparktui.core.vllm_log import parse_line

    for line in lines[first:]:
        for event in parse_line(line) if any(w in line for w in _COUNT_LINES) else ():
            if isinstance(event, UnreadableFigure) and event.field in _COUNT_WORDS:
                raise _unreadable(number, _COUNT_WORDS[event.field][0], event.shown(), _COUNT_WORDS[event.field][1])
        number += line.count("\n")


def read_log_figures(text: str) -> LogFigures:
    """The figures of the last launch the log holds, as `inspect-log` summarises it; UserError naming the
    line of a figure no vLLM prints (a damaged log)."""
    from sparktui.core.vllm_log import R_AVAIL_KV, R_V0_KV, R_WEIGHTS, last_launch_start

    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = text.splitlines(keepends=True)
    first = last_launch_start(lines)
    number = 1 + sum(line.count("\n") for line in lines[:first])  # as grep -n counts (splitlines cuts at \r too)
    _counts_readable(lines, first, number)
    launch = _Launch("".join(lines[first:]), number)
    text = launch.text
    util = (
        re.search(r"'gpu_memory_utilization': ([\d.]+)", text)
        or re.search(r"Desired GPU memory utilization is \(([\d.]+),", text)
        or re.search(r"x gpu_memory_utilization \(([\d.]+)\)", text)  # the V0 engine's worker.py
    )
    engine = version.group(1) if (version := re.search(r"LLM engine \(v([^)\s]+)\)", text)) else None
    utilization = _number(util.group(1), "a --gpu-memory-utilization", 1.0, "", launch.line_of(util)) if util else None
    if utilization is None and "non-default args:" in text and (release := release_version(engine)):
        # the flag not among the args vLLM lists as given: it ran at its own default for that release
        from sparktui.core.vllm_rules import rules_for

        utilization = rules_for(release).default_utilization
    return LogFigures(
        weights=_gib(launch, R_WEIGHTS),
        kv_memory=_least_gib(launch, R_AVAIL_KV, R_V0_KV),
        graphs=_gib(launch, r"Estimated CUDA graph memory: (-?[\d.]+) GiB"),
        total=_device_total(launch),
        utilization=utilization,
        torch_peak=_gib(launch, r"(-?[\d.]+) GiB for peak activation", r"activation peak memory takes (-?[\d.]+) ?GiB"),
        non_torch=_gib(launch, r"(-?[\d.]+) GiB for non-torch memory", r"non_torch_memory takes (-?[\d.]+) ?GiB"),
        version=engine,
        requested=_gib(launch, r"x gpu_memory_utilization \([\d.]+\) = ([\d.]+) ?GiB"),
    )


def calibration_from_log(
    f: LogFigures,
    *,
    where: str,
    model: str,
    vllm_version: str,
    machine: str,
    total: int,
    utilization: float,
    flags: dict[str, dict[str, str]],
    graphs_counted: bool,
    source: str,
    date: str,
) -> Calibration:
    """The Calibration a start-up log's figures (`read_log_figures`, read once per log) give for these
    flags; a clear error when the log lacks them (a start-up that did not reach the KV cache, or not a
    vLLM log)."""
    missing = [
        name for name, v in (("Model loading took", f.weights), ("Available KV cache memory", f.kv_memory)) if v is None
    ]
    if missing:
        raise UserError(
            f"{where}: no {' and no '.join(repr(m) for m in missing)} line; give the log of a vLLM start-up that "
            "reached 'Available KV cache memory' (vLLM 0.10 or later, INFO level)"
        )
    assert f.weights is not None and f.kv_memory is not None
    if f.kv_memory <= 0:
        raise UserError(
            f"{where}: that start-up found no memory for the KV cache (Available KV cache memory: "
            f"{f.kv_memory / GiB:.2f} GiB) and vLLM did not start; give the log of a start-up that did"
        )
    rounded = 0.005 if f.requested is not None else 1e-6  # V0 prints the fraction to two places
    if f.utilization is not None and abs(f.utilization - utilization) > rounded:
        raise UserError(
            f"{where}: that start-up ran with --gpu-memory-utilization {f.utilization:g}, these flags say "
            f"{utilization:g}; give the flags it ran with"
        )
    total = f.total or total
    requested = f.requested or math.ceil(total * utilization)
    graphs = (f.graphs or 0) if graphs_counted else 0
    rest = requested - f.weights - graphs - f.kv_memory
    split = {k: v for k, v in (("torch_peak", f.torch_peak), ("non_torch", f.non_torch)) if v is not None}
    return Calibration(
        model=model,
        vllm_version=vllm_version,
        machine=machine,
        figures={
            "weights": f.weights,
            "activation_non_torch": max(0, rest),
            "cuda_graphs": graphs,
            "kv_memory": f.kv_memory,
            "requested": requested,
        },
        flags=flags,
        source=source,
        date=date,
        log=where,
        split=split,
    )


def release_version(text: str | None) -> str | None:
    """The vLLM release a log's banner names ('0.20.1rc1.dev91+g…' → '0.20.1'); None for a source
    build's '0.1.devN' or anything else the rules do not know."""
    from sparktui.core.vllm_rules import parse_version

    try:
        return str(parse_version(str(text or "").split("+")[0].split("rc")[0].split(".dev")[0], "the log's version"))
    except UserError:
        return None


def load_store(text: str) -> list[Calibration]:
    """The records of a calibrations file; an unreadable file reads as none (it is a cache)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
        return []
    return [c for c in (Calibration.from_dict(x) for x in data.get("entries") or []) if c is not None]


def dump_store(records: list[Calibration]) -> str:
    return json.dumps({"version": STORE_VERSION, "entries": [r.to_dict() for r in records]}, indent=1) + "\n"


def with_record(records: list[Calibration], new: Calibration) -> list[Calibration]:
    """The records with `new` replacing any of the same model, version, machine and flags."""
    same = (new.model, new.vllm_version, new.machine, json.dumps(new.flags, sort_keys=True))
    kept = [r for r in records if (r.model, r.vllm_version, r.machine, json.dumps(r.flags, sort_keys=True)) != same]
    return [*kept, new][-200:]  # a bounded cache


def best_match(
    records: list[Calibration], model: str, vllm_version: str, machine: str, flags: dict[str, dict[str, str]]
) -> Calibration | None:
    """The newest record of this model, version and machine, preferring the one whose terms' flags
    agree most with `flags`."""
    mine = [r for r in records if (r.model, r.vllm_version, r.machine) == (model, vllm_version, machine)]
    if not mine:
        return None
    return max(enumerate(mine), key=lambda ir: (sum(ir[1].flags.get(t) == flags.get(t) for t in TERMS), ir[0]))[1]


def differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """'flag: was → now' for every flag of a term that changed since the launch."""
    return [
        f"{k} {old.get(k, '—')} → {new.get(k, '—')}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
    ]


__all__ = [
    "SOURCES",
    "TERMS",
    "Calibration",
    "LogFigures",
    "best_match",
    "calibration_from_log",
    "differences",
    "dump_store",
    "load_store",
    "machine_key",
    "read_log_figures",
    "release_version",
    "with_record",
]
