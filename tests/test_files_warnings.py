"""The warnings about state sparktui reads but does not trust (files.Warnings): each said once, in
the order said, on stderr for the CLI and to the panel's listener, from any thread."""

from __future__ import annotations

import threading

from sparktui import files


def test_each_warning_is_said_once_in_order_on_stderr_and_to_a_listener(capsys):
    log = files.Warnings()
    assert log.say("/s/route: writable by other users; `chmod 700 /s/route`", key="/s/route")
    assert not log.say("/s/route: said again in other words", key="/s/route")  # one key, once
    assert log.say("/s/bench: writable by other users")
    assert not log.say("/s/bench: writable by other users")  # the text is its key by default
    seen: list[str] = []
    stop = log.subscribe(seen.append)
    assert seen == ["/s/route: writable by other users; `chmod 700 /s/route`", "/s/bench: writable by other users"]
    log.say("/s/flight: owned by user id 1234")
    log.say("/s/flight: owned by user id 1234")
    stop()
    log.say("/s/cluster: writable by other users")  # after stop: not given to the listener
    assert seen[2:] == ["/s/flight: owned by user id 1234"]
    assert log.said() == [*seen, "/s/cluster: writable by other users"]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"sparktui: warning: {text}" for text in log.said()]


def test_warnings_said_from_many_threads_at_once_are_kept_once_each(capsys):
    log = files.Warnings()
    seen: list[str] = []
    log.subscribe(seen.append)
    start = threading.Barrier(8)

    def say(n: int) -> None:
        start.wait()
        for i in range(200):
            log.say(f"folder {i % 50}")

    threads = [threading.Thread(target=say, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == sorted(f"folder {i}" for i in range(50))
    assert seen == log.said()
    assert len(capsys.readouterr().err.splitlines()) == 50


def test_a_shared_state_folder_is_warned_of_once_in_the_process_registry(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(files, "WARNINGS", files.Warnings())
    folder = tmp_path / "route"
    folder.mkdir(mode=0o700)
    assert files.warn_shared_folder(folder, "route record") is None
    folder.chmod(0o770)
    said = files.warn_shared_folder(folder, "route record")
    assert said is not None and files.warn_shared_folder(folder, "route record") is None
    (text,) = files.WARNINGS.said()
    assert said == f"sparktui: warning: {text}"
    assert text.startswith(f"{folder}: writable by other users (mode 0770") and f"chmod 700 {folder}" in text


def test_what_reading_the_servers_state_warns_of_goes_to_the_one_registry(isolated, monkeypatch, capsys):
    # a state file set aside, another user's listener ignored: said on stderr only, the panel (whose
    # stderr is not shown) never heard of them
    from sparktui.runtime.records import state as st
    from sparktui.runtime.server import sweep

    monkeypatch.setattr(files, "WARNINGS", files.Warnings())
    path = st.state_path(8000)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text("{not a record")
    path.chmod(0o600)
    sweep.set_aside_unreadable(8000)
    st.warn_foreign(8001, 1234)
    st.warn_foreign(8001, 1234)  # once per port and user
    moved, foreign = files.WARNINGS.said()
    assert moved.startswith(f"moved the unreadable state file {path} to {path}.bad-"), moved
    assert foreign.startswith("ignored a listener of user id 1234 on port 8001's supervisor socket name"), foreign
    assert capsys.readouterr().err.count("sparktui: warning: ") == 2


def test_a_warning_about_one_action_is_told_each_time_and_not_kept(capsys):
    # stop and kill warn of what they did instead (a record that does not read whole, a supervisor
    # that does not answer): the next stop may earn the same words, and the panel shows them again
    log = files.Warnings()
    seen: list[str] = []
    log.subscribe(seen.append)
    log.tell("port 8000: its supervisor does not answer; sparktui stop ended the recorded tree itself")
    log.tell("port 8000: its supervisor does not answer; sparktui stop ended the recorded tree itself")
    assert seen == ["port 8000: its supervisor does not answer; sparktui stop ended the recorded tree itself"] * 2
    assert log.said() == []  # not replayed to a panel that subscribes later: it was about that stop
    assert capsys.readouterr().err.count("sparktui: warning: port 8000: its supervisor") == 2
