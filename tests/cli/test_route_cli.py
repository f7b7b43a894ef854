"""`sparktui route`'s bad input: one line naming the flag or file, exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import REPO


def route(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparktui", "route", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give PROFILE… or --file ROUTE.toml"),
        (("--file", "/nonexistent/route.toml"), "--file /nonexistent/route.toml: cannot read it"),
        (("--listen", "nowhere", "x.toml"), "--listen 'nowhere': expected HOST:PORT"),
        (("--queue", "0", "x.toml"), "--queue: expected a whole number ≥ 1"),
    ],
)
@pytest.mark.slow  # starts a process
def test_bad_arguments_exit_2_with_one_line_naming_them(args, says, env):
    out = route(*args, env=env)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow  # starts a process
def test_a_front_reachable_from_the_network_needs_an_api_key(env, make_profile):
    profile = make_profile()
    env.pop("SPARKTUI_ROUTE_API_KEY", None)
    out = route("--listen", "0.0.0.0:18999", str(profile), env=env)
    assert out.returncode == 2 and "SPARKTUI_ROUTE_API_KEY" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow  # starts a process
def test_a_route_file_with_a_bad_key_names_the_file_and_the_key(env, tmp_path):
    path = tmp_path / "route.toml"
    path.write_text('[route]\nevict = "newest"\n[route.models.a]\nprofile = "p"\n')
    out = route("--file", str(path), env=env)
    assert out.returncode == 2 and f"{path}: [route] evict: got 'newest'" in out.stderr
