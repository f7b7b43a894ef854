"""`sparktui completion bash|zsh|fish`: argcomplete's scripts, checked by each shell's own syntax
check where the shell is installed, and completions asked the way the shells ask them: bash's
completion function and fish's `complete -C` run for real, zsh through argcomplete's protocol."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import REPO, free_port, wait_for

BIN = Path(sys.executable).parent  # the venv's bin: where the `sparktui` script the shells call lives


def sparktui(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def shell_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PATH": f"{BIN}:{env['PATH']}"}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
@pytest.mark.slow  # starts a process
def test_the_script_passes_the_shells_syntax_check(shell: str, env: dict[str, str], tmp_path: Path) -> None:
    done = sparktui(["completion", shell], env)
    assert done.returncode == 0 and "sparktui" in done.stdout, done.stderr
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed (apt-get install {shell})")
    script = tmp_path / f"completion.{shell}"
    script.write_text(done.stdout)
    check = subprocess.run([exe, "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and check.stderr == "", check.stderr
    script.write_text(done.stdout + "\nif then fi end (\n")  # the check can fail: a broken script does
    assert subprocess.run([exe, "-n", str(script)], capture_output=True, timeout=30).returncode != 0


def bash_complete(words: list[str], env: dict[str, str], tmp_path: Path) -> list[str]:
    script = tmp_path / "completion.bash"
    script.write_text(sparktui(["completion", "bash"], env).stdout)
    line = " ".join(words)
    program = (
        f'source "{script}"; COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({line}); '
        f"COMP_CWORD={len(words) - 1}; _python_argcomplete sparktui {words[-1]} {words[-2]}; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env=shell_env(env), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.slow  # starts a process
def test_bash_completes_subcommands_and_profile_names(env: dict[str, str], tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    assert set(bash_complete(["sparktui", "se"], env, tmp_path)) == {"serve", "service", "set-guard"}
    assert bash_complete(["sparktui", "serve", "70b"], env, tmp_path) == ["70b-dense-5-users", "70b-dense-single-user"]
    assert "install" in bash_complete(["sparktui", "service", "i"], env, tmp_path)
    assert bash_complete(["sparktui", "fit", "120b"], env, tmp_path) == ["120b-moe-single-user"]  # fit's own parsing


@pytest.mark.slow  # starts a process
def test_fish_completes_subcommands_and_profile_names(env: dict[str, str], tmp_path: Path) -> None:
    fish = shutil.which("fish")
    if fish is None:
        pytest.skip("fish is not installed (apt-get install fish)")
    script = tmp_path / "completion.fish"
    script.write_text(sparktui(["completion", "fish"], env).stdout)
    program = f'source "{script}"; complete -C "sparktui servi"; complete -C "sparktui service install 35b"'
    done = subprocess.run([fish, "-c", program], capture_output=True, text=True, env=shell_env(env), timeout=60)
    assert done.returncode == 0, done.stderr
    words = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert words == ["service", "35b-moe-5-users-8k", "35b-moe-single-user-long-context"]


def protocol(line: str, env: dict[str, str], tmp_path: Path, asking: str = "zsh") -> list[str]:
    """One Tab as argcomplete's shell functions send it: the line in COMP_LINE, the answer in a file."""
    out = tmp_path / "answer"
    done = subprocess.run(
        [str(BIN / "sparktui")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **env,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_SHELL": asking,
            "_ARGCOMPLETE_IFS": "\n",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
        },
    )
    assert done.returncode == 0, done.stderr
    return [w.split(":")[0].strip() for w in out.read_text().split("\n") if w.strip()]


@pytest.mark.slow
def test_running_ports_complete_port_options(
    make_profile: Callable[..., Path], env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    started = sparktui(
        ["serve", "--detach", str(make_profile(port=port, serve_extra="gpu-memory-utilization = 0.2"))], env
    )
    assert started.returncode == 0, started.stderr
    try:
        ports = wait_for(lambda: protocol("sparktui stop --port ", env, tmp_path) or None, 30, what="a port")
        assert ports == [str(port)]
        assert protocol("sparktui status --port ", env, tmp_path, asking="bash") == [str(port)]
    finally:
        sparktui(["stop", "--port", str(port)], env)
    assert protocol("sparktui stop --port ", env, tmp_path) == []
