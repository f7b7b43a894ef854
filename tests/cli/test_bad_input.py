"""Bad input to every subcommand: exit 2 and one line naming the file, field or flag, never a
traceback. In-process through the CLI entry (fast); the cases that need a process of their own
(stdin closed or not text, a state dir that cannot be made) run one and are marked slow."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.cli import main

GOOD = '[serve]\nmodel = "/nonexistent/tiny"\nport = 8011\n'
CLUSTER = GOOD + '[cluster]\nnodes = ["spark-a", "spark-b"]\n'
LONG = "x" * 300

# (name, profile text, words the one-line error must hold)
BAD_PROFILES = [
    ("toml syntax", "[serve\nmodel=", ["not valid TOML"]),
    ("no serve", "[guard]\narmed = true\n", ["[serve]", "missing"]),
    ("model not a string", "[serve]\nmodel = 3\n", ["[serve] model"]),
    ("port a string", GOOD.replace("8011", '"abc"'), ["port"]),
    ("port negative", GOOD.replace("8011", "-1"), ["port"]),
    ("port huge", GOOD.replace("8011", "99999999999"), ["port"]),
    ("utilization nan", GOOD + "gpu-memory-utilization = nan\n", ["gpu-memory-utilization"]),
    ("utilization inf", GOOD + "gpu-memory-utilization = inf\n", ["gpu-memory-utilization"]),
    ("max-model-len negative", GOOD + "max-model-len = -5\n", ["max-model-len"]),
    ("unknown serve key", GOOD + "bogus = 1\n", ["[serve] bogus", "unknown key"]),
    ("machine banana", GOOD + '[machine]\nname = "banana"\n', ["[machine] name"]),
    ("machine inf", GOOD + "[machine]\nname = inf\n", ["[machine] name", "100000"]),
    ("machine huge", GOOD + "[machine]\nname = 1e300\n", ["[machine] name"]),
    ("machine tiny", GOOD + "[machine]\nname = 0.001\n", ["[machine] name"]),
    ("guard armed a string", GOOD + '[guard]\narmed = "yes"\n', ["[guard] armed", "true or false"]),
    ("guard line nan", GOOD + "[guard]\nwarn-below-gib = nan\n", ["[guard] warn-below-gib", "finite"]),
    ("guard line inf", GOOD + "[guard]\nkill-below-gib = inf\n", ["[guard] kill-below-gib"]),
    ("guard line negative", GOOD + "[guard]\nterm-below-gib = -1\n", ["[guard] term-below-gib"]),
    ("guard lines out of order", GOOD + "[guard]\nwarn-below-gib = 1\nkill-below-gib = 5\n", ["warn ≥ term ≥ kill"]),
    ("guard line huge", GOOD + "[guard]\nkill-below-gib = 1e300\n", ["[guard] kill-below-gib", "100000"]),
    ("guard priority huge", GOOD + "[guard]\npriority = 1e9\n", ["[guard] priority"]),
    ("watch seconds nan", GOOD + "[watch]\nwedge-after-s = nan\n", ["[watch] wedge-after-s", "finite"]),
    ("watch seconds inf", GOOD + "[watch]\nwedge-after-s = inf\n", ["[watch] wedge-after-s", "finite"]),
    ("watch failures zero", GOOD + "[watch]\nmax-failures = 0\n", ["[watch] max-failures"]),
    ("runner kind", GOOD + '[runner]\nkind = "docker"\n', ["[runner] kind"]),
    ("env name", GOOD + '[env]\n"1A" = "x"\n', ["[env] 1A"]),
    ("cluster one node", GOOD + '[cluster]\nnodes = ["a"]\n', ["[cluster] nodes"]),
    ("cluster backend", CLUSTER + 'backend = "x"\n', ["[cluster] backend"]),
    ("cluster interface", CLUSTER + 'interface = "eth0; rm"\n', ["[cluster] interface"]),
    ("cluster port", CLUSTER + "master-port = 0\n", ["[cluster] master-port"]),
    ("cluster unknown key", CLUSTER + "foo = 1\n", ["[cluster] foo"]),
    # ssh would read these as options (-oProxyCommand runs a local shell) or split them
    ("cluster node an ssh option", GOOD + '[cluster]\nnodes = ["-oProxyCommand=id", "b"]\n', ["[cluster] nodes"]),
    ("cluster node with a space", GOOD + '[cluster]\nnodes = ["a b", "b"]\n', ["[cluster] nodes"]),
    ("cluster node 300 characters", GOOD + f'[cluster]\nnodes = ["{LONG}", "b"]\n', ["[cluster] nodes"]),
    ("hf token in extra-args", GOOD + 'extra-args = ["--hf-token", "hf_secret"]\n', ["--hf-token", "HF_TOKEN"]),
    ("not text", "\x00\xff\xfe", ["not valid TOML"]),
    ("empty", "", ["[serve]", "missing"]),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    return code, err


def _assert_refused(code: int, err: str, words: list[str]) -> None:
    lines = [
        line for line in err.strip().splitlines() if not line.startswith("usage:") and line.startswith(" ") is False
    ]
    assert code == 2, err
    assert "Traceback" not in err
    assert lines, "no error line"
    for word in words:
        assert word in lines[-1], f"{word!r} not in {lines[-1]!r}"


@pytest.mark.parametrize("command", ["fit", "serve"])
@pytest.mark.parametrize(("case", "text", "words"), BAD_PROFILES, ids=[c[0] for c in BAD_PROFILES])
def test_a_bad_profile_is_refused_naming_the_file_and_field(
    command: str, case: str, text: str, words: list[str], isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = isolated / "bad.toml"
    path.write_text(text)
    code, err = _run([command, str(path)], capsys)
    _assert_refused(code, err, [str(path), *words])


# (argv, words the error must hold); {dir} is a folder, {long} a 300-character name
BAD_ARGS = [
    *[([c, "--no-such-flag"], ["--no-such-flag"]) for c in ("status", "stop", "kill", "mem", "postmortem", "bench")],
    *[([c, "--no-such-flag"], ["--no-such-flag"]) for c in ("guard", "node-check", "set-guard")],
    (["fit", "/nope.toml"], ["/nope.toml"]),
    (["serve", "/nope.toml"], ["/nope.toml"]),
    (["fit", "{dir}.toml"], ["a folder, not a profile"]),
    (["serve", "{dir}.toml"], ["a folder, not a profile"]),
    (["inspect-log", "/nope.log"], ["/nope.log"]),
    (["inspect-log", "{dir}"], ["Is a directory"]),
    (["guard", "--log", "{dir}", "--", "true"], ["--log", "directory"]),
    (["guard", "--"], ["needs a command"]),
    (["guard", "--warn-below", "nan", "--", "true"], ["--warn-below"]),
    (["guard", "--grace", "inf", "--", "true"], ["--grace"]),
    (["mem", "--interval", "nan"], ["--interval"]),
    (["mem", "--interval", "inf", "--watch"], ["--interval", "finite"]),
    (["mem", "--interval", "-1", "--watch"], ["--interval"]),
    (["bench", "--users", "0"], ["--users"]),
    (["bench", "--output-tokens", "0"], ["--output-tokens"]),
    # one task and one prompt per user in this process, whose memory is the server's pool
    (["bench", "--users", "99999999999"], ["--users", "4096"]),
    (["bench", "--prompt-tokens", "999999999999"], ["--prompt-tokens", "at most"]),
    (["bench", "--requests-per-user", "999999999"], ["--requests-per-user", "at most"]),
    (["bench", "--sweep", "--target-tok-s", "nan", "--target-ttft-s", "1"], ["--target-tok-s", "finite"]),
    (["bench", "--sweep", "--target-tok-s", "5", "--target-ttft-s", "inf"], ["--target-ttft-s", "finite"]),
    (["bench", "--sweep", "--target-tok-s", "5", "--target-ttft-s", "1", "--max-users", "10000000"], ["--max-users"]),
    (["advise", ""], ["empty name"]),
    (["advise", "{long}"], ["not usable as a folder path"]),
    (["advise", "llama-3.1-70b", "--context", "-1"], ["--context"]),
    (["advise", "llama-3.1-70b", "--bandwidth", "nan"], ["--bandwidth"]),
    (["fit", "--machine", "banana", "--model", "x"], ["--machine"]),
    (["fit", "--mem-available", "nan", "--model", "x"], ["--mem-available"]),
    (["fit", "--vllm-version", "banana", "--model", "x"], ["--vllm-version"]),
    (["fit", "--model", "{long}"], ["not usable as a folder path"]),
    (["fit", "--port", "99999", "--model", "x"], ["--port"]),
    (["fit", "--model", "x", "--hf-token", "hf_secret"], ["--hf-token", "HF_TOKEN"]),
    (["fit", "--", "vllm", "serve", "x", "--hf-token=hf_secret"], ["--hf-token", "HF_TOKEN"]),
    # NVIDIA's vLLM playbook: `vllm serve ${HF_MODEL_HANDLE}`, pasted without the shell that expands it
    (["fit", "--offline", "--", "vllm", "serve", "${HF_MODEL_HANDLE}"], ["${HF_MODEL_HANDLE}", "shell variable"]),
    # the spellings vLLM reads as --hf-token: underscores, a unique prefix
    (["fit", "--", "vllm", "serve", "x", "--hf_token", "hf_secret"], ["--hf-token", "HF_TOKEN"]),
    (["fit", "--", "vllm", "serve", "x", "--hf-tok=hf_secret"], ["--hf-token", "HF_TOKEN"]),
    *[
        ([c, "--port", p], ["--port", "1 to 65535"])
        for c in ("status", "stop", "kill", "set-guard")
        for p in ("x", "-1")
    ],
    (["bench", "--port", "0"], ["--port", "1 to 65535"]),
    (["node-check", "--port", "-5"], ["--port", "1 to 65535"]),
    (["node-check", "--port", "70000"], ["--port", "1 to 65535"]),
    (["node-watch", "--port", "-1"], ["--port", "1 to 65535"]),
    (["set-guard", "--warn-below", "nan"], ["--warn-below"]),
    # a launch id names one supervisor (runtime/records/launch_id.py): a token, with the port it is on
    *[
        ([c, "--port", "8011", "--only-id", bad], ["--only-id", "launch id"])
        for c in ("stop", "kill")
        for bad in ("", "a b;id", "x" * 65)
    ],
    *[([c, "--only-id", "abc"], ["--only-id abc", "--port"]) for c in ("stop", "kill")],
    *[([c, "--all", "--only-id", "abc"], ["--only-id abc", "--port"]) for c in ("stop", "kill")],
    (["node-serve", "--launch-id", "$(id)"], ["--launch-id", "launch id"]),
    (["node-watch", "--port", "8011", "--launch-id", ""], ["--launch-id", "launch id"]),
]


@pytest.mark.parametrize(("argv", "words"), BAD_ARGS, ids=[" ".join(a)[:60] for a, _ in BAD_ARGS])
def test_a_bad_flag_or_file_is_refused_naming_it(
    argv: list[str], words: list[str], isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = isolated / "a-folder"
    folder.mkdir()
    (isolated / "a-folder.toml").mkdir()
    argv = [a.replace("{dir}", str(folder)).replace("{long}", LONG) for a in argv]
    code, err = _run(argv, capsys)
    _assert_refused(code, err, words)


def test_a_bare_hf_token_flag_is_left_to_vllm() -> None:
    """Bare, --hf-token means the saved `hf auth login`: no secret on the command line."""
    from sparktui.core.config import parse_serve_command

    serve = parse_serve_command(["vllm", "serve", "x", "--hf-token", "--max-model-len", "512"])
    assert "--hf-token" in serve.to_argv()


def test_node_check_with_a_300_character_model_still_answers(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The head reads node-check's JSON: a model name no path can hold is simply not a local folder."""
    code = main(["node-check", "--model", LONG])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["model_cached"] is None


BAD_RECORDS = ['{"port": 8011, "status": 5, "supervisor": "x"}', "\udcff\udcfe"]


@pytest.mark.parametrize("record", BAD_RECORDS, ids=["wrong shape", "not UTF-8"])
@pytest.mark.parametrize("argv", [["status"], ["stop", "--port", "8011"], ["set-guard", "--port", "8011", "--arm"]])
def test_a_damaged_state_record_is_named_not_a_traceback(
    record: str, argv: list[str], isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparktui.runtime.records import state as st

    path = st.state_dir() / "servers" / "8011.json"
    path.write_bytes(record.encode("utf-8", "surrogateescape"))
    code, err = _run(argv, capsys)
    assert "Traceback" not in err
    assert str(path) in err
    assert code == (0 if argv == ["status"] else 2)
    assert path.read_bytes() == record.encode("utf-8", "surrogateescape")  # left for a look, not lost


@pytest.mark.parametrize("record", BAD_RECORDS, ids=["wrong shape", "not UTF-8"])
def test_node_watch_reads_a_damaged_record_as_no_live_supervisor(record: str, isolated: Path) -> None:
    from sparktui.runtime.cluster.node_stream import stream_state
    from sparktui.runtime.records import state as st

    (st.state_dir() / "servers" / "8011.json").write_bytes(record.encode("utf-8", "surrogateescape"))
    out = io.StringIO()
    head = os.open(os.devnull, os.O_RDONLY)  # the head's end: reads as hung up at once
    try:
        code = stream_state(8011, out=out, stdin_fd=head)
    finally:
        os.close(head)
    assert code in (0, 1)
    first = json.loads(out.getvalue().splitlines()[0])
    assert first["status"] in ("none", "lost", "5")


def _cli(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparktui", *argv], capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
@pytest.mark.parametrize("stdin", [b"", b"\xff\xfe", None], ids=["empty", "not UTF-8", "closed"])
def test_node_serve_with_no_usable_profile_on_stdin(stdin: bytes | None, env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "sparktui", "node-serve"]
    if stdin is None:  # stdin closed altogether
        out = subprocess.run(
            argv,
            capture_output=True,
            env=env,
            timeout=120,
            preexec_fn=lambda: os.close(0),
        )
    else:
        out = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=120)
    err = out.stderr.decode()
    assert out.returncode == 2, err
    assert "Traceback" not in err
    assert "stdin" in err.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["inspect-log", "-"], ["standard input is closed"]),
        (["node-watch", "--port", "8011"], ["standard input is closed"]),
    ],
    ids=["inspect-log", "node-watch"],
)
def test_a_command_reading_stdin_started_with_it_closed(argv: list[str], words: list[str], env: dict[str, str]) -> None:
    """node-watch used to wait forever: its hang-up check polled fd 0, which its own inotify fd had taken."""
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        preexec_fn=lambda: os.close(0),
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert all(w in out.stderr.strip().splitlines()[-1] for w in words)


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["status"], ["stop", "--all"], ["postmortem"], ["node-watch", "--port", "8011"]])
def test_a_state_dir_that_cannot_be_made_is_named(argv: list[str], env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = _cli(argv, env={**env, "SPARKTUI_STATE_DIR": str(blocker / "state")}, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "SPARKTUI_STATE_DIR" in lines[0] and str(blocker / "state") in lines[0]


def test_node_serve_leaves_no_staged_profile_behind(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile on stdin (its [env] may hold secrets) is staged in a folder of this call's own,
    removed once read: two heads launching at once never read each other's."""
    from sparktui.runtime.records import state as st

    text = GOOD + '[env]\nHF_TOKEN = "hf_secret"\n'  # no [cluster]: refused after staging
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, err = _run(["node-serve"], capsys)
    assert code == 2 and "[cluster]" in err
    left = [p for p in (st.state_dir() / "profiles").rglob("*")]
    assert left == []
