"""A warning the CLI prints on stderr (state sparktui read but does not trust) reaches the panel,
whose stderr is not shown, as one notice naming the folder and the fix."""

from __future__ import annotations

import pytest

from sparktui import paths
from sparktui.ui.app import SparkApp
from tests.support.app import SampleBackend, record_notices, until

pytestmark = pytest.mark.usefixtures("isolated")


async def test_a_route_folder_others_may_write_in_is_one_warning_notice():
    folder = paths.state_dir() / "route"
    folder.mkdir(mode=0o700)
    folder.chmod(0o770)  # the memory pane reads the routes here every second
    app = SparkApp(backend=SampleBackend())
    said = record_notices(app)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: any(str(folder) in n.message for n in said), "the warning as a notice")
        await pilot.pause(2.5)  # more polls of the routes: still one notice
        warned = [n for n in said if str(folder) in n.message]
        assert len(warned) == 1, [n.message for n in said]
        (notice,) = warned
        assert notice.severity == "warning"
        assert notice.message.startswith(f"{folder}: writable by other users (mode 0770"), notice.message
        assert f"chmod 700 {folder}" in notice.message and "route records shown" in notice.message, notice.message


@pytest.mark.slow  # starts sparktui on a pty
def test_over_a_terminal_the_warning_is_a_notice_and_stderr_never_garbles_the_screen(env):
    # Textual owns the terminal: what is printed on stderr meanwhile is captured (and dropped), so
    # the warning reaches the person only as the notice, and no raw line lands on the screen
    import sys
    import time
    from pathlib import Path

    from tests.support.pty_app import PtyApp

    folder = paths.state_dir() / "route"
    folder.mkdir(mode=0o700)
    folder.chmod(0o770)
    app = PtyApp([str(Path(sys.executable).with_name("sparktui"))], env, 120, 40)
    try:
        app.wait_for(lambda a: "Not trusted" in a.text(), 60, "the notice")
        end = time.monotonic() + 2  # more polls of the routes
        while time.monotonic() < end:
            app.pump(0.05)
        text = app.text()
        assert text.count("Not trusted") == 1 and "writable by other users" in text, text
        assert "sparktui: warning" not in text, text
    finally:
        app.close()
