"""The design's hard rules, checked in a clean interpreter."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["sparktui.core", "sparktui.runtime", "sparktui.cli"])
def test_core_and_runtime_never_import_textual_vllm_or_torch(package):
    code = (
        "import importlib, pkgutil, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "if hasattr(pkg, '__path__'):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'vllm', 'torch'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{package} pulled in: {out.stdout.strip()}"


def test_no_shell_true_anywhere():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "sparktui"
    offenders = [str(p) for p in root.rglob("*.py") if "shell=True" in p.read_text()]
    assert offenders == []
