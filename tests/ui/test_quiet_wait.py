"""The tests' pilot waits until the app has nothing pending (tests/support/quiet.py), not for a CPU
quiet for 20 ms: work that waits on a thread, using no CPU, is finished when a key press returns."""

from __future__ import annotations

import time

from textual import work
from textual.app import App, ComposeResult
from textual.widgets import Static


class Slow(App[None]):
    BINDINGS = [("w", "thread", "")]

    def __init__(self) -> None:
        super().__init__()
        self.done: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("-", id="out")

    @work(thread=True)
    def action_thread(self) -> None:
        time.sleep(0.15)  # a read that takes a while, no CPU
        self.call_from_thread(self.finish, "thread")

    def finish(self, what: str) -> None:
        self.done.append(what)
        self.query_one("#out", Static).update(what)


async def test_a_press_returns_once_a_worker_that_waits_without_cpu_has_finished_and_drawn():
    app = Slow()
    async with app.run_test() as pilot:
        await pilot.press("w")
        assert app.done == ["thread"]
        assert "thread" in str(app.query_one("#out", Static).render())
