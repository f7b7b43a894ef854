"""Byte and count quantities as vLLM and people write them."""

from __future__ import annotations

import re

GiB = 1024**3
MiB = 1024**2
GB = 1000**3

# vLLM's human_readable_int: lower-case suffixes are decimal, upper-case binary
# ("1k" = 1000, "1K" = 1024, "64M" = 64 MiB), decimals allowed ("25.6k" = 25600).
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)\s*$")


def parse_human_int(text: str | int) -> int:
    """Parse an integer the way `vllm serve` does for sizes and lengths.

    Raises ValueError with the accepted forms when `text` is not one of them.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected an integer, got {text!r}")
    if isinstance(text, int):
        return text
    match = _HUMAN_INT.match(str(text))
    if not match:
        raise ValueError(f"expected an integer such as 4096, 64M (binary, 64×2^20) or 25.6k (decimal), got {text!r}")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise ValueError(f"expected a whole number, got {text!r}")
        return int(number)
    scale = _BINARY[suffix] if suffix.isupper() else _DECIMAL[suffix]
    return int(float(number) * scale)


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def format_gib(n_bytes: float | None, digits: int = 1) -> str:
    if n_bytes is None:
        return "n/a"
    return f"{n_bytes / GiB:.{digits}f} GiB"
