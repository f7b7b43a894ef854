"""The picker (ChoiceScreen): typing filters its list; a key that leaves the same entries leaves the list alone."""

from __future__ import annotations

from textual.app import App
from textual.widgets import OptionList

from sparktui.ui.screens import ChoiceScreen

OPTIONS = [("alpha one", 1), ("alpha two", 2), ("beta", 3)]


class Picker(App):
    def __init__(self) -> None:
        super().__init__()
        self.chosen: list[object] = []

    def on_mount(self) -> None:
        self.push_screen(ChoiceScreen("pick one", list(OPTIONS)), self.chosen.append)


async def test_a_key_that_keeps_the_same_matches_keeps_the_list_and_the_entry_moved_to():
    app = Picker()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChoiceScreen)
        options = screen.query_one(OptionList)
        await pilot.press("a", "l")  # "beta" goes
        assert screen.shown == [0, 1] and options.option_count == 2
        await pilot.press("down")
        assert options.highlighted == 1
        listed = options.get_option_at_index(0)
        await pilot.press("p", "space")  # "alp ": still both alphas
        assert options.get_option_at_index(0) is listed, "the list was built again for the same entries"
        assert options.highlighted == 1, "the entry moved to was lost"
        await pilot.press("t")  # "alp t": only "alpha two"
        assert screen.shown == [1] and options.option_count == 1 and options.highlighted == 0
        await pilot.press("enter")
        await pilot.pause()
        assert app.chosen == [2]
