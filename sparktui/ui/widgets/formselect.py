"""A Select that the app may remove while it is still being mounted.

Textual's Select sets itself up in its Mount handler from its parts (the overlay's options, the
label of the current value). When the app closes while the form's later rows are being mounted (a
quit just after the first screen), those parts are removed before the Select's Mount is handled:
Textual's Select then raised NoMatches ('SelectOverlay', or '#label' on SelectCurrent) and the app
ended on a traceback.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widgets import Select
from textual.widgets._select import SelectOverlay  # not exported by textual.widgets


class FormSelect(Select[Any]):
    def _on_mount(self, event: events.Mount) -> None:
        if not self.query(SelectOverlay) or not self.query("SelectCurrent #label"):
            event.prevent_default()  # its parts are gone (being removed): nothing to set up (Select's own handler)
