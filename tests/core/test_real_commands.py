"""Real `vllm serve` command lines from model cards, vLLM's recipes, NVIDIA's DGX Spark playbooks and the
Spark tools' READMEs (tests/fixtures/commands, with SOURCES.md): sparktui reads every flag it models as
vLLM 0.32's own parser read it (recorded by bench/serve_command_oracle.py), and keeps the rest, in order
and unchanged, for vLLM."""

from __future__ import annotations

import pytest

from sparktui.core.config import parse_serve_command
from tests.support.serve_commands import load, ours, read, theirs, vllm_words

RECORDS = load()
IDS = [r["id"] for r in RECORDS]


def test_the_set_is_large_and_every_command_was_read_by_vllm():
    assert len(RECORDS) >= 59
    assert len(set(IDS)) == len(IDS)
    assert not [r["id"] for r in RECORDS if "error" in r["vllm"]]


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_every_modelled_flag_reads_as_vllm_reads_it(record):
    mine, vllm = ours(read(record["command"])), theirs(record)
    assert {k: mine[k] for k in vllm if mine[k] != vllm[k]} == {}


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_what_sparktui_does_not_model_goes_to_vllm_unchanged(record):
    config = read(record["command"])
    words = vllm_words(record["command"], record.get("image"))
    extra = config.extra_args
    assert config.to_argv()[len(config.to_argv()) - len(extra) :] == extra
    rest, at = [], 0  # extra_args is the command's own words, in order; what is left is all modelled
    for word in words:
        if at < len(extra) and word == extra[at]:
            at += 1
        else:
            rest.append(word)
    assert at == len(extra), f"not the command's words in order: {extra}"
    assert parse_serve_command(rest).extra_args == []
