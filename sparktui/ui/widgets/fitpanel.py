"""The fit panel: the budget as one stacked bar against the pool, a marker at the current
MemAvailable, the verdict, its reasons, and numbered suggestions (one key applies them)."""

from __future__ import annotations

from rich.text import Text

from sparktui.core.units import GiB
from sparktui.ui.viewmodels import FitView
from sparktui.ui.widgets.base import TextPanel

__all__ = ["FitPanel", "FitView"]

SEGMENT_STYLES = ("os", "weights", "activations", "graphs", "kv", "others", "headroom")
SEGMENT_CHARS = {
    "os": "▒",
    "weights": "█",
    "activations": "▓",
    "graphs": "▚",
    "kv": "█",
    "others": "▤",  # what the other running servers reserve
    "headroom": "░",
}


VERDICT_TEXT = {
    "fits": "FITS",
    "tight": "TIGHT",
    "wont_start": "WON'T START",
    "unsafe": "UNSAFE",
    "error": "CHECK THE FORM",
    "n/a": "NOT AVAILABLE",
}


class FitPanel(TextPanel):
    COMPONENT_CLASSES = {
        *(f"fit--{k}" for k in SEGMENT_STYLES),
        "fit--fits",
        "fit--tight",
        "fit--wont_start",
        "fit--unsafe",
        "fit--error",
        "fit--na",
        "fit--label",
        "fit--marker",
        "fit--key",
        "fit--measured",
    }

    DEFAULT_CSS = """
    FitPanel { height: auto; }
    FitPanel > .fit--os { color: $foreground-muted; }
    FitPanel > .fit--weights { color: $secondary; }
    FitPanel > .fit--activations { color: $warning; }
    FitPanel > .fit--graphs { color: $accent; }
    FitPanel > .fit--kv { color: $primary; }
    FitPanel > .fit--others { color: $error; }
    FitPanel > .fit--headroom { color: $foreground-muted; }
    FitPanel > .fit--fits { color: $success; text-style: bold; }
    FitPanel > .fit--tight { color: $warning; text-style: bold; }
    FitPanel > .fit--wont_start { color: $error; text-style: bold; }
    FitPanel > .fit--unsafe { color: $error; text-style: bold reverse; }
    FitPanel > .fit--error { color: $error; text-style: bold; }
    FitPanel > .fit--na { color: $foreground-muted; text-style: bold; }
    FitPanel > .fit--label { color: $foreground-muted; }
    FitPanel > .fit--marker { color: $error; text-style: bold; }
    FitPanel > .fit--key { color: $accent; text-style: bold; }
    FitPanel > .fit--measured { color: $success; text-style: bold; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view = FitView("n/a", ["no fit yet"])

    def show(self, view: FitView) -> None:
        self.view = view
        self.changed()

    def _style(self, name: str):
        return self.component_style(f"fit--{name}")

    def render(self) -> Text:
        v = self.view
        width = max(10, self.draw_width)
        label = self._style("label")
        out = Text(no_wrap=False)
        out.append("Fit ", label)
        out.append(VERDICT_TEXT.get(v.verdict, v.verdict.upper()), self._style(v.verdict.replace("/", "")))
        if v.kv_cache_tokens is not None:
            out.append(f"  KV {v.kv_cache_tokens:,} tok", label)
            if v.kv_cache_bytes is not None:
                out.append(f" ({v.kv_cache_bytes / GiB:.1f} GiB)", label)
            if v.max_concurrency is not None:
                out.append(f" ×{v.max_concurrency:.1f}", label)
        if v.vllm_version:
            out.append(f"  vLLM {v.vllm_version}{' (assumed)' if v.vllm_version_assumed else ''}", label)
        out.append("\n")
        if v.speed:
            out.append(f"{v.speed}\n", label)
        if v.pool_bytes and v.segments:
            pool = v.pool_bytes
            bar = Text(no_wrap=True)
            used_cells = 0
            for _i, (key, _, n) in enumerate(v.segments):
                cells = round(max(0, n) / pool * width)
                cells = min(cells, width - used_cells)
                bar.append(SEGMENT_CHARS.get(key, "█") * cells, self._style(key if key in SEGMENT_STYLES else "os"))
                used_cells += cells
            if used_cells < width:
                bar.append(" " * (width - used_cells))
            out.append_text(bar)
            out.append("\n")
            marker = Text(no_wrap=True)
            if v.mem_available is not None:
                # vLLM's claim grows from the left; at start-up it must end left of what is free now.
                col = min(width - 1, max(0, round(v.mem_available / pool * width)))
                note = f" {'free now' if v.mem_available_live else 'idle'} {v.mem_available / GiB:.1f} GiB"
                if col + 1 + len(note) > width:
                    marker.append(" " * max(0, col - len(note)))
                    marker.append(note + " ", label)
                    marker.append("▲", self._style("marker"))
                else:
                    marker.append(" " * col)
                    marker.append("▲", self._style("marker"))
                    marker.append(note, label)
            out.append_text(marker)
            out.append("\n")
            # which terms a launch on this box (or a log) measured: each marked beside its figure
            marked = any(source != "predicted" for source in v.term_sources.values())
            for key, name, n in v.segments:
                out.append(SEGMENT_CHARS.get(key, "█"), self._style(key if key in SEGMENT_STYLES else "os"))
                out.append(f"{name} {n / GiB:.1f} ", label)
                source = v.term_sources.get(key)
                if marked and source:
                    out.append(f"{source} ", self._style("label" if source == "predicted" else "measured"))
            out.append(f"of {pool / GiB:.1f} GiB", label)
            if v.term_sources and not marked:
                out.append(", every term predicted", label)
            out.append("\n")
        for reason in v.reasons:
            out.append(f"• {reason}\n")
        number = 0
        for s in v.suggestions:
            if s.changes:
                number += 1
                out.append(f"[{number}] ", self._style("key"))
            else:
                out.append("  · ", self._style("label"))
            out.append(f"{s.text}\n")
        out.rstrip()
        return out
