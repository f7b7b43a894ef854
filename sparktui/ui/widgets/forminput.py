"""An Input whose editing keys keep their order with the typing around them.

Textual inserts a printable key in the Input's own key handler, but runs a bound key (Ctrl+A,
Ctrl+K, Backspace …) as an action dispatched after it: in one burst from the terminal (SSH
type-ahead, a paste of keys) "Ctrl+A Ctrl+K srv1" typed srv1 first and then cleared the field.
Here the Input's own editing bindings run at once, in the order the keys came; everything else
(the app's keys) is left to Textual's bindings as before.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input

# the Input's own editing actions, by key (Textual's Input.BINDINGS); submit, copy and paste stay
# with Textual (they post messages or reach the clipboard)
_EDITING = {
    key.strip(): binding.action
    for binding in Input.BINDINGS
    if not isinstance(binding, tuple)
    for key in binding.key.split(",")
    if binding.action.split("(")[0] not in ("submit", "copy", "paste", "cut")
}


class FormInput(Input):
    async def _on_key(self, event: events.Key) -> None:
        action = _EDITING.get(event.key)
        if action is None:
            await super()._on_key(event)
            return
        event.stop()
        event.prevent_default()
        self._restart_blink()
        await self.run_action(action)
