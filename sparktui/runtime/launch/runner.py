"""How a profile's vLLM is started: the argv, the environment, and how to stop it.

Native: `vllm serve …` from a configured executable, `<venv>/bin/vllm`, or PATH. Signals to the
process group reach vLLM itself.
Container: `docker run --rm --name N --gpus all --ipc=host … IMAGE vllm serve …`. Signals to the
docker client do not stop the container, so it is stopped with `docker stop N` / `docker kill N`.
Secrets (the API key) travel in the environment only: for a container, `-e VLLM_API_KEY` passes the
name, and docker reads the value from the client's environment.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.errors import UserError

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile

CONTAINER_PREFIX = "sparktui-"


@dataclass(frozen=True)
class LaunchCommand:
    argv: list[str]
    env: dict[str, str]  # added to the inherited environment
    container: str | None = None  # the container's name, for a container runner
    stop_argv: list[str] | None = None  # run to stop it (container); None: signal the process group
    kill_argv: list[str] | None = None
    secret_env: list[str] = field(default_factory=list)  # names whose values must never be shown

    @property
    def kind(self) -> str:
        return "container" if self.container else "native"


def resolve_native_executable(executable: str = "vllm", venv: str | None = None, path: str | None = None) -> str:
    """The `vllm` to run: an explicit path, `<venv>/bin/<executable>`, or a PATH lookup."""
    if venv:
        candidate = Path(os.path.expanduser(venv)) / "bin" / executable
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise UserError(
                f"runner.venv = {venv!r}: no executable {candidate}; point venv at a virtual "
                "environment with vLLM installed (its bin/vllm must exist)"
            )
        return str(candidate)
    if os.sep in executable:
        candidate = Path(os.path.expanduser(executable))
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise UserError(f"runner.executable = {executable!r}: not an executable file")
        return str(candidate)
    found = shutil.which(executable, path=path if path is not None else os.environ.get("PATH", os.defpath))
    if found is None:
        raise UserError(
            f"runner.executable = {executable!r} is not on PATH; install vLLM, or set "
            '[runner] executable = "/path/to/vllm" or venv = "/path/to/venv" in the profile'
        )
    return found


def container_name(profile_name: str, port: int) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", profile_name).strip("-.") or "server"
    return f"{CONTAINER_PREFIX}{safe}-{port}"


def build_command(profile: Profile, serve: ServeConfig | None = None) -> LaunchCommand:
    """The command for `profile` (a core.profiles.Profile); `serve` overrides profile.serve."""
    serve = serve if serve is not None else profile.serve
    runner = profile.runner
    from sparktui.runtime.launch.ranks import link_env

    env = {**link_env(profile, serve), **profile.env, **serve.to_env()}
    secret = sorted(serve.to_env())
    vllm_args = serve.to_argv()
    if runner.kind == "native":
        exe = resolve_native_executable(runner.executable or "vllm", runner.venv)
        return LaunchCommand([exe, "serve", *vllm_args], env, secret_env=secret)
    if runner.kind == "container":
        if not runner.image:
            raise UserError('runner.kind = "container" needs [runner] image = "…" (e.g. nvcr.io/nvidia/vllm:26.01-py3)')
        docker = shutil.which("docker") or "docker"
        name = container_name(profile.name, serve.port)
        argv = [
            docker,
            "run",
            "--rm",
            "--name",
            name,
            "--gpus",
            "all",
            "--ipc=host",
            "-p",
            f"{serve.host}:{serve.port}:{serve.port}",
        ]
        for key in sorted(env):
            argv += ["-e", key]  # name only: docker takes the value from our environment
        argv += list(runner.container_args)
        # Inside the container vLLM listens on all interfaces; the -p mapping above limits the host side.
        inner = serve.replace(host="0.0.0.0").to_argv()
        argv += [runner.image, runner.executable or "vllm", "serve", *inner]
        return LaunchCommand(
            argv,
            env,
            container=name,
            stop_argv=[docker, "stop", "--time", "10", name],
            kill_argv=[docker, "kill", name],
            secret_env=secret,
        )
    raise UserError(f'runner.kind = {runner.kind!r}: expected "native" or "container"')
