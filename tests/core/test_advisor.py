"""The model advisor: a family's variants fitted at the user's context and users, sorted."""

from __future__ import annotations

import pytest

from sparktui.core import speed as sp
from sparktui.core.advisor import advise, family_words, in_family
from sparktui.core.fit import dgx_spark
from sparktui.core.modelspec import load_model_spec


def test_family_words_drop_the_org_and_the_format():
    assert family_words("nvidia/Llama-3.1-70B-Instruct-FP8") == {"llama", "3.1", "70b"}
    assert in_family("llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B")
    assert in_family("Qwen3.5-122B-A10B", "nvidia/Qwen3.5-122B-A10B-NVFP4")
    assert not in_family("Qwen3.5-122B-A10B", "Qwen/Qwen3.5-35B-A3B")
    assert in_family("qwen3.5", "Qwen/Qwen3.5-35B-A3B") and not in_family("qwen3.5", "Qwen/Qwen3-32B")
    assert not in_family("", "anything")


@pytest.fixture(scope="module")
def qwen122():
    specs = [load_model_spec("Qwen/Qwen3.5-122B-A10B"), load_model_spec("nvidia/Qwen3.5-122B-A10B-NVFP4")]
    return advise(specs, dgx_spark(), sp.GB10, context=32768, users=4)


def test_the_variant_that_fits_comes_first(qwen122):
    nvfp4, bf16 = qwen122
    assert nvfp4.model == "nvidia/Qwen3.5-122B-A10B-NVFP4" and nvfp4.fits
    assert not bf16.fits and bf16.verdict == "wont_start" and bf16.longest_context_for_users == 0
    assert nvfp4.max_concurrency >= 4 and nvfp4.per_user_tok_s and nvfp4.per_user_tok_s > 0


def test_longest_context_for_users_is_the_edge(qwen122):
    from sparktui.core.advisor import _config, _holds
    from sparktui.core.fit import fit

    nvfp4 = qwen122[0]
    spec = load_model_spec(nvfp4.model)
    edge = nvfp4.longest_context_for_users
    assert _holds(fit(_config(spec, edge, None), spec, dgx_spark()), 4)
    limit = spec.max_len_limit or spec.max_position_embeddings
    if edge < limit:
        assert not _holds(fit(_config(spec, edge + 1, None), spec, dgx_spark()), 4)


def test_sort_orders():
    specs = [load_model_spec(m) for m in ("openai/gpt-oss-20b", "openai/gpt-oss-120b", "nvidia/Qwen3-32B-NVFP4")]
    by_speed = advise(specs, dgx_spark(), sp.GB10, context=8192, users=1, sort="speed")
    rates = [a.per_user_tok_s for a in by_speed if a.fits]
    assert rates == sorted(rates, reverse=True)
    by_users = advise(specs, dgx_spark(), sp.GB10, context=8192, users=1, sort="users")
    conc = [a.max_concurrency for a in by_users if a.fits]
    assert conc == sorted(conc, reverse=True)
    by_context = advise(specs, dgx_spark(), sp.GB10, context=8192, users=1, sort="context")
    ctx = [a.longest_context_for_users for a in by_context if a.fits]
    assert ctx == sorted(ctx, reverse=True)


def test_apply_gives_a_command_that_fits(qwen122):
    argv = qwen122[0].apply_argv()
    assert argv[:3] == ["nvidia/Qwen3.5-122B-A10B-NVFP4", "--max-model-len", "32768"]
    assert "--reasoning-parser" in argv


def test_a_drafter_is_an_option_of_its_target_not_a_variant_to_run():
    """gemma-4-26B-A4B's DFlash drafter (3.5 GiB, a qwen3-architecture model) is no model to serve."""
    from sparktui.core.advisor import advise
    from sparktui.core.fit import dgx_spark
    from sparktui.core.modelspec import load_model_spec
    from sparktui.core.speed import hardware_for

    machine = dgx_spark()
    specs = [load_model_spec(m) for m in ("z-lab/gemma-4-26B-A4B-it-DFlash", "google/gemma-4-26B-A4B")]
    hardware = hardware_for(machine.name, machine.mem_total, machine.unified)
    advice = advise(specs, machine, hardware, context=32768, users=1)
    assert [a.model for a in advice] == ["google/gemma-4-26B-A4B"]
    assert advice[0].drafters == [("z-lab/gemma-4-26B-A4B-it-DFlash", "dflash")]
    assert not any("qwen" in " ".join(f.argv()) for f in advice[0].flags)
