"""The depth mode (llama-benchy's pp/tg at a context depth): one user, one level per depth, each
prompt `depth` + prompt_tokens tokens of fresh random words, so nothing comes from the prefix cache."""

from __future__ import annotations

from sparktui.runtime.bench.levels import LevelRunner
from sparktui.runtime.bench.results import LevelResult


async def depth_level(runner: LevelRunner, depth: int) -> LevelResult:
    """One user at `depth` tokens of context: prompt processing over the whole prompt (depth +
    prompt_tokens) and generation after it, as llama-benchy's pp and tg."""
    client = runner.client
    client.words = max(1, round((depth + client.settings.prompt_tokens) * client.word_ratio))
    level = await runner.level(1)
    pp = None
    if level.prompt_tokens_mean and level.ttft_p50_s:
        pp = level.prompt_tokens_mean / level.ttft_p50_s
    return level.model_copy(update={"depth": depth, "pp_tok_s": pp, "tg_tok_s": level.decode_tok_s_per_user})
