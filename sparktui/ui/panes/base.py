"""What every pane shares: the backend, and the one path for workers that fail unexpectedly."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.dom import DOMNode
from textual.message import Message
from textual.widget import AwaitMount, Widget
from textual.worker import Worker, WorkerState

from sparktui.ui.messages import WorkerFailed

if TYPE_CHECKING:
    from sparktui.ui.backend import Backend

P = ParamSpec("P")


def backend_of(node: DOMNode) -> Backend:
    """The app's backend, for a pane and for the child widgets that own part of its work."""
    return cast("Backend", node.app.backend)  # type: ignore[attr-defined]


def post_up(node: DOMNode, message: Message) -> None:
    """Post `message` from a pane's child so that it goes up past the pane. Textual makes the widget
    whose code runs when a message is made its sender, and stops a message at its sender on the
    way up: a child's code often runs inside the pane's handlers (the pane tells it of an edit)."""
    node.post_message(message.set_sender(node))


class Pane(Vertical):
    """A pane owns its widgets, its workers and its polls. Subclasses set the class variables;
    the app lays panes out from `sparktui.ui.panes.PANES`."""

    NAME: ClassVar[str]  # config | server | memory | …: the id is "<NAME>-pane"
    TAB: ClassVar[str]  # the tab's label on narrow terminals

    def start_background(self) -> None:
        """Start the polls and watches: once, after the first full screen (`messages.FirstScreen`).
        Nothing by default."""

    # A pane whose widgets may wait: made in its __init__ (they keep what they are given before
    # they mount), listed by `widgets`, mounted with the pane unless it starts hidden.
    MOUNTS_LATER: ClassVar[bool] = False
    _hidden_at_start = False  # its widgets are not mounted yet
    _mounting: AwaitMount | None = None

    def widgets(self) -> list[Widget]:
        """The pane's widgets, for a MOUNTS_LATER pane."""
        return []

    def compose(self) -> ComposeResult:
        if not self._hidden_at_start:
            yield from self.widgets()

    def start_hidden(self) -> None:
        """The pane starts hidden (a narrow terminal shows one pane at a time): a MOUNTS_LATER pane
        mounts its widgets when shown or once the first full screen is up (its start_background
        calls `mounted`), so the first screen does not style and lay out what it cannot show."""
        self._hidden_at_start = self.MOUNTS_LATER

    async def mounted(self) -> None:
        """Return once the pane's widgets are mounted (now, if it started hidden and they are not
        yet). Its actions are run after this (SparkApp.action_pane)."""
        if self._hidden_at_start and self._mounting is None:
            widgets = self.widgets()
            self._mounting = self.mount_all(widgets)
            await self._mounting
            # Hidden until they are: a pane being removed (the app closing) mounts none of them.
            if all(w.is_attached for w in widgets):
                self._hidden_at_start = False
                self.widgets_mounted()
        elif self._mounting is not None:
            await self._mounting  # asked again (shown, and the background start) while mounting

    def widgets_mounted(self) -> None:
        """The widgets of a pane that started hidden are mounted: draw what they missed."""

    @on(events.Show)
    def _shown(self) -> None:
        if self._hidden_at_start:
            self.call_later(self.mounted)  # a wider terminal shows every pane

    def set_active(self, active: bool) -> None:
        """The app shows this pane (narrow terminals: alone) or another one."""
        self.set_class(active, "-active")
        if active and self._hidden_at_start:
            self.call_later(self.mounted)

    @property
    def backend(self) -> Backend:
        return backend_of(self)

    def action_owner(self, action: str) -> DOMNode:
        """The widget that runs `action` ("name" or "name(args)"): the pane, or else the first of its
        children (in DOM order) that has the action, as a pane hands parts of its work to them."""
        method = "action_" + action.split("(", 1)[0]
        if hasattr(self, method):
            return self
        return next((w for w in self.walk_children() if hasattr(w, method)), self)

    @staticmethod
    def running(worker: Worker[Any] | None) -> bool:
        return worker is not None and not worker.is_finished

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Workers catch the errors they expect and post results; anything else lands here. The
        # pane resets what the worker left half done, and the app says what failed.
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.worker_failed(event.worker)
            self.post_message(WorkerFailed(event.worker.description or event.worker.name, event.worker.error))

    def worker_failed(self, worker: Worker[Any]) -> None:
        """Undo what a failed worker left (a half-finished launch, say). Nothing by default."""


def io_worker(
    name: str, description: str, group: str | None = None
) -> Callable[[Callable[P, None]], Callable[P, Worker[None]]]:
    """A thread worker for I/O: named, one at a time per group, and never fatal to the app (an
    unexpected error reaches `Pane.on_worker_state_changed`)."""

    def decorate(method: Callable[P, None]) -> Callable[P, Worker[None]]:
        return work(
            method,
            thread=True,
            exclusive=True,
            group=group or name,
            name=name,
            description=description,
            exit_on_error=False,
        )

    return decorate
