"""Issue 9, items 7 and 8 (host, env): an API key travels only as VLLM_API_KEY, files that hold
it are 0600, an open host needs a key or --force, and bad hosts or env values are exit 2."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from tests.support import REPO, wait_for

pytestmark = pytest.mark.slow


def sparktui(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=90
    )


def running(port: int) -> st.StateRecord:
    return wait_for(lambda: (s := st.ask_live(port)) is not None and s.status == "running" and s, 40, "ready")


def no_key_anywhere(key: str, state: st.StateRecord, env: dict[str, str]) -> None:
    assert state.tree is not None
    for pid, _ in state.tree.members:
        try:
            assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), f"the key is in pid {pid}'s argv"
        except FileNotFoundError:
            continue
    root_env = Path(f"/proc/{state.tree.pid}/environ").read_bytes().split(b"\0")
    assert f"VLLM_API_KEY={key}".encode() in root_env
    status = sparktui("status", "--json", env=env)
    assert status.returncode == 0 and key not in status.stdout
    assert key not in st.state_path(state.port).read_text()
    assert state.log_path and key not in Path(state.log_path).read_text()
    for log in (Path(env["SPARKTUI_STATE_DIR"]) / "supervisor").glob("*.log"):
        assert key not in log.read_text()


def test_a_key_in_extra_args_travels_only_by_environment(make_profile, env):
    profile = make_profile(serve_extra='extra-args = ["--api-key", "sk-extra-123"]')
    port = load_profile(profile).serve.port
    out = sparktui("serve", str(profile), "--detach", env=env)
    assert out.returncode == 0, out.stderr
    no_key_anywhere("sk-extra-123", running(port), env)
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0


def test_a_key_on_the_command_line_is_saved_only_in_a_private_file(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    name = load_profile(profile).name
    copy = Path(env["SPARKTUI_STATE_DIR"]) / "profiles" / str(port) / f"{name}.toml"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text("# an older copy, world-readable\n")
    copy.chmod(0o644)
    out = sparktui("serve", str(profile), "--detach", "--api-key", "sk-cli-456", env=env)
    assert out.returncode == 0, out.stderr
    state = running(port)
    assert "sk-cli-456" in copy.read_text()  # the detached supervisor's profile copy holds it...
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600  # ...readable by us alone
    no_key_anywhere("sk-cli-456", state, env)
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0


def test_an_open_host_without_a_key_is_refused(make_profile, env):
    profile = make_profile(serve_extra='host = "0.0.0.0"')
    out = sparktui("serve", str(profile), "--detach", env=env)
    assert out.returncode == 2 and "--host 0.0.0.0" in out.stderr and "--force" in out.stderr
    assert "Traceback" not in out.stderr and st.list_states() == []


@pytest.mark.parametrize("host", [";id", "a b", "$(id)", "host/evil"])
def test_a_host_that_is_no_host_is_exit_2(make_profile, env, host):
    out = sparktui("serve", str(make_profile()), "--host", host, env=env)
    assert out.returncode == 2 and "expected a host name or an IP address" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_nul_in_env_is_exit_2(make_profile, env):
    profile = make_profile()
    profile.write_text(profile.read_text() + 'BAD = "a\\u0000b"\n')
    out = sparktui("serve", str(profile), env=env)
    assert out.returncode == 2 and "[env] BAD" in out.stderr and "NUL" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_status_json_keeps_its_guard_shape(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    running(port)
    shown = json.loads(sparktui("status", "--json", "--port", str(port), env=env).stdout)
    assert isinstance(shown["guard"]["armed"], bool)
    assert set(shown["guard"]["lines"]) >= {"warn_below_gib", "term_below_gib", "kill_below_gib"}
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0
