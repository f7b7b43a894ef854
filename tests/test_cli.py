import subprocess
import sys


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, **kw)


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("sparktui ")


def test_unknown_subcommand_is_a_usage_error():
    out = run_cli("no-such-command")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
