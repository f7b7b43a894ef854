"""--speculative-config is parsed once (core/speculation.py) and the fit, the speed estimate and the
drafter loader read that one parse; the flags the fit models are ServeConfig fields, not strings
scanned out of extra_args."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig, parse_serve_command
from sparktui.core.fit import dgx_spark, fit, settings_from
from sparktui.core.modelspec import load_model_spec
from sparktui.core.speculation import parse_speculation
from sparktui.errors import UserError

TESTS = Path(__file__).resolve().parent.parent
MTP_TARGET = "Qwen/Qwen3.5-35B-A3B"  # has MTP layers
PLAIN_TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def speculative_cases() -> list[str]:
    """Every --speculative-config written in tests/: JSON literals in the test code, and the
    speculative_config vLLM printed in the fixture logs ("non-default args: {…}")."""
    found: set[str] = set()
    for path in TESTS.rglob("*.py"):
        for literal in re.findall(r"'(\{[^'\n]*num_speculative_tokens[^'\n]*\})'", path.read_text()):
            try:
                data = json.loads(literal)
            except ValueError:
                continue  # an f-string or deliberately bad JSON
            if isinstance(data, dict):
                found.add(json.dumps(data, sort_keys=True))
    for path in (TESTS / "fixtures").rglob("*.log"):
        for literal in re.findall(r"'speculative_config': (\{[^{}]*\})", path.read_text(errors="replace")):
            found.add(json.dumps(ast.literal_eval(literal), sort_keys=True))
    return sorted(found)


CASES = speculative_cases()


def test_the_cases_cover_every_kind_of_config():
    methods = {json.loads(c).get("method") for c in CASES}
    assert {"mtp", "ngram", "dflash", "eagle3", None} <= methods
    assert any("model" in json.loads(c) and "method" not in json.loads(c) for c in CASES)  # Laguna's logs
    assert '{"num_speculative_tokens": 2}' in CASES or '{"num_speculative_tokens": 10000}' in CASES


@pytest.mark.parametrize("target", [MTP_TARGET, PLAIN_TARGET])
@pytest.mark.parametrize("case", CASES)
def test_fit_and_speed_report_the_same_method(case: str, target: str):
    try:
        config = ServeConfig(model=target, speculative_config=case)
    except UserError:
        return  # bad input (e.g. 10000 tokens): refused once, by the one parse, before any estimate
    spec = load_model_spec(target)
    result = fit(config, spec, dgx_spark())
    assert result.speed is not None
    method = settings_from(config, spec, dgx_spark()).speculative_method
    assert method == result.speed.speculative_method == config.speculation.method  # type: ignore[union-attr]


def test_tokens_without_a_method_or_a_model_are_refused_as_vllm_refuses_them():
    # vllm/config/speculative.py SpeculativeConfig.__post_init__ (0.11.2 and 0.32.0): no method and no
    # model → "draft_model"; no model for a draft model → ValueError "num_speculative_tokens was
    # provided but without speculative model". The fit said mtp here and the speed estimate ngram.
    config = ServeConfig(model=MTP_TARGET, speculative_config='{"num_speculative_tokens": 2}')
    assert config.speculation is not None and config.speculation.method == "draft_model"
    spec = load_model_spec(MTP_TARGET)
    result = fit(config, spec, dgx_spark())
    assert result.verdict == "wont_start"
    assert any("without speculative model" in r for r in result.reasons)
    assert result.speed is not None and result.speed.speculative_method == "draft_model"
    # the same with the method named fits (the draft is the target's own MTP layer)
    named = fit(config.replace(speculative_config='{"method": "mtp", "num_speculative_tokens": 2}'), spec, dgx_spark())
    assert not any("without speculative model" in r for r in named.reasons)


def test_vllms_inference_of_the_method():
    assert parse_speculation('{"model": "ngram", "num_speculative_tokens": 3}').method == "ngram"  # type: ignore[union-attr]
    laguna = parse_speculation('{"model": "poolside/Laguna-S-2.1-DFlash-NVFP4", "num_speculative_tokens": 15}')
    assert laguna is not None and laguna.method == "draft_model" and laguna.refusal is None
    assert parse_speculation('{"method": "[ngram]", "num_speculative_tokens": 3}').method == "ngram"  # type: ignore[union-attr]
    eagle = parse_speculation('{"method": "eagle3", "num_speculative_tokens": 3}')
    assert eagle is not None and eagle.refusal is not None  # an EAGLE head needs its model
    assert parse_speculation('{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}').mtp  # type: ignore[union-attr]


def test_the_parse_happens_once_when_the_config_is_made():
    config = ServeConfig(model=PLAIN_TARGET, speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    first = config.speculation
    assert first is config.speculation  # read, not parsed again
    config.speculative_config = '{"method": "suffix", "num_speculative_tokens": 4}'
    assert config.speculation is not None and config.speculation.method == "suffix"
    config.speculative_config = None
    assert config.speculation is None
    with pytest.raises(UserError, match="num_speculative_tokens"):
        ServeConfig(model=PLAIN_TARGET, speculative_config='{"num_speculative_tokens": 0}')


def test_the_flags_the_fit_models_are_fields_wherever_they_are_written():
    line = (
        f'vllm serve {PLAIN_TARGET} --attention-backend FLASHINFER -cc \'{{"cudagraph_mode": "PIECEWISE"}}\' '
        "--load-format instanttensor --no-async-scheduling --language-model-only "
        "--limit-mm-per-prompt '{\"image\": 0}' --seed 1"
    )
    parsed = parse_serve_command(line)
    lifted = ServeConfig(model=PLAIN_TARGET, extra_args=parse_serve_command(line).to_argv()[1:])
    assigned = ServeConfig(model=PLAIN_TARGET)
    assigned.extra_args = list(lifted.to_argv()[1:])
    for config in (parsed, lifted, assigned):
        assert config.attention_backend == "FLASHINFER"
        assert config.compilation_config == '{"cudagraph_mode": "PIECEWISE"}'
        assert config.load_format == "instanttensor"
        assert config.async_scheduling is False
        assert config.language_model_only is True
        assert config.limit_mm_per_prompt == '{"image": 0}'
        assert config.extra_args == ["--seed", "1"] and config.unknown_flags == ["--seed"]
    assert parsed.to_argv() == lifted.to_argv() == assigned.to_argv()
    s = settings_from(parsed, load_model_spec(PLAIN_TARGET), dgx_spark())
    assert (s.attention_backend, s.cudagraph_mode, s.load_format, s.async_scheduling) == (
        "flashinfer",
        "PIECEWISE",
        "instanttensor",
        False,
    )
    assert s.notes == ("not modelled (passed to vLLM as they are): --seed",)


def test_a_bad_value_of_a_lifted_flag_names_the_flag():
    with pytest.raises(UserError, match="--compilation-config"):
        ServeConfig(model=PLAIN_TARGET, extra_args=["--compilation-config", "{oops"])
    with pytest.raises(UserError, match="--limit-mm-per-prompt"):
        parse_serve_command(f"{PLAIN_TARGET} --limit-mm-per-prompt image=0")
    with pytest.raises(UserError, match="--attention-backend needs a value"):
        ServeConfig(model=PLAIN_TARGET, extra_args=["--attention-backend"])
