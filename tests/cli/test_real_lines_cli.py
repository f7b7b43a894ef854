"""`sparktui fit -- …` over the real command lines of tests/fixtures/commands: each gives a verdict, or a
clear exit 2 that says what is wrong; never a traceback (offline: the models the built-in catalog has
are fitted, the others are named as unknown)."""

from __future__ import annotations

import json

import pytest

from sparktui.cli import main
from sparktui.core.command_line import split_command
from tests.support.serve_commands import load

RECORDS = load()


@pytest.fixture
def no_cache(isolated, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # what this machine has cached plays no part
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_every_real_line_gets_a_verdict_or_a_clear_refusal(no_cache, capsys):
    verdicts = 0
    for record in RECORDS:
        code = main(["fit", "--offline", "--json", "--", *split_command(record["command"])])
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), record["id"]
        assert "Traceback" not in err, record["id"]
        if code == 2:
            assert err.startswith("sparktui: ") and ("unknown model" in err or "model folder" in err), record["id"]
        else:
            verdicts += 1
            assert json.loads(out)["verdict"], record["id"]
    assert verdicts >= 14  # the lines whose model the catalog holds
