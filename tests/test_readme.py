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


def test_readme_profile_example_loads(tmp_path):
    from sparktui.core.profiles import parse_profile

    block = next(
        b for b in re.findall(r"```toml\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S) if "[serve]" in b
    )
    profile = parse_profile(block, tmp_path / "example.toml")
    assert profile.serve.max_num_seqs == 5 and profile.guard.lines["kill_below_gib"] == 3.5
    assert profile.runner.venv and profile.warnings == []


def test_readme_settings_example_names_real_binding_ids(tmp_path):
    from sparktui.ui.app import SparkApp
    from sparktui.ui.settings import load_settings

    block = next(b for b in re.findall(r"```toml\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S) if "[keys]" in b)
    (tmp_path / "config.toml").write_text(block)
    settings = load_settings(tmp_path / "config.toml")
    assert settings.theme == "sparktui-contrast" and settings.keys == {"server.launch": "ctrl+l"}
    ids = {b.id for b in SparkApp.BINDINGS if getattr(b, "id", None)}
    assert set(settings.keys) <= ids
