"""Profiles: loading, clear errors, round trips that keep comments, atomic saves, shipped files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomlkit

from sparktui.core import profiles as prof
from sparktui.core.config import ServeConfig
from sparktui.core.profiles import (
    GuardSettings,
    RunnerSettings,
    list_profiles,
    load_profile,
    new_profile,
    save_profile,
)
from sparktui.errors import UserError
from tests.support import REPO

SHIPPED = sorted((REPO / "profiles").glob("*.toml"))
SEED_TABLE = {
    "35b-moe-single-user-long-context",
    "35b-moe-5-users-8k",
    "70b-dense-single-user",
    "70b-dense-5-users",
    "120b-moe-single-user",
    "recipe-max-throughput-single-user",
    "recipe-max-users-70b",
    "recipe-safest-large-models",
}

EXAMPLE = """\
# My tuned Llama: keep this comment.
[serve]
model = "nvidia/Llama-3.1-70B-Instruct-FP8"  # FP8 checkpoint
# utilization kept low on purpose
gpu-memory-utilization = 0.85
max-model-len = "32K"
enforce-eager = false
extra-args = ["--seed", "0"]

[machine]
name = "dgx-spark"
rack = "B3"  # not a sparktui key: must survive

[guard]
warn-below-gib = 16
armed = true

[runner]
kind = "native"
executable = "vllm"

[env]
HF_HOME = "/data/hf"

[notes]
owner = "ops"
"""


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config" / "profiles"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_seed_table_and_recipes_are_shipped():
    assert {p.stem for p in SHIPPED} == SEED_TABLE


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_profile_loads_and_is_sane(path, fixtures):
    text = path.read_text()
    assert text.startswith("# "), "each shipped profile starts with a comment saying what it is for"
    assert "Why" in text.split("[serve]")[0]
    profile = load_profile(path)
    assert profile.warnings == []
    assert profile.description and profile.name == path.stem
    serve = profile.serve
    assert serve.gpu_memory_utilization <= 0.90, "unified memory: never above 0.90"
    assert serve.host == "127.0.0.1" and serve.api_key is None
    assert serve.max_model_len and serve.max_num_seqs
    assert profile.machine == "dgx-spark" and profile.guard.armed is True
    # the fit engine's catalog knows the model: its real config is in the fixtures
    assert (fixtures / "model-configs" / (serve.model.replace("/", "__") + ".json")).is_file(), serve.model


def test_list_profiles_shipped_then_user_overrides(user_dir):
    refs = {r.name: r for r in list_profiles()}
    assert set(refs) == SEED_TABLE and all(r.source == "shipped" for r in refs.values())
    assert refs["70b-dense-5-users"].description.startswith("70B dense, five users")
    write(user_dir / "70b-dense-5-users.toml", EXAMPLE)
    write(user_dir / "mine.toml", "[serve]\nmodel = 'x'\n")
    write(user_dir / "broken.toml", "[serve\n")  # a broken file still lists
    refs = {r.name: r for r in list_profiles()}
    assert refs["70b-dense-5-users"].source == "user" and refs["mine"].source == "user"
    assert "broken" in refs
    assert load_profile("mine").serve.model == "x"
    assert load_profile("70b-dense-5-users").serve.max_model_len == 32768  # the user's wins


def test_save_a_shipped_profile_as_the_users_own(user_dir):
    p = load_profile("70b-dense-5-users")
    p.serve.max_num_seqs = 4
    path = save_profile(p, prof.user_profile_path("team"))
    assert path == user_dir / "team.toml"
    assert path.read_text().startswith("# 70B dense, five users")
    assert load_profile("team").serve.max_num_seqs == 4
    assert load_profile("70b-dense-5-users").serve.max_num_seqs == 5  # the shipped file is untouched
    for bad in ("../x", "a/b", "x.toml", ""):
        with pytest.raises(UserError, match="profile name"):
            prof.user_profile_path(bad)


def test_load_by_name_errors():
    with pytest.raises(UserError, match=r"no profile named '70b-dense-5-user'.*did you mean 70b-dense-5-users"):
        load_profile("70b-dense-5-user")
    with pytest.raises(UserError, match=r"nope\.toml: no such profile file"):
        load_profile("nope.toml")


def test_example_loads(tmp_path):
    p = load_profile(write(tmp_path / "llama.toml", EXAMPLE))
    assert p.name == "llama" and p.path == tmp_path / "llama.toml"
    assert p.serve.model == "nvidia/Llama-3.1-70B-Instruct-FP8"
    assert p.serve.max_model_len == 32768 and p.serve.extra_args == ["--seed", "0"]
    assert p.guard == GuardSettings(lines={"warn_below_gib": 16.0}, armed=True)
    assert p.runner == RunnerSettings()
    assert p.env == {"HF_HOME": "/data/hf"}
    assert p.description == "My tuned Llama: keep this comment."
    assert any("[machine] rack" in w for w in p.warnings)
    assert any("[notes]" in w for w in p.warnings)


def test_round_trip_keeps_comments_order_and_unknown_keys(tmp_path):
    path = write(tmp_path / "llama.toml", EXAMPLE)
    p = load_profile(path)
    save_profile(p, path)
    assert path.read_text() == EXAMPLE  # nothing changed: byte for byte the same

    p.serve.gpu_memory_utilization = 0.8
    p.serve.kv_cache_dtype = "fp8"
    p.guard.lines["kill_below_gib"] = 6
    p.env["VLLM_LOGGING_LEVEL"] = "DEBUG"
    save_profile(p, path)
    text = path.read_text()
    assert "# My tuned Llama: keep this comment." in text
    assert "# FP8 checkpoint" in text and "# utilization kept low on purpose" in text
    assert 'rack = "B3"  # not a sparktui key: must survive' in text
    assert '[notes]\nowner = "ops"' in text
    assert 'max-model-len = "32K"' in text  # unchanged values keep how they were written
    assert "enforce-eager = false" in text  # explicitly stated defaults are not dropped
    assert "gpu-memory-utilization = 0.8\n" in text and 'kv-cache-dtype = "fp8"' in text
    lines = text.splitlines()
    assert lines.index("gpu-memory-utilization = 0.8") < lines.index('max-model-len = "32K"')  # order kept
    again = load_profile(path)
    assert again.serve == p.serve and again.guard == p.guard and again.env == p.env
    assert again.guard.lines["kill_below_gib"] == 6

    # clearing a value removes its key; the rest stays
    p.serve.max_model_len = None
    save_profile(p, path)
    assert "max-model-len" not in path.read_text() and "# FP8 checkpoint" in path.read_text()


def test_new_profile_saves_and_loads(tmp_path):
    serve = ServeConfig(model="openai/gpt-oss-120b", max_model_len=131072, enable_prefix_caching=False)
    p = new_profile(
        "gpt",
        serve,
        machine="128",
        guard=GuardSettings(
            lines={"warn_below_gib": 12, "term_below_gib": 8, "kill_below_gib": 5, "grace_s": 3}, armed=True
        ),
        runner=RunnerSettings(kind="container", image="vllm/vllm-openai:v0.32.0", container_args=["--gpus", "all"]),
        env={"HF_HUB_OFFLINE": "1"},
    )
    path = save_profile(p, tmp_path / "sub" / "gpt.toml")
    back = load_profile(path)
    assert back.serve == serve and back.machine == "128" and back.guard == p.guard
    assert back.runner == p.runner and back.env == p.env
    assert "enable-prefix-caching = false" in path.read_text()
    assert "host" not in path.read_text()  # defaults are not written out
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_api_key_file_is_private(tmp_path):
    p = new_profile("k", ServeConfig(model="m", api_key="secret"))
    path = save_profile(p, tmp_path / "k.toml")
    assert path.stat().st_mode & 0o077 == 0
    assert load_profile(path).serve.to_env() == {"VLLM_API_KEY": "secret"}


def test_atomic_save_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = write(tmp_path / "llama.toml", EXAMPLE)
    p = load_profile(path)
    p.serve.gpu_memory_utilization = 0.7

    real_fsync = os.fsync

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prof.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        save_profile(p, path)
    monkeypatch.setattr(prof.os, "fsync", real_fsync)
    assert path.read_text() == EXAMPLE
    assert sorted(x.name for x in tmp_path.iterdir()) == ["llama.toml"]  # no temp file left behind

    def failing_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(prof.os, "replace", failing_replace)
    with pytest.raises(PermissionError):
        save_profile(p, path)
    assert path.read_text() == EXAMPLE
    assert sorted(x.name for x in tmp_path.iterdir()) == ["llama.toml"]


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("[serve\nmodel = 'x'\n", r"bad\.toml:1:\d+: not valid TOML"),
        ("[serve]\nmodel = 'x'\nport = \n", r"bad\.toml:3:\d+: not valid TOML"),
        ("[serve]\nmodel = 'x'\ngpu-memory-utilization = 1.5\n",
         r"bad\.toml:3: \[serve\] gpu-memory-utilization: got 1\.5; expected a number > 0 and ≤ 1"),
        ("[serve]\nmodel = 'x'\n\ngpu-memory-utilisation = 0.8\n",
         r"bad\.toml:4: \[serve\] gpu-memory-utilisation: unknown key; did you mean gpu-memory-utilization\?"),
        ("[serve]\nmodel = 'x'\nmax_num_seqs = 4\n", r"\[serve\] max_num_seqs: unknown key; did you mean max-num-seqs\?"),
        ("[serve]\nmodel = 'x'\nkv-cache-dtype = 'fp7'\n", r"\[serve\] kv-cache-dtype: got fp7; expected one of auto"),
        ("[serve]\nmodel = 'x'\nenforce-eager = 'yes please'\n", r"\[serve\] enforce-eager: got yes please; expected true or false"),
        ("[serve]\nmodel = 'x'\nextra-args = '--seed 0'\n", r"\[serve\] extra-args: got '--seed 0'; expected a list of strings"),
        ("[serve]\nport = 8000\n", r"\[serve\] model: missing"),
        ("[machine]\nname = 'dgx-spark'\n", r"\[serve\]: missing"),
        ("[serve]\nmodel = 'x'\n[machine]\nname = 'dgx-sprak'\n",
         r"bad\.toml:4: \[machine\] name: got 'dgx-sprak'; expected \"dgx-spark\", \"auto\" or a memory size"),
        ("[serve]\nmodel = 'x'\n[guard]\nwarn-below-gib = -3\n", r"bad\.toml:4: \[guard\] warn-below-gib: got -3; expected a finite number of GiB ≥ 0"),
        ("[serve]\nmodel = 'x'\n[guard]\nwarn-below-gib = 8\nkill-below-gib = 10\n",
         r"\[guard\] kill-below-gib: 10.0 GiB is above warn-below-gib = 8.0"),
        ("[serve]\nmodel = 'x'\n[guard]\narmed = 'yes'\n", r"\[guard\] armed: got 'yes'; expected true or false"),
        ("[serve]\nmodel = 'x'\n[guard]\nkernel = 'kill'\n", r"\[guard\] kernel: got 'kill'; expected one of 'stop', 'warn', 'off'"),
        ("[serve]\nmodel = 'x'\n[runner]\nkind = 'docker'\n", r"\[runner\] kind: got 'docker'; expected \"native\" or \"container\""),
        ("[serve]\nmodel = 'x'\n[runner]\nkind = 'container'\n", r"\[runner\] image: missing"),
        ("[serve]\nmodel = 'x'\n[env]\nDEBUG = true\n", r"\[env\] DEBUG: got true; expected a string"),
        ("[serve]\nmodel = 'x'\n[env]\n'BAD NAME' = '1'\n", r"\[env\] BAD NAME: not a valid environment variable name"),
        ("serve = 3\n", r"\[serve\]: missing"),
    ],
)  # fmt: skip
def test_bad_profiles_name_file_key_and_problem(tmp_path, text, pattern):
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(UserError, match=pattern) as err:
        load_profile(path)
    assert str(path) in str(err.value)


def test_machine_forms(tmp_path):
    for value, expected in (("'auto'", "auto"), ("128", "128"), ("'96 GiB'", "96"), ("119.5", "119.5")):
        path = write(tmp_path / "m.toml", f"[serve]\nmodel = 'x'\n[machine]\nname = {value}\n")
        assert load_profile(path).machine == expected


def test_save_refuses_a_profile_that_would_not_load(tmp_path):
    path = write(tmp_path / "p.toml", EXAMPLE)
    p = load_profile(path)
    p.guard.lines["kill_below_gib"] = 100  # above warn-below-gib = 16
    with pytest.raises(UserError, match="kill-below-gib"):
        save_profile(p, path)
    assert path.read_text() == EXAMPLE


def test_shipped_profiles_round_trip_unchanged(tmp_path):
    for src in SHIPPED:
        dst = tmp_path / src.name
        save_profile(load_profile(src), dst)
        assert dst.read_text() == src.read_text(), src.name


@pytest.mark.timeout(180)
@pytest.mark.slow  # starts a process
def test_wheel_ships_profiles_and_themes(tmp_path):
    """Build the wheel from a copy of the project and look inside it for the data folders."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("sparktui", "profiles", "themes"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    # hatchling refuses a missing forced-include folder; until themes/ has files, build with an empty one
    (src / "themes").mkdir(exist_ok=True)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("sparktui-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert {f"sparktui/profiles/{p.name}" for p in SHIPPED} <= names
        themes = [t for t in (src / "themes").rglob("*") if t.is_file()]
        assert {f"sparktui/themes/{t.relative_to(src / 'themes').as_posix()}" for t in themes} <= names
        assert tomlkit.parse(zf.read("sparktui/profiles/70b-dense-5-users.toml").decode())
