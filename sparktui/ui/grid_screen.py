"""The trade-off grid beside the fit: users × context for the current KV dtype and fp8, each cell
a fit with those flags (core.grid); Enter applies the highlighted cell to the form."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

VERDICT_WORD = {"fits": "fits", "tight": "tight", "wont_start": "no", "unsafe": "unsafe"}


def length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"


class GridScreen(ModalScreen[object]):
    """Dismisses with the chosen core.grid.Cell, or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="grid.cancel")]
    COMPONENT_CLASSES = {"grid--fits", "grid--tight", "grid--wont_start", "grid--unsafe", "grid--label"}
    DEFAULT_CSS = """
    GridScreen > .grid--fits { color: $success; }
    GridScreen > .grid--tight { color: $warning; }
    GridScreen > .grid--wont_start { color: $error; }
    GridScreen > .grid--unsafe { color: $error; text-style: bold reverse; }
    GridScreen > .grid--label { color: $foreground-muted; }
    GridScreen .grid-dialog { width: auto; max-width: 100%; }
    GridScreen DataTable { height: auto; max-height: 100%; }
    """

    def __init__(self, grid: Any, model: str) -> None:
        super().__init__()
        self.grid, self.model = grid, model
        self.rows: list[tuple[str, int]] = []  # (kv dtype, max_num_seqs) per table row

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog grid-dialog"):
            yield Static(f"Trade-off grid: {self.model}", classes="dialog-title")
            yield Static(
                "rows: users (--max-num-seqs); columns: context (--max-model-len); ▶ the form's cell. "
                "tight: the KV cache holds fewer full-length requests than users, or little room is left",
                classes="dialog-note",
            )
            yield DataTable(id="grid-table", cursor_type="cell", zebra_stripes=False)
            yield Label("Enter: apply the cell to the form    Esc: close", classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column("KV", key="kv")
        table.add_column("users", key="users")
        for n in self.grid.lens:
            table.add_column(length_label(n), key=str(n))
        current_row = current_col = 0
        for dtype, name in zip(self.grid.dtypes, self.grid.dtype_names, strict=True):
            for seqs in self.grid.seqs:
                label = self.get_component_rich_style("grid--label")
                row: list[Any] = [Text(name, style=label), Text(str(seqs), justify="right")]
                for col, length in enumerate(self.grid.lens):
                    cell = self.grid.cell(seqs, length, dtype)
                    word = VERDICT_WORD.get(cell.verdict, cell.verdict)
                    row.append(Text(("▶" if cell.current else " ") + word, style=self._style(cell.verdict)))
                    if cell.current:
                        current_row, current_col = len(self.rows), col + 2
                table.add_row(*row)
                self.rows.append((dtype, seqs))
        table.move_cursor(row=current_row, column=current_col)
        table.focus()

    def _style(self, verdict: str) -> Any:
        name = f"grid--{verdict}"
        return self.get_component_rich_style(name) if name in self.COMPONENT_CLASSES else ""

    def highlighted(self) -> Any:
        table = self.query_one(DataTable)
        row, col = table.cursor_coordinate
        if col < 2 or row >= len(self.rows):
            return None
        dtype, seqs = self.rows[row]
        return self.grid.cell(seqs, self.grid.lens[col - 2], dtype)

    @on(DataTable.CellSelected)
    def _selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        cell = self.highlighted()
        if cell is not None:
            self.dismiss(cell)

    def action_cancel(self) -> None:
        self.dismiss(None)
