"""A mutational fuzzer over every input the CLI reads: bad input must give exit 2 and a message,
never a traceback, a hang or a signal to a process sparktui did not start.

    python bench/fuzz_inputs.py [--seed N] [--cases N] [--kind KIND ...] [--timeout S] [--keep DIR]

Kinds: profile (TOML, every field of FLAGS), serve-line (`fit -- vllm serve …`), json-flag
(--speculative-config and the other JSON-valued flags), model-config (config.json,
hf_quant_config.json and a safetensors header in a model folder, `fit --model`), log
(`inspect-log`), calibrate (`fit --calibrate-from LOG`), recipe (`fit RECIPE.yaml`, `profile
import`), bench-history (`bench --history`), state (servers/<port>.json and calibrations.json
under `status`, `stop`, `kill`, `fit`; a process of the fuzzer's own is named in the record and
must outlive the run), flight (the flight recorder's headers, rings and saved post-mortems under
`status`, `postmortem`, `mem`), cli-flags (sparktui's own options of fit, advise, status, stop,
kill, set-guard, guard, bench --history and profile export given wrong or edge values), own-files
(a model folder's config.json, hf_quant_config.json, safetensors-headers.json and index, a route
record under `route --show`, a state record under `node-watch`: each a FIFO, a folder, a loop, a
huge sparse file or damaged), forged-state (a record naming the fuzzer's own process as its tree
and supervisor, true start time or one off, no boot id, a foreign mark or cgroup; often a fake
supervisor of this user holds the port's socket, answering in the supervisor's words or freezing
on a stop; the fake must outlive the run too). Each case is one `python -m sparktui …` with the
config, state and cache folders in a fresh temporary folder, offline, one at a time, under --timeout.

Deterministic by seed: the same --seed and --cases give the same cases. Prints per kind the cases
and the outcomes: ok (exit 0/1), bad-input (exit 2 with a message), traceback, hang, other exit,
signalled (our own process was signalled); then one example per distinct traceback (its
exception and innermost sparktui frame), written with its inputs under --keep.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.core.config import FLAGS  # noqa: E402
from tests.support.fake_supervisor import SCRIPT as FAKE_SUPERVISOR  # noqa: E402

ARG_MAX = 100_000  # a word of argv is at most 128 KiB (MAX_ARG_STRLEN)
FIXTURES = REPO / "tests" / "fixtures"
TINY_CONFIG = FIXTURES / "vllm-cpu" / "tiny-llama-config.json"

# ---- values and mutations

NASTY_NUMBERS: list[Any] = [0, -1, -(10**20), 10**30, 2**63, 1e308, -1e308, math.nan, math.inf, -math.inf, 0.5, 1e-320]
NASTY_STRINGS = [
    "", " ", "auto", "-1", "nan", "inf", "1e999", "0x10", "１２", "é" * 50, "\u202e\u200b", "a\x00b", "\x1b[31mred",
    "x" * 100_000, "../../etc/passwd", "--port", "{", "[]", "null", "9" * 400, "8G", "-8G", "1.5k",
]  # fmt: skip


def nasty_value(rng: random.Random, json_ok: bool = True) -> Any:
    """A value of a random wrong (or edge) type."""
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(NASTY_NUMBERS)
    if pick == 1:
        return rng.choice(NASTY_STRINGS)
    if pick == 2:
        return rng.choice([True, False])
    if pick == 3:
        return [rng.choice(NASTY_NUMBERS), rng.choice(NASTY_STRINGS)][: rng.randrange(3)]
    if pick == 4:
        return {rng.choice(["a", "", "model", "num_speculative_tokens"]): rng.choice(NASTY_NUMBERS)}
    return None if json_ok else rng.choice(NASTY_STRINGS)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Text-level damage: truncation, byte flips, garbage, long lines, odd unicode, emptiness."""
    pick = rng.randrange(9)
    n = len(data)
    if pick == 0:
        return data[: rng.randrange(n + 1)]
    if pick == 1:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if out:
                out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if pick == 2:
        at = rng.randrange(n + 1)
        return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]
    if pick == 3:
        lines = data.splitlines(keepends=True)
        if lines:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            del lines[rng.randrange(len(lines))]
        return b"".join(lines)
    if pick == 4:
        at = rng.randrange(n + 1)
        return data[:at] + b"A" * rng.choice([10_000, 300_000, 2_000_000]) + data[at:]
    if pick == 5:
        at = rng.randrange(n + 1)
        odd = rng.choice(["\u202e", "\ufeff", "é", "\U0001f600", "\x00", "\r", "\u2028"]).encode()
        return data[:at] + odd + data[at:]
    if pick == 6:
        return b""
    if pick == 7:
        return rng.randbytes(rng.randint(1, 4096))
    return b"\xed\xa0\x80\xff\xfe" + data  # invalid UTF-8 in front


def paths_in(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a JSON/TOML/YAML tree."""
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out += paths_in(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((*prefix, i))
            out += paths_in(v, (*prefix, i))
    return out


def set_path(obj: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    for key in path[:-1]:
        obj = obj[key]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def mutate_tree(rng: random.Random, tree: Any, json_ok: bool = True) -> Any:
    """Structure-level damage: a field's value replaced by a wrong type or an edge value, or removed."""
    tree = json.loads(json.dumps(tree, allow_nan=True)) if json_ok else tree
    for _ in range(rng.randint(1, 3)):
        paths = paths_in(tree)
        if not paths:
            return nasty_value(rng, json_ok)
        path = rng.choice(paths)
        try:
            set_path(tree, path, nasty_value(rng, json_ok), delete=rng.random() < 0.15)
        except (KeyError, IndexError, TypeError):
            pass
    return tree


# ---- cases


@dataclass
class Case:
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # relative path → content, under the case folder
    specials: dict[str, str] = field(default_factory=dict)  # relative path → dir|loop|fifo|missing
    victim: bool = False  # a process of our own is named in the state: it must survive
    stdin: bytes | None = None
    # (port, answer|freeze, the record it answers with): a fake supervisor holds the port's socket
    fake: tuple[int, str, bytes] | None = None
    sparse: dict[str, int] = field(default_factory=dict)  # relative path → size: a huge file, no disk used


def toml_bytes(doc: dict[str, Any]) -> bytes:
    try:
        return tomlkit.dumps(doc).encode()
    except Exception:  # a value tomlkit cannot write (None): said as a string
        return tomlkit.dumps(json.loads(json.dumps(doc, default=str).replace("null", '"null"'))).encode()


def special(rng: random.Random, name: str) -> dict[str, str]:
    return {name: rng.choice(["dir", "loop", "missing", "fifo"])}


def tiny_model_files(prefix: str = "m") -> dict[str, bytes]:
    return {f"{prefix}/config.json": TINY_CONFIG.read_bytes()}


def case_profile(rng: random.Random) -> Case:
    seeds = sorted((REPO / "profiles").glob("*.toml"))
    text = rng.choice(seeds).read_bytes()
    r = rng.random()
    if r < 0.05:
        return Case(["fit", "{d}/p.toml"], specials=special(rng, "p.toml"))
    if r < 0.35:
        return Case(["fit", "{d}/p.toml"], {"p.toml": mutate_bytes(rng, text)})
    doc = tomlkit.parse(text.decode()).unwrap()
    serve = doc.setdefault("serve", {})
    if r < 0.8:  # a field of FLAGS, set to a wrong or edge value
        flag = rng.choice(FLAGS)
        key = flag.name.lstrip("-") if flag.name.startswith("-") else flag.name
        serve[key] = nasty_value(rng, json_ok=False)
        if rng.random() < 0.3:
            serve["model"] = "{d}/m"
    else:
        doc = mutate_tree(rng, doc, json_ok=False)
        if not isinstance(doc, dict):
            doc = {"serve": doc}
    files = {"p.toml": toml_bytes(doc)}
    files.update(tiny_model_files())
    return Case(["fit", "{d}/p.toml"], files)


def serve_commands() -> list[str]:
    data = json.loads((FIXTURES / "commands" / "serve-commands.json").read_text())
    return [c["command"] for c in data["commands"]]


def case_serve_line(rng: random.Random) -> Case:
    try:
        words = shlex.split(rng.choice(serve_commands()))
    except ValueError:
        words = ["vllm", "serve", "x"]
    r = rng.random()
    if r < 0.3 and len(words) > 3:  # a flag's value replaced
        i = rng.randrange(3, len(words))
        words[i] = str(nasty_value(rng, json_ok=False))
    elif r < 0.5:
        flag = rng.choice(FLAGS)
        if flag.name.startswith("-"):
            words += [flag.name] + ([] if rng.random() < 0.3 else [str(nasty_value(rng, json_ok=False))])
    elif r < 0.6:
        words = words[: rng.randrange(len(words) + 1)]
    elif r < 0.7:
        words.insert(rng.randrange(len(words) + 1), rng.choice(NASTY_STRINGS))
    elif r < 0.8:  # the whole line as one word, or its text damaged
        text = mutate_bytes(rng, " ".join(words).encode()).decode("utf-8", "replace")[:ARG_MAX]
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
    else:  # the tiny local model, one flag damaged
        flag = rng.choice([f for f in FLAGS if f.name.startswith("-")])
        words = ["vllm", "serve", "{d}/m", flag.name, str(nasty_value(rng, json_ok=False))]
    words = [w.replace("\x00", "")[:ARG_MAX] for w in words]  # argv cannot hold NUL nor a word over 128 KiB
    return Case(["fit", "--offline", "--", *words], tiny_model_files())


JSON_EXAMPLES = {
    "--speculative-config": [
        {"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3},
        {"method": "mtp", "num_speculative_tokens": 2},
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
    ],
    "--compilation-config": [{"cudagraph_capture_sizes": [1, 2, 4, 8]}, {"level": 3, "max_cudagraph_capture_size": 64}],
    "--attention-config": [{"backend": "FLASHINFER"}],
    "--limit-mm-per-prompt": [{"image": 2, "video": 0}],
}


def case_json_flag(rng: random.Random) -> Case:
    json_flags = [f.name for f in FLAGS if f.type == "json" and f.name.startswith("-")]
    name = rng.choice(json_flags)
    seed = rng.choice(JSON_EXAMPLES.get(name, [{"a": 1}]))
    r = rng.random()
    if r < 0.6:
        text = json.dumps(mutate_tree(rng, seed), allow_nan=True)
    elif r < 0.85:
        text = mutate_bytes(rng, json.dumps(seed).encode()).decode("utf-8", "replace")
    else:
        text = rng.choice(["[" * 50_000, '{"a":' * 3000, "1e999", "NaN", '"x"', "[]", "{}", "null", "true"])
    text = text.replace("\x00", "")[:ARG_MAX]
    if rng.random() < 0.25:  # a dotted key (--speculative-config.method X), read as vLLM reads it
        dict_paths = [p for p in paths_in(seed) if all(isinstance(k, str) for k in p)] or [("x",)]
        name += "." + ".".join(rng.choice(dict_paths))
    return Case(["fit", "--offline", "--", "vllm", "serve", "{d}/m", name, text], tiny_model_files())


def model_config_seeds() -> list[Path]:
    folder = FIXTURES / "model-configs"
    return [*sorted(p for p in folder.glob("*.json") if "__hf_quant" not in p.name), TINY_CONFIG]


def safetensors_header(rng: random.Random) -> bytes:
    header = {"model.embed_tokens.weight": {"dtype": "F16", "shape": [32000, 64], "data_offsets": [0, 4096000]}}
    r = rng.random()
    if r < 0.4:
        body = json.dumps(mutate_tree(rng, header), allow_nan=True).encode()
        return struct.pack("<Q", len(body)) + body
    if r < 0.5:
        return struct.pack("<Q", rng.choice([0, 1, 2**63, 2**64 - 1, 10**12])) + b"{}"
    if r < 0.6:
        deep = b"[" * rng.choice([1000, 100_000])
        return struct.pack("<Q", len(deep)) + deep
    body = json.dumps(header).encode()
    return mutate_bytes(rng, struct.pack("<Q", len(body)) + body)


def case_model_config(rng: random.Random) -> Case:
    seed = rng.choice(model_config_seeds())
    config = json.loads(seed.read_text())
    files: dict[str, bytes] = {}
    r = rng.random()
    if r < 0.55:
        files["m/config.json"] = json.dumps(mutate_tree(rng, config), allow_nan=True).encode()
    elif r < 0.75:
        files["m/config.json"] = mutate_bytes(rng, seed.read_bytes())
    elif r < 0.9:
        files["m/config.json"] = seed.read_bytes()
        quant = seed.with_name(seed.stem + "__hf_quant_config.json")
        qtext = quant.read_bytes() if quant.exists() else b'{"quantization": {"quant_algo": "FP8"}}'
        mutated = json.dumps(mutate_tree(rng, json.loads(qtext)), allow_nan=True).encode()
        files["m/hf_quant_config.json"] = mutated if rng.random() < 0.7 else mutate_bytes(rng, qtext)
    else:
        files["m/config.json"] = seed.read_bytes()
        files["m/model.safetensors"] = safetensors_header(rng)
    argv = ["fit", "--offline", "--model", "{d}/m"] if rng.random() < 0.85 else ["advise", "{d}/m"]
    if rng.random() < 0.08:
        name = rng.choice(["m/config.json", "m/model.safetensors", "m/hf_quant_config.json"])
        files = {"m/config.json": seed.read_bytes()} if name != "m/config.json" else {"m/x": b""}
        return Case(argv, files, specials={name: rng.choice(["dir", "loop", "fifo"])})
    return Case(argv, files)


def log_seeds() -> list[Path]:
    return sorted((FIXTURES / "vllm-logs").glob("*.log")) + sorted((FIXTURES / "vllm-cpu").glob("*.log"))


def mutated_log(rng: random.Random) -> bytes:
    data = rng.choice(log_seeds()).read_bytes()
    r = rng.random()
    if r < 0.6:
        return mutate_bytes(rng, data)
    lines = data.splitlines(keepends=True)  # a number in a line replaced by an edge value
    for _ in range(rng.randint(1, 5)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        value = str(rng.choice([*NASTY_NUMBERS, "9" * 400, "-0", "1e999"])).encode()
        lines[i] = re.sub(rb"\d+(\.\d+)?", value.replace(b"\\", b"\\\\"), lines[i], count=1)
    return b"".join(lines)


def case_log(rng: random.Random) -> Case:
    if rng.random() < 0.05:
        return Case(["inspect-log", "{d}/v.log"], specials=special(rng, "v.log"))
    argv = ["inspect-log", "{d}/v.log"] + (["--json"] if rng.random() < 0.3 else [])
    if rng.random() < 0.1:
        return Case(["inspect-log", "-"], stdin=mutated_log(rng))
    return Case(argv, {"v.log": mutated_log(rng)})


def case_calibrate(rng: random.Random) -> Case:
    cpu_logs = sorted((FIXTURES / "vllm-cpu").glob("startup_*.log"))
    data = rng.choice(cpu_logs).read_bytes() if rng.random() < 0.6 else rng.choice(log_seeds()).read_bytes()
    files = {"v.log": mutate_bytes(rng, data) if rng.random() < 0.6 else mutated_log(rng)}
    files.update(tiny_model_files())
    argv = ["fit", "--offline", "--calibrate-from", "{d}/v.log", "--", "vllm", "serve", "{d}/m", "--enforce-eager"]
    if rng.random() < 0.05:
        return Case(argv, specials=special(rng, "v.log"), files=tiny_model_files())
    return Case(argv, files)


def case_recipe(rng: random.Random) -> Case:
    seed = rng.choice(sorted((FIXTURES / "recipes").glob("*.yaml")))
    r = rng.random()
    if r < 0.4:
        data = mutate_bytes(rng, seed.read_bytes())
    else:
        tree = mutate_tree(rng, yaml.safe_load(seed.read_text()))
        try:
            data = yaml.safe_dump(tree, allow_unicode=True).encode()
        except yaml.YAMLError:
            data = seed.read_bytes()
    argv = ["fit", "--offline", "{d}/r.yaml"]
    if rng.random() < 0.3:
        argv = ["profile", "import", "{d}/r.yaml", "--name", "fz"]
    if rng.random() < 0.04:
        return Case(argv, specials=special(rng, "r.yaml"))
    return Case(argv, {"r.yaml": data})


def history_seed() -> bytes:
    record = {
        "schema_version": 1,
        "recorded_at": 1796167819.0,
        "key": {"profile": "p", "model": "m", "vllm_version": "0.32.0", "flags": ["--max-model-len", "512"]},
        "server": {"url": "http://127.0.0.1:8000", "port": 8000, "model": "m", "profile": "p", "managed": True},
        "settings": {"users": [1], "prompt_tokens": 8, "output_tokens": 4, "requests_per_user": 1},
        "runs": [{"users": 1, "ttft_p50_s": 0.05, "decode_tok_s_per_user": 10.0}],
        "sweep": None,
        "partial": False,
        "error": None,
    }
    return (json.dumps(record) + "\n").encode()


def case_history(rng: random.Random) -> Case:
    line = history_seed()
    tree = json.loads(line)
    r = rng.random()
    if r < 0.5:
        data = line + (json.dumps(mutate_tree(rng, tree), allow_nan=True) + "\n").encode()
    elif r < 0.9:
        data = mutate_bytes(rng, line * 3)
    else:
        data = line
    argv = ["bench", "--history"] + (["--json"] if rng.random() < 0.3 else [])
    if rng.random() < 0.3:  # the fit reads it too, for the speed estimate
        argv = ["fit", "--offline", "--model", "{d}/m"]
    if rng.random() < 0.1:
        return Case(argv, tiny_model_files(), specials=special(rng, "state/bench/history.jsonl"))
    return Case(argv, {"state/bench/history.jsonl": data, **tiny_model_files()})


def case_state(rng: random.Random) -> Case:
    seed = rng.choice(sorted((FIXTURES / "state").glob("*.json")))
    record = json.loads(seed.read_text())
    port = 47000 + rng.randrange(1000)
    record["port"] = port
    record["status"] = rng.choice(["running", "starting", record.get("status")])
    for key in ("supervisor", "reaper"):  # our own process, with its real start time
        if isinstance(record.get(key), dict):
            record[key] = {"pid": "{victim}", "start_time": "{victim_start}"}
    r = rng.random()
    name = f"state/servers/{port}.json"
    if r < 0.55:
        data = json.dumps(mutate_tree(rng, record), allow_nan=True).encode()
    elif r < 0.85:
        data = mutate_bytes(rng, json.dumps(record).encode())
    elif r < 0.95:
        name = "state/calibrations.json"
        data = mutate_bytes(rng, b'{"version": 1, "entries": []}') if rng.random() < 0.5 else rng.randbytes(64)
    else:
        return Case(rng.choice([["status"], ["stop", "--all"]]), specials=special(rng, name), victim=True)
    argv = rng.choice(
        [["status"], ["status", "--all"], ["status", "--json"], ["status", "--port", str(port)], ["stop", "--port",
         str(port)], ["kill", "--port", str(port)], ["stop", "--all"], ["kill", "--all"], ["fit", "--offline",
         "--model", "{d}/m"]]
    )  # fmt: skip
    files = {name: data}
    files.update(tiny_model_files())
    return Case(argv, files, victim=True)


def case_flight(rng: random.Random) -> Case:
    """The flight recorder's files (state/flight): a header from another boot without a clean stop
    makes every command look for a post-mortem; `postmortem` lists the saved ones."""
    port = 47000 + rng.randrange(1000)
    header = {
        "port": port, "profile": "p", "model": "m", "boot_id": "another-boot", "started_at": 1796167819.0,
        "supervisor_pid": "{victim}", "slots": 180, "slot_bytes": 1024, "clean_stop": False,
    }  # fmt: skip
    record = {"seq": 1, "t": 1796167820.0, "mem_available": 10 << 30}
    ring = (json.dumps(record).encode().ljust(1024, b"\0")) * 3
    pick = rng.random()
    if pick < 0.4:
        files = {f"state/flight/{port}.json": json.dumps(mutate_tree(rng, header), allow_nan=True).encode()}
    elif pick < 0.6:
        files = {f"state/flight/{port}.json": mutate_bytes(rng, json.dumps(header).encode())}
    elif pick < 0.8:
        files = {
            f"state/flight/{port}.json": json.dumps(header).encode(),
            f"state/flight/{port}.ring": mutate_bytes(rng, ring),
        }
    elif pick < 0.9:
        name = f"state/flight/postmortem-{port}-1.json"
        files = {name: mutate_bytes(rng, b'{"port": 1, "started_at": 1.0, "last_record_at": 2.0}')}
    else:
        name = rng.choice(
            [f"state/flight/{port}.json", f"state/flight/{port}.ring", f"state/flight/postmortem-{port}-1.json"]
        )
        return Case(rng.choice([["status"], ["postmortem"]]), specials=special(rng, name), victim=True)
    return Case(rng.choice([["status"], ["postmortem"], ["mem"]]), files, victim=True)


# sparktui's own numeric and text options (none that waits for a server or streams forever)
CLI_OPTIONS = [
    (["fit", "--offline", "--model", "{d}/m"], ["--machine", "--mem-available", "--context", "--bandwidth",
     "--vllm-version", "--max-model-len", "--max-num-seqs", "--gpu-memory-utilization", "--kv-cache-memory-bytes"]),
    (["advise", "{d}/m"], ["--context", "--users", "--machine", "--bandwidth", "--gpu-memory-utilization"]),
    (["status"], ["--port"]),
    (["stop"], ["--port", "--only-id"]),
    (["kill"], ["--port"]),
    (["set-guard"], ["--port", "--kill-below", "--term-below"]),
    (["guard"], ["--kill-below", "--term-below", "--grace", "--log"]),
    (["bench", "--history"], ["--profile"]),
    (["profile", "export", "{d}/p.toml", "--format", "vllm-config", "-o", "{d}/out.yaml"], ["--format"]),
]  # fmt: skip


def case_cli_flags(rng: random.Random) -> Case:
    base, options = rng.choice(CLI_OPTIONS)
    argv = list(base)
    for option in rng.sample(options, rng.randint(1, min(2, len(options)))):
        argv += [option, str(nasty_value(rng, json_ok=False)).replace("\x00", "")[:ARG_MAX]]
    if base[0] == "guard":
        argv += ["--", "true"]
    files = {"p.toml": (REPO / "profiles" / "35b-moe-5-users-8k.toml").read_bytes(), **tiny_model_files()}
    return Case(argv, files)


OWN_FILES = {  # a file sparktui reads whole → the command that reads it (issue 21's guarded readers)
    "m/config.json": ["fit", "--offline", "--model", "{d}/m"],
    "m/hf_quant_config.json": ["fit", "--offline", "--model", "{d}/m"],
    "m/safetensors-headers.json": ["fit", "--offline", "--model", "{d}/m"],
    "m/model.safetensors.index.json": ["fit", "--offline", "--model", "{d}/m"],
    "state/route/{port}.json": ["route", "--show"],
    "state/servers/{port}.json": ["node-watch", "--port", "{port}"],
}


def case_own_files(rng: random.Random) -> Case:
    """One of sparktui's own files, or a model folder's JSON, as a FIFO, a folder, a loop, a huge
    (sparse) file, or damaged, under the command that reads it."""
    port = 47000 + rng.randrange(1000)
    name, argv = rng.choice(list(OWN_FILES.items()))
    name = name.replace("{port}", str(port))
    argv = [a.replace("{port}", str(port)) for a in argv]
    files = tiny_model_files()
    seed = files["m/config.json"] if name.startswith("m/") else b'{"status": "running", "pid": 1}'
    stdin = b"" if argv[0] == "node-watch" else None  # node-watch ends when its stdin closes
    r = rng.random()
    if r < 0.6:
        files.pop(name, None)  # the FIFO, folder, loop or huge file takes its place
    if r < 0.3:
        return Case(argv, files, specials=special(rng, name), stdin=stdin)
    if r < 0.6:
        return Case(argv, files, sparse={name: rng.choice([20 << 20, 80 << 20, 300 << 20, 2 << 30])}, stdin=stdin)
    return Case(argv, {**files, name: mutate_bytes(rng, seed)}, stdin=stdin)


def case_forged_state(rng: random.Random) -> Case:
    """A record that names a process sparktui did not start (the fuzzer's own, with its true start
    time) as its tree and supervisor, a pid reused (start time off by one), no boot id, a mark that
    is not the process's, a cgroup that is not ours; sometimes with a fake supervisor (a process of
    this user, answering in the supervisor's words or freezing on a stop) holding the port's socket."""
    seed = rng.choice(sorted((FIXTURES / "state").glob("*.json")))
    record = json.loads(seed.read_text())
    port = 47000 + rng.randrange(1000)
    start = rng.choice(["{victim_start}", "{victim_start}", "{victim_start_old}"])
    tree = {"pid": "{victim}", "start_time": start, "members": [["{victim}", start]], "spawned_at": 1.0}
    if rng.random() < 0.5:
        tree["boot_id"] = rng.choice([None, "{boot_id}", "another-boot"])
    if rng.random() < 0.3:
        tree["mark"] = rng.choice(["0" * 32, "x", None])
    if rng.random() < 0.2:
        tree["cgroup"] = rng.choice(["/sys/fs/cgroup", "/sys/fs/cgroup/user.slice", "/proc/self"])
    record.update(port=port, status=rng.choice(["running", "starting", "stopping"]), tree=tree)
    record["supervisor"] = rng.choice(
        [{"pid": "{victim}", "start_time": "{victim_start}"}, {"pid": 0, "start_time": 0}, {"pid": 1, "start_time": 1}]
    )
    if rng.random() < 0.3:
        record = mutate_tree(rng, record)
        if isinstance(record, dict):
            record["tree"] = tree
    data = json.dumps(record, allow_nan=True).encode()
    fake = (port, rng.choice(["answer", "freeze"]), data) if rng.random() < 0.6 else None
    argv = rng.choice(
        [["stop", "--port", str(port)], ["kill", "--port", str(port)], ["stop", "--all"], ["kill", "--all"],
         ["status"], ["set-guard", "--port", str(port), "--disarm"]]
    )  # fmt: skip
    files = {f"state/servers/{port}.json": data} if fake is None or rng.random() < 0.7 else {}
    return Case(argv, files, victim=True, fake=fake, stdin=b"")


KINDS: dict[str, Callable[[random.Random], Case]] = {
    "profile": case_profile,
    "serve-line": case_serve_line,
    "json-flag": case_json_flag,
    "model-config": case_model_config,
    "log": case_log,
    "calibrate": case_calibrate,
    "recipe": case_recipe,
    "bench-history": case_history,
    "state": case_state,
    "flight": case_flight,
    "cli-flags": case_cli_flags,
    "own-files": case_own_files,
    "forged-state": case_forged_state,
}

# ---- running


def start_time_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def substitute(data: bytes, folder: Path, victim: int) -> bytes:
    started = start_time_of(victim)
    subs = {"{d}": str(folder), "{victim}": str(victim), "{victim_start}": str(started),
            "{victim_start_old}": str(started - 1), "{boot_id}": boot_id()}  # fmt: skip
    for k, v in subs.items():  # numbers unquoted: "{victim}" becomes a JSON int
        data = data.replace(f'"{k}"'.encode(), v.encode() if k not in ("{d}", "{boot_id}") else f'"{v}"'.encode())
        data = data.replace(k.encode(), v.encode())
    return data


def lay_out(case: Case, folder: Path, victim: int) -> None:
    for rel, data in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(substitute(data, folder, victim))
    for rel, what in case.specials.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "dir":
            path.mkdir(exist_ok=True)
        elif what == "loop":
            path.symlink_to(path)
        elif what == "fifo":
            os.mkfifo(path)
    for rel, size in case.sparse.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)


def socket_name(state_dir: Path, port: int) -> str:
    """The port's supervisor socket name for this state dir (runtime/records/state.socket_address)."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]
    return f"sparktui-{os.getuid()}-{digest}-{port}"


def start_fake(case: Case, folder: Path, victim: int) -> subprocess.Popen[bytes] | None:
    """A process of this user, not sparktui's, holding the port's supervisor socket."""
    if case.fake is None:
        return None
    port, mode, data = case.fake
    record = substitute(data, folder, victim).decode("utf-8", "replace")
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE_SUPERVISOR, socket_name(folder / "state", port), mode, record],
        stdout=subprocess.PIPE,
    )
    assert fake.stdout is not None
    fake.stdout.readline()
    return fake


def run_case(case: Case, timeout: float, source: Path | None = None) -> tuple[str, str, list[str]]:
    folder = Path(tempfile.mkdtemp(prefix="sparktui-fuzz-"))
    victim = subprocess.Popen(["sleep", "600"])  # a process sparktui did not start
    fake = None
    try:
        lay_out(case, folder, victim.pid)
        fake = start_fake(case, folder, victim.pid)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKTUI_", "HF_"))}
        env.update(
            SPARKTUI_CONFIG_DIR=str(folder / "config"), SPARKTUI_STATE_DIR=str(folder / "state"),
            SPARKTUI_CACHE_DIR=str(folder / "cache"), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9",
            HF_HOME=str(folder / "hf"), PYTHONDONTWRITEBYTECODE="1",
        )  # fmt: skip
        if source is not None:  # another tree's sparktui (an older commit unpacked) before the installed one
            env["PYTHONPATH"] = str(source)
        argv = [a.replace("{d}", str(folder)) for a in case.argv]
        try:
            out = subprocess.run(
                [sys.executable, "-m", "sparktui", *argv], cwd=folder, env=env, input=case.stdin or b"",
                capture_output=True, timeout=timeout, start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            text = (exc.stderr or b"").decode("utf-8", "replace")
            return "hang", text, argv
        except OSError as exc:  # E2BIG: a case argv cannot carry; not sparktui's doing
            return "not run", str(exc), argv
        text = out.stderr.decode("utf-8", "replace") + out.stdout.decode("utf-8", "replace")[-2000:]
        if victim.poll() is not None or (fake is not None and fake.poll() is not None):
            return "signalled", text, argv
        if "Traceback (most recent call last)" in text:
            return "traceback", text, argv
        if out.returncode in (0, 1):
            return f"exit {out.returncode}", text, argv
        if out.returncode == 2:
            return ("exit 2" if out.stderr.strip() else "exit 2 silent"), text, argv
        return f"other exit {out.returncode}", text, argv
    finally:
        for ours in (victim, fake):
            if ours is not None and ours.poll() is None:
                ours.send_signal(signal.SIGCONT)
                ours.send_signal(signal.SIGKILL)
            if ours is not None:
                ours.wait()
        shutil.rmtree(folder, ignore_errors=True)


def signature(text: str) -> str:
    """The exception's type and the innermost sparktui frame of a traceback (one per defect class)."""
    frames = re.findall(r'File "([^"]*sparktui/[^"]*)", line (\d+), in (\S+)', text)
    last = [ln for ln in text.strip().splitlines() if re.match(r"^[A-Za-z_.]+(Error|Exception|Exit)\b", ln)]
    where = f"{frames[-1][0].split('sparktui/', 1)[1]}:{frames[-1][1]} {frames[-1][2]}" if frames else "?"
    return f"{last[-1].split(':', 1)[0] if last else '?'} @ {where}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=150, help="cases per kind")
    parser.add_argument("--kind", action="append", choices=sorted(KINDS), help="only these kinds (repeatable)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    parser.add_argument("--keep", type=Path, help="write each defect's case and output here")
    parser.add_argument(
        "--source",
        type=Path,
        help="run the sparktui package found in this folder (e.g. "
        "`git archive COMMIT sparktui | tar -x -C DIR`) instead of the installed one",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case's outcome and first line")
    args = parser.parse_args(argv)
    kinds = args.kind or list(KINDS)
    defects: dict[str, tuple[str, list[str], str]] = {}
    began = time.monotonic()
    where = args.source.resolve() if args.source else REPO
    print(f"seed {args.seed}, {args.cases} cases per kind, timeout {args.timeout:g} s, sparktui from {where}")
    for kind in kinds:
        rng = random.Random(f"{args.seed}-{kind}")
        tally: Counter[str] = Counter()
        t0 = time.monotonic()
        for i in range(args.cases):
            case = KINDS[kind](rng)
            outcome, text, case_argv = run_case(case, args.timeout, args.source)
            tally[outcome] += 1
            if args.verbose:
                first = next((ln for ln in text.splitlines() if ln.strip()), "")[:200]
                print(f"  {kind} {i}: {outcome}: {first}", flush=True)
            if outcome in ("traceback", "hang", "signalled") or outcome.startswith(("other", "exit 2 silent")):
                sig = f"{kind}: {outcome}: " + (signature(text) if outcome == "traceback" else " ".join(case.argv[:2]))
                if sig not in defects:
                    defects[sig] = (kind, case_argv, text)
                    if args.keep:
                        where = args.keep / f"{kind}-{i}"
                        where.mkdir(parents=True, exist_ok=True)
                        (where / "argv.json").write_text(json.dumps(case_argv))
                        (where / "output.txt").write_text(text)
                        for rel, data in case.files.items():
                            (where / rel.replace("/", "__")).write_bytes(data)
        figures = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
        print(f"{kind:14} {args.cases:4} cases  {figures}  ({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"\n{len(defects)} distinct defects ({time.monotonic() - began:.0f} s):")
    for sig, (_kind, case_argv, text) in defects.items():
        shown = " ".join(a if len(a) < 80 else a[:77] + "..." for a in case_argv)
        last = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "")
        print(f"  {sig}\n      sparktui {shown}\n      {last[:200]}")
    return 1 if defects else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
