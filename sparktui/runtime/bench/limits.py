"""What a benchmark run may ask for, checked before it starts (the CLI's flags, the panel's dialog)."""

from __future__ import annotations

import math

from sparktui.errors import UserError
from sparktui.runtime.bench.results import BenchSettings, SweepTargets

# Upper bounds: each user is a task holding its prompt in this process, and on a Spark this
# process's memory is the server's pool; a mistyped 10**11 must be refused, not attempted.
MAX_USERS = 4096
MAX_PROMPT_TOKENS = 2_000_000
MAX_OUTPUT_TOKENS = 1_000_000
MAX_REQUESTS_PER_USER = 100_000


def validate(settings: BenchSettings, sweep: SweepTargets | None = None) -> None:
    if not settings.users or any(not 1 <= u <= MAX_USERS for u in settings.users):
        raise UserError(
            f"--users {','.join(map(str, settings.users))}: expected whole numbers from 1 to {MAX_USERS}, e.g. 1,5,10"
        )
    for flag, value, most in (
        ("--prompt-tokens", settings.prompt_tokens, MAX_PROMPT_TOKENS),
        ("--output-tokens", settings.output_tokens, MAX_OUTPUT_TOKENS),
        ("--requests-per-user", settings.requests_per_user, MAX_REQUESTS_PER_USER),
    ):
        if value < 1:
            raise UserError(f"{flag} {value}: expected a whole number of at least 1")
        if value > most:
            raise UserError(f"{flag} {value}: expected at most {most:,}")
    if settings.output_tokens < 2:
        raise UserError("--output-tokens 1: at least 2 are needed to measure decode speed")
    if settings.depths is not None:
        if sweep is not None:
            raise UserError("--depth runs one user per depth: drop --sweep, or run the sweep without --depth")
        if not settings.depths or any(not 0 <= d <= MAX_PROMPT_TOKENS for d in settings.depths):
            raise UserError(
                f"--depth {','.join(map(str, settings.depths))}: expected token counts from 0 to "
                f"{MAX_PROMPT_TOKENS:,}, e.g. 0,4096,32768"
            )
    if sweep is not None:
        if not (0 < sweep.tok_s < math.inf and 0 < sweep.ttft_s < math.inf):
            raise UserError("--target-tok-s and --target-ttft-s: expected finite positive numbers, e.g. 20 and 1.0")
        if not 1 <= sweep.max_users <= MAX_USERS:
            raise UserError(f"--max-users {sweep.max_users}: expected 1 to {MAX_USERS}")
