"""sparktui installed as Spark owners install their tools: the built wheel carries its data
(themes, profiles, the model catalog) and package-index metadata, and runs from `uvx --from
WHEEL` and after `pipx install WHEEL`, outside the checkout."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow  # builds a wheel and installs it into fresh environments

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(dist)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (built,) = dist.glob("sparktui-*.whl")
    return built


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}:{os.environ['PATH']}")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {name} is missing (pip install '.[test]' installs it)")
        pytest.skip(f"{name} is not installed (pip install {name})")
    return found


def outside(tmp_path: Path) -> dict[str, str]:
    """An environment with nothing of the checkout: own config, state and cache folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        SPARKTUI_CONFIG_DIR=str(tmp_path / "config"),
        SPARKTUI_STATE_DIR=str(tmp_path / "state"),
        SPARKTUI_CACHE_DIR=str(tmp_path / "cache"),
        HF_HUB_OFFLINE="1",
    )
    return env


def test_the_wheel_carries_data_and_metadata(wheel: Path) -> None:
    from sparktui import __version__

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = email.message_from_bytes(zf.read(f"sparktui-{__version__}.dist-info/METADATA"))
    for folder in ("themes", "profiles"):
        shipped = {p.name for p in (REPO / folder).glob("*.toml")}
        assert shipped and {f"sparktui/{folder}/{n}" for n in shipped} <= names, folder
    assert "sparktui/core/model_catalog.json" in names and "sparktui/py.typed" in names
    assert meta["Version"] == __version__ and meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier") or []
    assert "Operating System :: POSIX :: Linux" in classifiers and "Environment :: Console" in classifiers
    assert "vllm" in (meta["Keywords"] or "")
    assert any(r.startswith("pyyaml") for r in meta.get_all("Requires-Dist") or [])
    assert (REPO / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_uvx_runs_the_wheel(wheel: Path, tmp_path: Path) -> None:
    uvx = tool("uvx")
    done = subprocess.run(
        [uvx, "--from", str(wheel), "sparktui", "fit", "70b-dense-5-users"],
        cwd=tmp_path,
        env=outside(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sparktui fit — nvidia/Llama-3.1-70B-Instruct-FP8" in done.stdout


def test_pipx_installs_the_wheel(wheel: Path, tmp_path: Path) -> None:
    pipx = tool("pipx")
    env = {**outside(tmp_path), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    env["PIPX_MAN_DIR"] = str(tmp_path / "man")
    done = subprocess.run(
        [pipx, "install", str(wheel)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installed = tmp_path / "bin" / "sparktui"
    for args, expected in ((["--version"], "sparktui "), (["fit", "70b-dense-5-users"], "verdict    FITS")):
        ran = subprocess.run(
            [str(installed), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0 and expected in ran.stdout, ran.stderr[-3000:]
