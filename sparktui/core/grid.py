"""The trade-off grid: users (max_num_seqs) against context (max_model_len), for the current KV
cache dtype and for fp8, each cell a direct fit with those flags (so its verdict is the fit's).

The DGX Spark tuning guide's central table is this grid; its KV sizes assume far more KV heads
than a GQA 70B has (see README, "The trade-off grid"), so the cells here come from the model's
own config through the fit engine, not from the guide's figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.fit import FitResult, settings_from
from sparktui.core.machine import Machine
from sparktui.core.modelspec import ModelSpec

SEQS = (1, 2, 5, 10, 20, 50)
LENS = (4096, 8192, 16384, 32768, 65536, 131072)
FP8 = "fp8"


@dataclass(frozen=True)
class Cell:
    max_num_seqs: int
    max_model_len: int
    kv_cache_dtype: str  # the flag's value (auto, fp8, …)
    kv_cache_dtype_name: str  # what it resolves to for this model (bfloat16, fp8_e4m3, …)
    verdict: str
    kv_bytes_needed: int  # max_num_seqs requests of max_model_len tokens, whole blocks
    kv_cache_bytes: int  # the KV memory that fit left
    current: bool  # the form's own max_num_seqs, max_model_len and KV dtype

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_cache_dtype_name": self.kv_cache_dtype_name,
            "verdict": self.verdict,
            "kv_bytes_needed": self.kv_bytes_needed,
            "kv_cache_bytes": self.kv_cache_bytes,
            "current": self.current,
        }


@dataclass(frozen=True)
class Grid:
    seqs: tuple[int, ...]
    lens: tuple[int, ...]
    dtypes: tuple[str, ...]  # flag values, the current one first
    dtype_names: tuple[str, ...]  # what each resolves to
    cells: tuple[Cell, ...]
    current: tuple[int, int, str]  # (max_num_seqs, max_model_len, kv_cache_dtype) of the form

    def cell(self, seqs: int, max_len: int, dtype: str) -> Cell:
        for c in self.cells:
            if (c.max_num_seqs, c.max_model_len, c.kv_cache_dtype) == (seqs, max_len, dtype):
                return c
        raise KeyError((seqs, max_len, dtype))

    def to_dict(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.cells]


def axes(current_seqs: int, current_len: int, limit: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Rows and columns: the guide's steps (columns up to the model's limit) and the current values."""
    seqs = tuple(sorted({*SEQS, current_seqs}))
    lens = tuple(sorted({*(n for n in LENS if not limit or n <= limit), current_len}))
    return seqs, lens


def build_grid(
    config: ServeConfig,
    spec: ModelSpec,
    machine: Machine,
    base: FitResult,
    run_fit: Callable[[ServeConfig], FitResult],
) -> Grid:
    """The grid around `config` (a ServeConfig), whose own fit is `base`; `run_fit(config)` fits
    one cell's config exactly as `sparktui fit` would (same machine, memory, environment)."""
    # the max_num_seqs the fit used: vLLM's default for this machine when the flag is unset
    current_seqs = settings_from(config, spec, machine).max_num_seqs
    seqs_flag = config.max_num_seqs
    limit = spec.max_len_limit or spec.max_position_embeddings
    current_len = base.max_model_len
    current_dtype = config.kv_cache_dtype or "auto"
    seqs, lens = axes(current_seqs, current_len, limit)
    current = (current_seqs, current_len, current_dtype)
    dtypes: list[str] = []
    names: list[str] = []
    cells: list[Cell] = []
    for dtype in dict.fromkeys((current_dtype, FP8)):
        these: list[Cell] = []
        for n in seqs:
            for length in lens:
                # the current row keeps an unset flag unset, so its cells are the form's own fit
                flag = seqs_flag if n == current_seqs else n
                r = run_fit(config.replace(max_num_seqs=flag, max_model_len=length, kv_cache_dtype=dtype))
                these.append(
                    Cell(n, length, dtype, r.kv_cache_dtype.split()[0], r.verdict, n * r.kv_bytes_per_request,
                         r.kv_cache_bytes, (n, length, dtype) == current)
                )  # fmt: skip
        if these[0].kv_cache_dtype_name in names:
            continue  # the current dtype resolves to fp8 already (an FP8-KV checkpoint): one set
        dtypes.append(dtype)
        names.append(these[0].kv_cache_dtype_name)
        cells += these
    return Grid(seqs, lens, tuple(dtypes), tuple(names), tuple(cells), current)


VERDICT_MARK = {"fits": "fits", "tight": "tight", "wont_start": "no", "unsafe": "unsafe"}


def render_grid(grid: Grid) -> list[str]:
    """The grid as text: one table per KV dtype, rows users, columns context; * marks the current cell."""
    lines: list[str] = []
    for dtype, name in zip(grid.dtypes, grid.dtype_names, strict=True):
        lines += ["", f"KV cache {dtype}" + (f" ({name})" if name != dtype else "")]
        lines.append(f"  {'users':>5} " + "".join(f"{_k(n):>9}" for n in grid.lens))
        for n in grid.seqs:
            row = f"  {n:>5} "
            for length in grid.lens:
                cell = grid.cell(n, length, dtype)
                row += f"{VERDICT_MARK[cell.verdict] + ('*' if cell.current else ''):>9}"
            lines.append(row)
    lines.append("")
    lines.append("  users = --max-num-seqs, columns = --max-model-len; * the current flags")
    return lines


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"
