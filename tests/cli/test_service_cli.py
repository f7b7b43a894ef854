"""`sparktui service`: a systemd user unit running `sparktui serve PROFILE` in the foreground,
checked by systemd's own `systemd-analyze verify`, and its stop (SIGTERM to sparktui alone, as
KillMode=mixed sends it) ending vLLM's whole tree."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sparktui.runtime.records import state as st
from tests.support import REPO, alive, free_port, wait_for


def sparktui(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def exec_start(unit: str) -> list[str]:
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


@pytest.mark.slow  # starts a process
def test_the_unit_passes_systemd_analyze_verify(
    env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    printed = sparktui(["service", "install", "70b-dense-5-users", "--print"], env)
    assert printed.returncode == 0, printed.stderr
    unit = printed.stdout
    assert exec_start(unit)[-2:][0] == "serve" and Path(exec_start(unit)[-1]).is_absolute()
    for line in ("KillMode=mixed", "Restart=on-failure", "RestartPreventExitStatus=2 97", "WantedBy=default.target"):
        assert line in unit, line
    path = tmp_path / "sparktui-70b-dense-5-users.service"
    path.write_text(unit)
    # a short runtime dir: the user units systemd-analyze loads put sockets there (gpg-agent, dirmngr), and a
    # socket path over 108 bytes is "a bad unit file setting"; under xdist tmp_path can be that long
    runtime = Path(tempfile.mkdtemp(prefix="xr-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(runtime, ignore_errors=True))
    for mode in (["--user"], []):
        done = subprocess.run(
            [analyze, *mode, "verify", str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
            timeout=60,
        )
        assert done.returncode == 0 and done.stderr == "", (mode, done.stderr)
    # a broken unit is caught by the same check, so the check can fail
    path.write_text(unit.replace("KillMode=mixed", "KillMode=mixd"))
    done = subprocess.run(
        [analyze, "--user", "verify", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    assert "kill mode" in done.stderr and "mixd" in done.stderr


@pytest.mark.slow  # starts a process
def test_install_status_remove(env: dict[str, str], tmp_path: Path) -> None:
    env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = sparktui(["service", "install", "70b-dense-5-users"], env)
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "xdg" / "systemd" / "user" / "sparktui-70b-dense-5-users.service"
    assert unit.is_file() and unit.stat().st_mode & 0o777 == 0o600
    assert "lingering" in done.stdout
    assert "KEY" not in unit.read_text() and "TOKEN" not in unit.read_text()
    shown = sparktui(["service", "status", "70b-dense-5-users"], env)
    assert shown.returncode == 0 and f"installed at {unit}" in shown.stdout
    assert sparktui(["service", "remove", "70b-dense-5-users"], env).returncode == 0
    assert not unit.exists()
    gone = sparktui(["service", "remove", "70b-dense-5-users"], env)
    assert gone.returncode == 2 and "no such unit" in gone.stderr
    bad = sparktui(["service", "install", "no-such-profile"], env)
    assert bad.returncode == 2 and "no profile named" in bad.stderr


@pytest.mark.parametrize(("answer", "said"), [("yes", "lingering: on"), ("no", "lingering: OFF")])
@pytest.mark.slow  # starts a process
def test_lingering_is_checked_with_loginctl(answer: str, said: str, env: dict[str, str], tmp_path: Path) -> None:
    # logind does not run on the test machine: a loginctl that answers as logind would
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "loginctl"
    fake.write_text(f'#!/bin/sh\n[ "$1" = show-user ] && [ "$3" = --property=Linger ] && echo {answer}\n')
    fake.chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = sparktui(["service", "status", "70b-dense-5-users"], env)
    assert done.returncode == 0 and said in done.stdout, done.stdout
    if answer == "no":
        assert "enable-linger" in done.stdout


@pytest.mark.slow
def test_sigterm_to_sparktui_alone_stops_the_whole_tree(make_profile: Callable[..., Path], env: dict[str, str]) -> None:
    port = free_port()
    profile = make_profile(port=port, serve_extra="gpu-memory-utilization = 0.2")
    unit = sparktui(["service", "install", str(profile), "--print"], env).stdout
    main = subprocess.Popen(exec_start(unit), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        state = wait_for(
            lambda: (s := st.read_state(st.state_path(port))) and s.status == "running" and s.tree and s,
            60,
            what="the service's server to run",
        )
        assert state.supervisor.pid == main.pid  # in the foreground: the unit's main process is the supervisor
        tree = [state.tree.pid, *(pid for pid, _ in state.tree.members)]
        main.send_signal(signal.SIGTERM)  # KillMode=mixed: systemd signals the main process only
        assert main.wait(timeout=60) == 0
        assert not any(alive(pid) for pid in tree)
    finally:
        if main.poll() is None:
            main.kill()


def test_install_without_systemctl_says_nothing_was_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # with no systemctl on the PATH, `install --now` printed "enabled … and started it"
    from sparktui.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert main(["service", "install", "70b-dense-5-users", "--now"]) == 0
    out, err = capsys.readouterr()
    name = "sparktui-70b-dense-5-users.service"
    assert (tmp_path / "xdg" / "systemd" / "user" / name).is_file()
    assert "started it" not in out and f"enabled {name}" not in out
    assert "systemctl not found" in err and f"systemctl --user enable --now {name}" in err


def test_the_unit_keeps_the_state_dir_where_status_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    # a user who moved their folders by XDG_STATE_HOME (etc.): the unit passed HF_HUB_OFFLINE but not
    # those, so the service wrote its state to the default place, where `sparktui status` did not look
    from sparktui import paths
    from sparktui.cli import main

    for key in ("SPARKTUI_CONFIG_DIR", "SPARKTUI_STATE_DIR", "SPARKTUI_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    mine = (paths.config_dir(), paths.state_dir_path(), paths.cache_dir())
    assert mine[1] == tmp_path / "xdg_state_home" / "sparktui"
    assert main(["service", "install", "70b-dense-5-users", "--print"]) == 0
    unit = capsys.readouterr().out
    passed = dict(
        shlex.split(line.removeprefix("Environment="))[0].split("=", 1)
        for line in unit.splitlines()
        if line.startswith("Environment=")
    )
    assert passed["XDG_STATE_HOME"] == str(tmp_path / "xdg_state_home")
    # the service, started by a user manager whose own environment says nothing of them, resolves the same folders
    for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key)
    for key, value in passed.items():
        monkeypatch.setenv(key, value)
    assert (paths.config_dir(), paths.state_dir_path(), paths.cache_dir()) == mine
    # named outright too, whatever a user manager's environment.d says of the XDG homes
    assert passed["SPARKTUI_STATE_DIR"] == str(mine[1]) and passed["SPARKTUI_CONFIG_DIR"] == str(mine[0])
