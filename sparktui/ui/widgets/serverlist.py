"""The server list over the server pane: every server this machine runs, one line each (port,
profile, condition, what it reserves of the pool, its guard priority), a cluster's nodes under
its head, and a marker on the one the pane follows. Shown only when there is more than one."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message

from sparktui.core.vllm_events import phase_label
from sparktui.ui.serverviews import NodeView, ServerEntry
from sparktui.ui.widgets.base import TextPanel

GiB = 2**30
BAD = ("failed", "lost", "wedged")


def fitted(e: ServerEntry, width: int) -> tuple[str, str, int]:
    """(condition, reservation and priority, room for the profile's name) that fit in `width`
    (Textual wraps a long line: each must fit). The start-up phase stays as long as it can: the
    words around it shorten first ("starting (loading weights)", then "loading weights"), and the
    bare condition comes last."""
    gib = e.reserved_bytes / GiB if e.reserved_bytes is not None else None
    reserve = f"{gib:.1f} GiB" if gib is not None else "? GiB"
    tails = (
        f"  reserves {reserve}  priority {e.priority}",
        f"  {reserve}  p{e.priority}",
        f"  {gib:.1f}G p{e.priority}" if gib is not None else f"  ?G p{e.priority}",
    )
    want = min(len(e.profile), 8)
    bare = e.condition.condition.value
    full = e.text()
    phase_only = full[len("starting (") : -1] if full.startswith("starting (") else full
    room = 0
    for condition in dict.fromkeys((full, phase_only, bare)):
        for tail in tails:
            room = width - len(condition) - len(tail)
            if room >= want:
                return condition, tail, room
    return bare, tails[-1], max(4, room)


def node_line(node: NodeView, wide: bool) -> str:
    """A cluster node under its head: host, rank, phase (or how it ended) and its MemAvailable."""
    ended = f" exit {node.exit_reason}" if node.exit_reason else ""
    if wide:
        phase = f"/{phase_label(node.phase)}" if node.phase else ""
        memory = f"  avail {node.available_gib:.1f} GiB" if node.available_gib is not None else ""
        return f"    node {node.host} r{node.rank} {node.status}{phase}{ended}{memory}"
    memory = f" {node.available_gib:.1f}G avail" if node.available_gib is not None else ""
    return f"    {node.host} r{node.rank} {phase_label(node.phase) if node.phase else node.status}{ended}{memory}"


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


class ServerList(TextPanel):
    COMPONENT_CLASSES = {"srvlist--head", "srvlist--selected", "srvlist--state", "srvlist--bad", "srvlist--muted"}
    DEFAULT_CSS = """
    ServerList { height: auto; display: none; }
    ServerList.-shown { display: block; }
    ServerList > .srvlist--head { color: $accent; text-style: bold; }
    ServerList > .srvlist--selected { color: $primary; text-style: bold; }
    ServerList > .srvlist--state { color: $foreground; }
    ServerList > .srvlist--bad { color: $error; text-style: bold; }
    ServerList > .srvlist--muted { color: $foreground-muted; }
    """

    class Selected(Message):
        """A line was clicked: follow that server."""

        def __init__(self, port: int) -> None:
            super().__init__()
            self.port = port

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.entries: tuple[ServerEntry, ...] = ()
        self.selected: int | None = None
        self.keys = ("Ctrl+R", "Ctrl+E")  # next, previous
        self._line_ports: list[int | None] = []

    def show(self, entries: tuple[ServerEntry, ...], selected: int | None, keys: tuple[str, str]) -> None:
        self.entries, self.selected, self.keys = entries, selected, keys
        self.set_class(len(entries) > 1, "-shown")
        self.changed()

    def render(self) -> Text:
        style = lambda n: self.component_style(f"srvlist--{n}")  # noqa: E731
        width = self.draw_width or 80
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(f"Servers {len(self.entries)}", style("head"))
        out.append(f"  {self.keys[0]} next, {self.keys[1]} previous", style("muted"))
        ports: list[int | None] = [None]
        for e in self.entries:
            chosen = e.port == self.selected
            port = f":{e.port}"
            condition, tail, room = fitted(e, width - 2 - len(port) - 2)
            name = e.profile if len(e.profile) <= room else e.profile[: room - 1] + "…"
            out.append("\n")
            out.append("▶ " if chosen else "  ", style("selected"))
            out.append(f"{port} ", style("selected" if chosen else "state"))
            out.append(f"{name:<{room}} ", style("selected" if chosen else "muted"))
            out.append(condition, style("bad" if e.state in BAD else "state"))
            out.append(tail, style("muted"))
            ports.append(e.port)
            for node in e.nodes:
                out.append("\n" + cut(node_line(node, wide=width >= 60), width), style("muted"))
                ports.append(e.port)
        self._line_ports = ports
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # One line each, whatever the width (render() fits them): Textual would measure render()
        # at the width the widget had before this layout.
        return 1 + sum(1 + len(e.nodes) for e in self.entries)

    def on_click(self, event: events.Click) -> None:
        line = event.y
        if 0 <= line < len(self._line_ports) and (port := self._line_ports[line]) is not None:
            self.post_message(self.Selected(port))
