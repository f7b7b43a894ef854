"""Keys that arrive in one burst (SSH type-ahead, pasted keystrokes) keep their order: Ctrl+A Ctrl+K
then typing left the field empty in 2 of 3 tries (issue 23), over a real pty."""

from __future__ import annotations

import sys
import time

import pytest

from tests.support.pty_app import PtyApp

FORM = r"""
import sys
from textual.app import App
from textual.widgets import Static
from sparktui.ui.widgets.forminput import FormInput

class Form(App):
    def compose(self):
        yield FormInput(value="llama-70b", id="field", select_on_focus=False)
        yield Static("", id="echo")

    def on_input_changed(self, event):
        self.query_one("#echo", Static).update("VALUE=" + repr(event.value))

Form().run()
"""


def value_after(burst: bytes) -> str:
    import os

    app = PtyApp([sys.executable, "-c", FORM], dict(os.environ), 80, 24)
    try:
        app.wait_for(lambda a: "llama-70b" in a.text(), 60, "the field")
        app.send(burst)  # one write: the program reads it as one burst
        app.wait_for(lambda a: "VALUE=" in a.text(), 30, "an edit")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            app.pump(0.05)
        return next(line.strip() for line in app.screen.display if "VALUE=" in line)
    finally:
        app.close()


@pytest.mark.slow  # starts a process on a pty
@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_a_ctrl_k_then_typing_in_one_burst_keeps_the_typing(attempt):
    assert value_after(b"\x01\x0bsrv1") == "VALUE='srv1'"


@pytest.mark.slow
def test_ctrl_e_ctrl_u_then_typing_in_one_burst_keeps_the_typing():
    assert value_after(b"\x05\x15srv2") == "VALUE='srv2'"


async def test_the_forms_text_fields_are_form_inputs(tmp_path, monkeypatch):
    from sparktui.ui.app import SparkApp
    from sparktui.ui.widgets.forminput import FormInput
    from tests.support.app import SampleBackend, settled

    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert isinstance(app.query_one("#flag-served_model_name"), FormInput)
        assert isinstance(app.query_one("#flag-model"), FormInput)
