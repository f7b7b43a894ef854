import re
import subprocess
import sys

import pytest


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, **kw)


@pytest.mark.slow  # starts a process
def test_version():
    out = run_cli("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("sparktui ")


@pytest.mark.slow  # starts a process
def test_unknown_subcommand_is_a_usage_error():
    out = run_cli("no-such-command")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


@pytest.mark.slow  # starts a process
def test_output_into_a_closed_pipe_is_not_a_traceback():
    # `sparktui fit … | head -1`: the reader has gone before sparktui writes.
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "sparktui", "fit", "--model", "Qwen/Qwen3-32B"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert out.returncode == 0
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_a_profile_name_alone_opens_the_control_panel(monkeypatch):
    from sparktui import cli
    from sparktui.commands import ui

    opened = []
    monkeypatch.setattr(ui, "open_panel", lambda profile=None, theme=None: opened.append(profile) or 0)
    assert cli.main(["70b-dense-single-user"]) == 0
    assert cli.main(["my-own.toml"]) == 0
    assert opened == ["70b-dense-single-user", "my-own.toml"]


@pytest.mark.slow  # starts a process
def test_a_word_that_is_neither_command_nor_profile_names_both(tmp_path):
    import os

    env = {**os.environ, "SPARKTUI_CONFIG_DIR": str(tmp_path)}
    out = run_cli("70b-dense-5-usrs", env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "neither a command nor a profile" in out.stderr
    assert "Did you mean 70b-dense-5-users" in out.stderr
    assert "profiles: 120b-moe-single-user" in out.stderr and "commands: ui, fit" in out.stderr
    assert "invalid choice" not in out.stderr


@pytest.mark.slow  # starts a process
def test_opening_the_panel_imports_no_other_command_and_no_pydantic_before_it_runs(tmp_path):
    """`sparktui PROFILE`: the panel's first frame waits for nothing but Textual (bench/tui.py), not
    even argparse (nothing to parse)."""
    import os

    probe = (
        "import sys\n"
        "from sparktui import cli\n"
        "from sparktui.commands import ui\n"
        "seen = []\n"
        "ui.open_panel = lambda profile=None, theme=None: seen.append(sorted(m for m in sys.modules if m.startswith(("
        "'sparktui.commands', "
        "'pydantic', 'sparktui.runtime', 'argparse')))) or 0\n"
        "assert cli.main(['70b-dense-single-user']) == 0\n"
        "print(seen[0])\n"
    )
    env = {**os.environ, "SPARKTUI_CONFIG_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['sparktui.commands', 'sparktui.commands.ui']"


@pytest.mark.parametrize(
    ("command", "example"),
    [
        ("completion", '  eval "$(sparktui completion bash)"              # in ~/.bashrc'),
        ("route", "    sparktui route --listen 127.0.0.1:8080 qwen3-8b gemma-3-4b"),
        ("profile", "  sparktui profile export PROFILE --format vllm-config|eugr|sparkrun [-o FILE]"),
        ("metrics", "  sparktui metrics --once                      print one scrape and exit"),
    ],
)
def test_help_keeps_the_example_lines_of_the_description_whole(command, example):
    # `sparktui completion --help` ran the three eval lines together into one paragraph
    from sparktui.cli import build_parser

    parser = build_parser(command, others=False)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    assert example in sub.format_help().splitlines()


def _all_commands() -> list[str]:
    from sparktui.cli import COMMANDS

    return sorted(COMMANDS)


@pytest.mark.parametrize("command", _all_commands())
def test_help_names_no_source_file(command):
    # `sparktui fit --help` said "(runtime/launch/vllm_version.py)": a path in the source, not the user's words
    from sparktui.cli import build_parser

    parser = build_parser(command, others=False)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    text = sub.format_help()
    assert not re.search(r"[\w/]+\.py\b", text), text


def test_an_unknown_option_shows_the_commands_own_usage(capsys):
    # `sparktui postmortem --bogus` showed the top level's usage (`sparktui [-h] [--version] COMMAND ...`)
    from sparktui.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["postmortem", "--bogus"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("usage: sparktui postmortem") and "--bogus" in err, err
