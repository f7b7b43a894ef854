"""Reaching a node: the system's own `ssh` (BatchMode: never a password prompt; the user's ~/.ssh/config,
or the file SPARKTUI_SSH_CONFIG names), each remote word quoted (shlex.quote) for the remote shell."""

from __future__ import annotations

import os
import shlex
import subprocess

SSH_TIMEOUT_S = 60.0  # node-check asks `vllm --version` when no venv is named: vLLM imports torch first


SSH_CONFIG_ENV = "SPARKTUI_SSH_CONFIG"


def ssh_argv(host: str, remote: list[str]) -> list[str]:
    """`ssh … -- HOST remote…` with every remote word quoted for the remote shell. The `--` goes
    before the host: a host such as "-oProxyCommand=…" would otherwise be read as an option, and
    ssh runs a ProxyCommand through a local shell."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if config := os.environ.get(SSH_CONFIG_ENV):
        argv += ["-F", config]
    return [*argv, "--", host, *(shlex.quote(word) for word in remote)]


def ssh_run(
    host: str, remote: list[str], stdin: str | None = None, timeout: float = SSH_TIMEOUT_S
) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            ssh_argv(host, remote), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def stop_workers(hosts: list[str] | tuple[str, ...], port: int, launch_id: str, how: str = "stop") -> list[str]:
    """Stop (or kill) on each host the rank's supervisor launched with `launch_id`, whole tree and
    all; a server of anyone else on that port there is left alone (node-side `--only-id` refuses,
    exit 2). What did not go as asked, one line per node (empty: every rank stopped)."""
    notes: list[str] = []
    for host in hosts:
        code, _, err = ssh_run(host, ["sparktui", how, "--port", str(port), "--only-id", launch_id])
        if code != 0:
            detail = (err.strip().splitlines() or [f"exit {code}"])[-1]
            notes.append(f"node {host}: `sparktui {how} --port {port} --only-id {launch_id}` there: {detail}")
    return notes
