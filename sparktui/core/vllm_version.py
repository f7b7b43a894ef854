"""A vLLM release number: parsed from what people write (0.25, v0.11.1rc3, 0.19.1+cu130) and found
in free text (an image tag, `vllm --version`), within the range sparktui models."""

from __future__ import annotations

import re
from typing import NamedTuple

from sparktui.errors import UserError


class VllmVersion(NamedTuple):
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


_VERSION_RE = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[.+-]?[0-9A-Za-z.+-]*)?")

OLDEST = VllmVersion(0, 10, 0)
NEWEST_READ = VllmVersion(0, 33, 0)  # the newest release whose source the rules were read from
NEWEST_SUPPORTED_MINOR = VllmVersion(0, 33, 0)  # the range: 0.10 to 0.33
DEFAULT = NEWEST_READ  # what a fit assumes when nothing says which vLLM will run


def parse_version(text: str, what: str = "--vllm-version") -> VllmVersion:
    """'0.25.1', '0.25', 'v0.11.1rc3', '0.19.1+cu130' → VllmVersion; UserError naming `what`."""
    raw = str(text).strip()
    m = _VERSION_RE.fullmatch(raw) if len(raw) <= 64 else None
    if not m:
        raise UserError(f"{what}: got {raw[:64]!r}; expected a vLLM version X.Y or X.Y.Z, such as 0.25.1")
    version = VllmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if version < OLDEST:
        raise UserError(
            f"{what}: vLLM {version} is older than sparktui models (0.10 to 0.33); "
            "use a newer vLLM or leave the version out"
        )
    return version


def find_version(text: str) -> VllmVersion | None:
    """The first vLLM-looking version in free text (an image tag, `vllm --version` output)."""
    for m in re.finditer(r"(?<![\d.])v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?", text):
        version = VllmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
        if version.major == 0 and version >= OLDEST:
            return version
    return None
