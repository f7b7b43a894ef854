"""The sweep: raise concurrency up a ladder until a level breaks a target (per-user decode speed,
TTFT p95, errors), then bisect the gap below it."""

from __future__ import annotations

from sparktui.runtime.bench.levels import LevelRunner
from sparktui.runtime.bench.results import LevelResult, SweepResult, SweepTargets


def meets(level: LevelResult, targets: SweepTargets) -> list[str]:
    """The targets a level broke ([] when it met both)."""
    broken = []
    if level.errors or level.partial:
        broken.append("errors")
    if level.decode_tok_s_per_user is None or level.decode_tok_s_per_user < targets.tok_s:
        broken.append("tok_s")
    if level.ttft_p95_s is None or level.ttft_p95_s > targets.ttft_s:
        broken.append("ttft")
    return broken


def ladder_of(targets: SweepTargets) -> list[int]:
    if targets.ladder:
        return sorted(set(targets.ladder))
    ladder, n = [], 1
    while n < targets.max_users:
        ladder.append(n)
        n *= 2
    return [*ladder, targets.max_users]


async def sweep(runner: LevelRunner, targets: SweepTargets, runs: list[LevelResult]) -> SweepResult:
    """Raise concurrency up the ladder until a target breaks, then bisect the gap below it."""
    ladder = ladder_of(targets)
    tried: dict[int, list[str]] = {}

    async def attempt(users: int) -> list[str]:
        level = await runner.level(users)
        runs.append(level)
        tried[users] = meets(level, targets)
        return tried[users]

    good: int | None = None
    bad: int | None = None
    for users in ladder:
        if await attempt(users):
            bad = users
            break
        good = users
    while good is not None and bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if await attempt(middle):
            bad = middle
        else:
            good = middle
    runs.sort(key=lambda r: r.users)
    return SweepResult(
        target_tok_s=targets.tok_s,
        target_ttft_s=targets.ttft_s,
        best_users=good,
        broke_at=bad,
        broken_by=tried.get(bad, []) if bad is not None else [],
        tried=sorted(tried),
        max_users=targets.max_users,
    )
