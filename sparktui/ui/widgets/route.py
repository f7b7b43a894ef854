"""The routes under the memory gauge: each `sparktui route`'s models (which are up, requests in
flight and waiting), the swap under way, and the last swaps with their times. Shown only while a
route runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.geometry import Size

from sparktui.ui.widgets.base import TextPanel

if TYPE_CHECKING:
    from sparktui.ui.serverviews import RouteView

SWAPS_SHOWN = 4
MARK = {"up": "●", "starting": "◐", "draining": "◑", "stopping": "◑"}


class RouteBox(TextPanel):
    COMPONENT_CLASSES = {"route--head", "route--up", "route--down", "route--bad", "route--muted"}
    DEFAULT_CSS = """
    RouteBox { height: auto; display: none; }
    RouteBox.-shown { display: block; }
    RouteBox > .route--head { color: $accent; text-style: bold; }
    RouteBox > .route--up { color: $success; text-style: bold; }
    RouteBox > .route--down { color: $foreground-muted; }
    RouteBox > .route--bad { color: $error; }
    RouteBox > .route--muted { color: $foreground-muted; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.routes: tuple[RouteView, ...] = ()

    def show(self, routes: tuple[RouteView, ...]) -> None:
        if routes == self.routes:
            return
        self.routes = routes
        self.set_class(bool(routes), "-shown")
        self.changed()

    def lines(self) -> list[tuple[str, str]]:
        """(text, style name) per line."""
        out: list[tuple[str, str]] = []
        for r in self.routes:
            out.append((f"Route {r.listen}" + (f"  {r.queued} queued" if r.queued else ""), "head"))
            for m in r.models:
                extra = [f"{m.in_flight} in flight" if m.in_flight else "", f"{m.queued} waiting" if m.queued else ""]
                detail = "  ".join(x for x in extra if x)
                keep = " (kept)" if m.keep else ""
                text = f" {MARK.get(m.status, '○')} {m.name}{keep} :{m.port} {m.status}" + (
                    f"  {detail}" if detail else ""
                )
                out.append((text, "up" if m.status == "up" else "down"))
            if r.swapping is not None:
                out.append((f" swapping to {r.swapping[0]}: {r.swapping[1]}", "up"))
            for s in r.swaps[-SWAPS_SHOWN:]:
                out.append((" " + s.line(), "muted" if s.ok else "bad"))
        return out

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, (text, style) in enumerate(self.lines()):
            if i:
                out.append("\n")
            out.append(text, self.component_style(f"route--{style}"))
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines())
