"""The head's ssh command line: a node name never becomes an ssh option."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sparktui.runtime.cluster.link import ssh_argv


def test_the_host_comes_after_the_end_of_options() -> None:
    argv = ssh_argv("-oProxyCommand=id", ["sparktui", "node-check", "--model", "a b; id"])
    end = argv.index("--")
    assert argv[end + 1] == "-oProxyCommand=id"
    assert all(not a.startswith("-oProxy") for a in argv[:end])
    assert argv[end + 2 :] == [
        "sparktui",
        "node-check",
        "--model",
        "'a b; id'",
    ]  # each word quoted for the remote shell


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
@pytest.mark.slow  # starts a process
def test_ssh_itself_reads_an_option_like_host_as_a_host() -> None:
    """`ssh -G` prints the configuration it would use, connecting nowhere: a ProxyCommand must not be in it."""
    argv = ssh_argv("-oProxyCommand=echo PWNED", ["true"])
    out = subprocess.run([argv[0], "-G", *argv[1:]], capture_output=True, text=True, timeout=30, check=False)
    assert "PWNED" not in out.stdout
    assert out.returncode != 0  # ssh refuses the name as a host
