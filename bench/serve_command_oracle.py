"""sparktui's reading of real `vllm serve` command lines against vLLM's own parser.

    python bench/serve_command_oracle.py           # compare, print a line per command that differs
    python bench/serve_command_oracle.py --record  # write vLLM's reading into the fixture

For each command in tests/fixtures/commands/serve-commands.json, runs tests/support/vllm_argv_oracle.py
under the CI's vLLM 0.32.0 venv: `vllm serve`'s own FlexibleArgumentParser reads the words after the
launcher, and the fields sparktui models are compared with parse_serve_command's reading of the whole
line (the F4 paste and `sparktui fit -- …` path). tests/core/test_real_commands.py checks the recorded
readings without vLLM. Exit 1 on any difference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.serve_commands import COMMANDS_FILE, ORACLE, load, ours, read, theirs, vllm_words  # noqa: E402
from tests.support.vllm_oracle import ci_python  # noqa: E402


def ask(python: Path, argvs: list[list[str]]) -> list[dict]:
    text = "".join(json.dumps(a) + "\n" for a in argvs)
    done = subprocess.run([str(python), str(ORACLE)], input=text, capture_output=True, text=True, check=False)
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(answers) != len(argvs):
        raise SystemExit(f"the oracle answered {len(answers)} of {len(argvs)}: {done.stderr[-2000:]}")
    return answers


def main(argv: list[str]) -> int:

    python = ci_python()
    if python is None:
        print("no vLLM 0.32 venv (SPARKTUI_TEST_VLLM or .ci/setup-vllm)", file=sys.stderr)
        return 2
    records = load()
    answers = ask(python, [vllm_words(r["command"], r.get("image")) for r in records])
    if "--record" in argv:
        data = json.loads(COMMANDS_FILE.read_text())
        for record, answer in zip(data["commands"], answers, strict=True):
            record["vllm"] = answer
        COMMANDS_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"recorded vLLM's reading of {len(answers)} commands")
        return 0
    differ = 0
    for record, answer in zip(records, answers, strict=True):
        if "error" in answer:
            print(f"{record['id']}: vLLM 0.32 refuses it: {answer['error']}")
            continue
        mine = ours(read(record["command"]))
        vllm = theirs({**record, "vllm": answer})
        wrong = {k: (mine[k], vllm[k]) for k in vllm if mine.get(k) != vllm[k]}
        if wrong:
            differ += 1
            print(f"{record['id']}: " + "; ".join(f"{k}: sparktui {a!r}, vLLM {b!r}" for k, (a, b) in wrong.items()))
    print(f"{len(records)} commands, {len(records) - differ} read as vLLM 0.32 reads them, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
