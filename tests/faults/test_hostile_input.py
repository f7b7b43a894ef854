"""Issue 21, items 5, 6, 8, 9 and 10: crafted socket messages get {"ok": false, "error": …} and
no traceback; a FIFO in servers/ hangs nothing; huge, looping, FIFO and device profiles and
duplicate keys are refused at once; impossible model configs are refused before arithmetic;
files are 0600 and folders 0700 whatever the umask; a stop line above what is free is refused
unless --force; `status` says how the last server on a port ended."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.records import state as st
from tests.support import REPO, alive, free_port, wait_for
from tests.support.faults import mem_available, raw_request, sparktui

pytestmark = pytest.mark.slow  # every test runs sparktui as a process

GIB = 1 << 30


@pytest.fixture
def serving(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    assert sparktui("serve", str(profile), "--detach", env=env).returncode == 0
    state = wait_for(
        lambda: (s := st.ask_live(port)) is not None and s.status == "running" and s.tree is not None and s,
        40,
        "ready",
    )
    return port, state


def test_crafted_messages_get_an_error_reply_and_no_traceback(serving, env):
    port, _ = serving
    deep = raw_request(port, b"[" * 60000)
    assert deep["ok"] is False and "nested too deeply" in deep["error"], deep
    huge = raw_request(port, json.dumps({"cmd": "guard", "lines": {"kill_below_gib": 1e300}}).encode())
    assert huge["ok"] is False and "kill_below_gib" in huge["error"] and "1048576" in huge["error"], huge
    forced = sparktui("set-guard", "--port", str(port), "--kill-below", "1e300", "--force", env=env)
    assert forced.returncode == 2 and "kill_below_gib" in forced.stderr and "Traceback" not in forced.stderr
    assert st.ask_live(port).guard.armed  # still answering, still guarding
    sup_log = Path(env["SPARKTUI_STATE_DIR"]) / "supervisor" / f"{port}.log"
    assert "Traceback" not in sup_log.read_text()


def test_a_fifo_in_servers_hangs_neither_status_nor_serve(make_profile, env):
    servers = st.state_dir() / "servers"
    profile = make_profile()
    port = load_profile(profile).serve.port
    os.mkfifo(servers / f"{port}.json")
    os.mkfifo(servers / f"{free_port()}.json")
    shown = sparktui("status", env=env, timeout=10)
    assert shown.returncode == 0 and "FIFO" in shown.stderr and "Traceback" not in shown.stderr, shown
    served = sparktui("serve", str(profile), "--detach", env=env, timeout=30)
    assert served.returncode == 0, served
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0


@pytest.mark.parametrize("kind", ["fifo", "loop", "device", "huge", "duplicate"])
def test_profiles_that_cannot_be_one_are_refused_at_once(kind, tmp_path, env):
    path = tmp_path / "p.toml"
    if kind == "fifo":
        os.mkfifo(path)
        words = "FIFO"
    elif kind == "loop":
        path.symlink_to(path)
        words = "loop of symbolic links"
    elif kind == "device":
        path = Path("/dev/zero")
        words = "character device"
    elif kind == "huge":
        path.write_text('[serve]\nmodel = "x"\n#' + "a" * 10_000_000 + "\n")
        words = "limit 1,048,576 bytes"
    else:
        path.write_text('[serve]\nmodel = "a"\nmodel = "b"\n')
        words = 'Key "model" already exists'
    out = sparktui("fit", str(path), env=env, timeout=10)
    assert out.returncode == 2, out
    assert words in out.stderr and str(path) in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("num_attention_heads", 0, "num_attention_heads is 0"), ("torch_dtype", "int1024", "torch_dtype is 'int1024'")],
)
def test_impossible_model_configs_are_refused_before_arithmetic(field, value, words, tmp_path, env):
    config = json.loads((REPO / "tests/fixtures/vllm-cpu/tiny-llama-config.json").read_text())
    config[field] = value
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    out = sparktui("fit", "--model", str(tmp_path / "m"), env=env, timeout=20)
    assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out


def test_files_are_private_whatever_the_umask(make_profile, env):
    profile = make_profile()
    port = load_profile(profile).serve.port
    served = sparktui("serve", str(profile), "--detach", env=env, umask=0)
    assert served.returncode == 0, served
    state = wait_for(
        lambda: (s := st.ask_live(port)) is not None and s.status == "running" and s.tree is not None and s, 40, "ready"
    )
    loose = []
    for root, dirs, files in os.walk(env["SPARKTUI_STATE_DIR"]):
        for name in dirs + files:
            path = Path(root) / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:  # a state write's temporary file, renamed into place since the walk listed it
                continue
            if stat.S_ISSOCK(mode) or stat.S_ISLNK(mode):
                continue
            if mode & 0o077:
                loose.append(f"{path}: {oct(mode & 0o777)}")
    assert not loose, loose
    vllm_umask = next(
        line.split()[1] for line in Path(f"/proc/{state.tree.pid}/status").read_text().splitlines() if "Umask" in line
    )
    assert vllm_umask == "0000"  # the user's umask, for vLLM's own files
    assert sparktui("stop", "--port", str(port), env=env).returncode == 0


def test_a_stop_line_above_what_is_free_is_refused_unless_forced_and_status_says_how_it_ended(serving, env):
    port, state = serving
    above = f"{mem_available() / GIB + 10:.1f}"
    refused = sparktui("set-guard", "--port", str(port), "--kill-below", above, env=env)
    assert refused.returncode == 2 and "MemAvailable is" in refused.stderr and "--force" in refused.stderr, refused
    assert st.ask_live(port).guard.lines.kill_below_gib != float(above)
    forced = sparktui("set-guard", "--port", str(port), "--kill-below", above, "--force", env=env)
    assert forced.returncode == 0, forced
    wait_for(lambda: not any(alive(p) for p, _ in state.tree.members), 20, "the guard to stop the server")
    wait_for(lambda: not st.supervisor_alive(state), 20, "the supervisor to finish")
    shown = sparktui("status", env=env)
    assert "no server is running" in shown.stdout
    assert f"port {port}" in shown.stdout and "guard trip at the kill line" in shown.stdout, shown.stdout
    assert f"({above}0 GiB)" in shown.stdout or f"({float(above):.2f} GiB)" in shown.stdout
    one = sparktui("status", "--port", str(port), env=env)
    assert "ended" in one.stdout and "guard trip" in one.stdout, one.stdout
