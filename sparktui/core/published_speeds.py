"""Serving speeds the DGX Spark tuning guide publishes, by model class, to set beside measured ones.

Source: the guide's table of real serving speeds on one DGX Spark with vLLM, as quoted in
sparktui's issue 12 ("Benchmark on the box"). Ranges are kept as published (low, high); a figure
the guide does not give is None. The guide measured NVFP4 checkpoints: a bf16 or FP8 model of the
same class is matched too, and `quantization` says what the guide's figure was for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedSpeed:
    model_class: str  # how the guide names the class
    pattern: str  # regex over a model id or path (case-insensitive)
    quantization: str
    tok_s_one_user: tuple[float, float] | None  # decode tok/s for one user (low, high)
    ttft_s: float | None
    max_users: tuple[int, int] | None = None  # the most concurrent users the guide suggests
    note: str = ""

    def tok_s_text(self) -> str:
        if self.tok_s_one_user is None:
            return "n/a"
        low, high = self.tok_s_one_user
        return f"{low:g} tok/s" if low == high else f"{low:g}–{high:g} tok/s"


PUBLISHED: tuple[PublishedSpeed, ...] = (
    PublishedSpeed("Qwen3.5-35B-A3B (MoE)", r"35b-a3b", "NVFP4", (47.0, 50.0), 0.12),
    PublishedSpeed("Qwen3.5-122B-A10B (MoE)", r"122b-a10b", "NVFP4", (30.0, 30.0), None, note="about 30 tok/s"),
    PublishedSpeed(
        "70B dense", r"(?<![\d.])70b(?!-a)", "NVFP4", (15.0, 20.0), None, max_users=(5, 10), note="5–10 users at most"
    ),
)


def published_speed(*names: str | None) -> PublishedSpeed | None:
    """The guide's figure for the first class any of `names` (served name, model id or path) matches."""
    for name in names:
        if not name:
            continue
        for entry in PUBLISHED:
            if re.search(entry.pattern, name, re.IGNORECASE):
                return entry
    return None
