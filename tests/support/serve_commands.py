"""Real `vllm serve` command lines (tests/fixtures/commands/serve-commands.json) and what vLLM's own
parser read from each: sparktui's reading of the same line, put in the terms the record uses."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from sparktui.core.command_line import split_command, split_env
from sparktui.core.config import ServeConfig, parse_serve_command, utilization_left_to_vllm

COMMANDS_FILE = Path(__file__).resolve().parent.parent / "fixtures" / "commands" / "serve-commands.json"
ORACLE = Path(__file__).resolve().parent / "vllm_argv_oracle.py"


def load() -> list[dict[str, Any]]:
    return list(json.loads(COMMANDS_FILE.read_text())["commands"])


def vllm_words(text: str, image: str | None = None) -> list[str]:
    """The words vLLM's parser gets, found without sparktui's own launcher rules: a shell's split (line
    continuations joined, comments dropped; a `-c` script that starts vLLM split again), then what follows
    `vllm serve`, the `-m` module or `image` (a container whose entrypoint is `vllm serve`), up to the
    first shell operator or redirection."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    script = next((w for w in words if "vllm serve" in w and w != "vllm serve" and " " in w), None)
    if script is not None:
        words = shlex.split(script.replace("\\\n", " "), comments=True)
    for i, word in enumerate(words):
        if image is not None and word == image:
            return _one_command(words[i + 1 :])
        if image is None and Path(word).name == "vllm" and words[i + 1 : i + 2] == ["serve"]:
            return _one_command(words[i + 2 :])
        if image is None and word == "-m" and words[i + 1 : i + 2] == ["vllm.entrypoints.openai.api_server"]:
            return _one_command(words[i + 2 :])
    raise ValueError(f"no vLLM server in {text[:60]!r}")


def _one_command(words: list[str]) -> list[str]:
    for i, word in enumerate(words):
        if word in ("&&", "||", ";", "|", "&") or word.startswith(">") or word[:2] in ("1>", "2>"):
            return words[:i]
    return words


def ours(config: ServeConfig) -> dict[str, Any]:
    """sparktui's reading, in the oracle's terms. Where sparktui's own launches differ from vLLM's
    defaults (host, utilization), a command that leaves them out is read as vLLM 0.32 runs it."""
    given = config.model_fields_set
    left = utilization_left_to_vllm(config, "0.32")
    read: dict[str, Any] = {}
    for field in FIELDS:
        value = getattr(config, field)
        if field == "host" and field not in given:
            value = None
        elif field == "gpu_memory_utilization" and left is not None:
            value = left[0]
        elif field == "served_model_name" and value is not None:
            value = value.split()
        elif field in ("speculative_config", "limit_mm_per_prompt") and value is not None:
            value = json.loads(value)
        elif field == "attention_backend" and value is not None:
            value = value.upper()  # vLLM takes the enum's name in any case
        read[field] = value
    return read


def theirs(record: dict[str, Any]) -> dict[str, Any]:
    """vLLM's reading as recorded, in the same terms as `ours`."""
    read = {k: v for k, v in record["vllm"].items() if k in FIELDS}
    if read.get("limit_mm_per_prompt") == {}:
        read["limit_mm_per_prompt"] = None
    if read.get("attention_backend") is not None:
        read["attention_backend"] = read["attention_backend"].upper()
    if read.get("enable_lora") is None:
        read["enable_lora"] = False  # vLLM 0.32's default None: off
    return read


FIELDS = (
    "model", "served_model_name", "dtype", "quantization", "max_model_len", "trust_remote_code",
    "gpu_memory_utilization", "kv_cache_dtype", "kv_cache_memory_bytes", "block_size", "enforce_eager",
    "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "host", "port", "tensor_parallel_size",
    "speculative_config", "enable_lora", "mamba_ssm_cache_dtype", "attention_backend", "load_format",
    "async_scheduling", "language_model_only", "limit_mm_per_prompt",
)  # fmt: skip


def read(text: str) -> ServeConfig:
    """sparktui's reading of a pasted line, as `sparktui fit -- …` reads it (its NAME=value prefix is
    the server's environment, not a flag)."""
    _, words = split_env(split_command(text))
    return parse_serve_command(words)
