"""argv and environment for each runner kind; secrets never on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.profiles import Profile, RunnerSettings
from sparktui.errors import UserError
from sparktui.runtime.launch.runner import build_command, resolve_native_executable


def exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def profile(runner: RunnerSettings, **serve) -> Profile:
    config = ServeConfig(model="/models/tiny", api_key="sk-secret", max_model_len=512, **serve)
    return Profile(name="tiny test", path=None, serve=config, runner=runner, env={"OMP_NUM_THREADS": "2"})


def test_native_from_a_venv_with_the_key_in_the_environment_only(tmp_path):
    vllm = exe(tmp_path / "venv" / "bin" / "vllm")
    cmd = build_command(profile(RunnerSettings(venv=str(tmp_path / "venv"))))
    assert cmd.argv == [
        str(vllm),
        "serve",
        "/models/tiny",
        "--max-model-len",
        "512",
        "--gpu-memory-utilization",
        "0.9",
        "--host",
        "127.0.0.1",
    ]
    assert cmd.kind == "native" and cmd.stop_argv is None
    assert not any("sk-secret" in a for a in cmd.argv)
    assert cmd.env == {"OMP_NUM_THREADS": "2", "VLLM_API_KEY": "sk-secret"} and cmd.secret_env == ["VLLM_API_KEY"]


def test_native_from_path_and_explicit_file(tmp_path, monkeypatch):
    found = exe(tmp_path / "bin" / "vllm")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert build_command(profile(RunnerSettings())).argv[0] == str(found)
    other = exe(tmp_path / "elsewhere" / "my-vllm")
    assert build_command(profile(RunnerSettings(executable=str(other)))).argv[0] == str(other)


def test_missing_executables_name_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match=r"runner.executable = 'vllm' is not on PATH"):
        resolve_native_executable("vllm")
    with pytest.raises(UserError, match=r"runner.venv = .*no executable .*/bin/vllm"):
        resolve_native_executable("vllm", str(tmp_path / "nowhere"))


def test_container_runs_vllm_inside_and_stops_through_docker():
    runner = RunnerSettings(
        kind="container", image="nvcr.io/nvidia/vllm:26.01-py3", container_args=["-v", "/models:/models"]
    )
    cmd = build_command(profile(runner, port=8011))
    name = "sparktui-tiny-test-8011"
    assert cmd.kind == "container" and cmd.container == name
    argv = cmd.argv
    assert Path(argv[0]).name == "docker" and argv[1:5] == ["run", "--rm", "--name", name]
    assert argv[5:7] == ["--gpus", "all"] and "--ipc=host" in argv
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8011:8011"  # published on loopback only
    image = argv.index("nvcr.io/nvidia/vllm:26.01-py3")
    assert argv[image - 2 : image] == ["-v", "/models:/models"]
    assert argv[image + 1 : image + 4] == ["vllm", "serve", "/models/tiny"]
    inner = argv[image + 1 :]
    assert inner[inner.index("--host") + 1] == "0.0.0.0"  # inside the container; -p limits the host side
    assert argv[argv.index("VLLM_API_KEY") - 1 : argv.index("VLLM_API_KEY") + 1] == ["-e", "VLLM_API_KEY"]
    assert not any("sk-secret" in a for a in argv)
    assert Path(cmd.stop_argv[0]).name == "docker" and cmd.stop_argv[1:] == ["stop", "--time", "10", name]
    assert cmd.kill_argv[1:] == ["kill", name]


def test_container_without_image_is_refused():
    with pytest.raises(UserError, match="needs \\[runner\\] image"):
        build_command(profile(RunnerSettings(kind="container")))
