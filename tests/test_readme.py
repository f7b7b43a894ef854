import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    return [b.strip() for b in blocks]


def test_ci_runs_the_readme_test_command():
    commands = readme_commands()
    test_command = next(c for c in commands if "pytest" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_install_command_runs_the_app():
    commands = readme_commands()
    assert any(c.endswith("sparktui") and "pip install ." in c for c in commands)
