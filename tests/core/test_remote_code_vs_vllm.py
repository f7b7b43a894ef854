"""--trust-remote-code is suggested exactly where real vLLM refuses the catalog's auto_map configs
without it: each installed vLLM's get_config is asked (tests/support/vllm_config_oracle.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparktui.core.vllm_native_configs import needs_remote_code
from sparktui.core.vllm_version import parse_version
from tests.support.vllm_oracle import FIXTURE_CONFIGS, oracle_pythons

pytestmark = pytest.mark.slow  # spawns vLLM's Python

ORACLE = Path(__file__).resolve().parents[1] / "support" / "vllm_config_oracle.py"
# the CI's older venvs sit next to its 0.32.0 one
OLDER_VENVS = sorted((Path.home() / ".cache/sparktui-ci").glob("vllm-venv-*/bin/python"))


def auto_map_configs() -> list[Path]:
    paths = sorted(FIXTURE_CONFIGS.glob("*.json")) + sorted((FIXTURE_CONFIGS / "unseen").glob("*.json"))
    # as modelspec/build.py reads it: an auto_map that names code (phi-4's config carries an empty one)
    return [p for p in paths if json.loads(p.read_text()).get("auto_map")]


def pythons() -> list[Path]:
    return sorted({*oracle_pythons().values(), *OLDER_VENVS})


@pytest.mark.parametrize("python", pythons() or [None], ids=lambda p: p.parents[1].name if p else "none")
def test_suggested_exactly_where_vllm_refuses(python):
    if python is None:
        pytest.skip("no vLLM venv installed (~/.cache/sparktui-ci/vllm-venv)")
    configs = auto_map_configs()
    assert configs, "the catalog has configs with auto_map"
    run = subprocess.run([str(python), str(ORACLE), *map(str, configs)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    answers = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(configs)
    for answer in answers:
        model_type = json.loads(Path(answer["path"]).read_text())["model_type"]
        version = parse_version(answer["version"].split("+")[0])
        assert needs_remote_code(model_type, version) == (not answer["loads"]), (answer, model_type)
