"""sparktui.paths: the state dir is made private once per process, and made again if it goes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparktui import paths
from sparktui.errors import UserError


def test_the_state_dir_is_made_once_and_again_only_when_it_is_gone(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(state))
    made: list[Path] = []
    mkdir = Path.mkdir

    def counting(self, *args, **kwargs):
        made.append(self)
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", counting)
    assert paths.state_dir() == state
    assert (state / "servers").is_dir() and state.stat().st_mode & 0o777 == 0o700
    made.clear()
    for _ in range(5):  # the panel asks several times a second, at idle
        assert paths.state_dir() == state
    assert made == [], "the state dir was made again though it was there"
    shutil.rmtree(state)
    assert paths.state_dir() == state
    assert (state / "servers").is_dir() and (state / "logs").is_dir()
    assert state.stat().st_mode & 0o777 == 0o700


def test_a_launch_refuses_a_servers_folder_others_may_write_in(tmp_path, monkeypatch):
    # it would trust, sweep and set aside records another user could have put there
    state = tmp_path / "state"
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(state))
    assert paths.writable_state_dir() == state
    (state / "servers").chmod(0o777)
    with pytest.raises(UserError) as exc:
        paths.writable_state_dir()
    assert f"{state / 'servers'}: writable by other users (mode 0777" in str(exc.value)
    assert f"chmod 700 {state / 'servers'}" in str(exc.value)


def test_a_test_that_does_not_ask_for_its_own_folders_still_never_reaches_the_users(tmp_path):
    # conftest's not_the_users_folders: no `isolated` here, as in the tests that made the real
    # ~/.local/state/sparktui/{servers,logs,bench,…} on every whole run
    assert paths.state_dir().is_relative_to(tmp_path)
    assert paths.config_dir().is_relative_to(tmp_path)
