"""Issue 24: the panel shows a word another sparktui version recorded as written, never as one of its own."""

from __future__ import annotations

import json

from sparktui.runtime.records import protocol as pr
from sparktui.ui.translate import guard_view
from tests.support import FIXTURES
from tests.support.other_version import from_another_version


def test_the_panel_shows_a_kernel_event_of_an_unknown_kind_as_written():
    newer = from_another_version(json.loads((FIXTURES / "state" / "crash-loop.json").read_text()))
    state = pr.parse_state(json.dumps(newer), "newer.json")
    view = guard_view(state.guard, None, live=True)
    assert view.why_na is not None and "kernel log: gsp_timeout (notify)" in view.why_na, view.why_na
    assert "out of memory" not in view.why_na  # it was shown as the driver's out-of-memory line
