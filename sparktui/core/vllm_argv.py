"""How `vllm serve` reads a flag's spelling before argparse sees it, so sparktui finds the flags it
models however a command writes them.

vLLM 0.32.0, vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args:
- In a token that starts with `--`, underscores read as dashes up to the first '.':
  `--tensor_parallel_size 2` is `--tensor-parallel-size 2`, `--no_enable_prefix_caching` its negation.
- A dotted flag sets one key of a JSON flag: `--speculative-config.method mtp`, `-cc.cudagraph_mode
  FULL`, `--limit-mm-per-prompt.video=0`. Its value (the next token, whatever it looks like, or what
  follows '=') is JSON, else a human-readable int (`80g`), else the text; a trailing '+' on the name
  makes a comma-separated list. The keys given for one name merge into one object that vLLM appends
  after every other argument, so it replaces that flag's JSON form wherever the form stands.
- argparse (allow_abbrev, on) takes a unique prefix of a long option: `--tensor-parallel 2` is
  `--tensor-parallel-size 2`. Unique among every option `vllm serve` 0.32 has (vllm_serve_options.txt);
  an ambiguous prefix is vLLM's own error, so it is left to vLLM as an unknown flag.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from sparktui.core.units import parse_human_int

OPTIONS_FILE = Path(__file__).resolve().parent / "vllm_serve_options.txt"


def dashed(name: str) -> str:
    """A flag name as vLLM reads it: underscores to dashes between the leading `--` and the first '.'."""
    if not name.startswith("--"):
        return name
    head, dot, rest = name[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + rest


@cache
def serve_options() -> tuple[str, ...]:
    """Every long option of `vllm serve` 0.32.0, from the data file."""
    lines = OPTIONS_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(line for line in lines if line.startswith("--"))


def expand_prefix(name: str) -> str | None:
    """The one `vllm serve` option `name` abbreviates (argparse's allow_abbrev), or None when it is a
    whole option, no option's prefix, or the prefix of several (vLLM then stops: ambiguous option)."""
    if not name.startswith("--") or name in serve_options():
        return None
    found = [option for option in serve_options() if option.startswith(name)]
    return found[0] if len(found) == 1 else None


def dotted_value(text: str, name: str = "the dotted flag") -> Any:
    """A dotted flag's value as vLLM reads it: JSON, else a human-readable int, else the text;
    UserError naming `name` for JSON nested too deep to read (vLLM's own json.loads fails there)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    except RecursionError:  # '[[[…' thousands deep: so the text is long, and its start says enough
        from sparktui.errors import UserError

        raise UserError(
            f"{name}: got {text[:80]!r} … ({len(text):,} characters); expected a value, or JSON nested a few "
            "levels deep"
        ) from None
    if re.fullmatch(r"\d+(\.\d+)?[kmgt]|\d+[KMGT]", text.strip()):  # vLLM allows no decimals with K, M, G, T
        try:
            return parse_human_int(text.strip())
        except ValueError:
            pass
    return text


def merge_dotted(into: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set `into[k1][k2]…` = value as vLLM's recursive_dict_update does for repeated dotted keys:
    objects merge key by key, lists extend, anything else is replaced."""
    update: Any = value
    for key in reversed(keys):
        update = {key: update}
    _update(into, update)


def _update(original: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _update(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] = original[key] + value
        else:
            original[key] = value


# vLLM 0.32's flags that set one key of a JSON flag (vllm/engine/arg_utils.py add_cli_args; copied in by
# create_speculative_config and create_engine_config, which stop when the JSON flag has the key too):
# flag → (ServeConfig field, key, "text" | "int" | "ints" (nargs="+")).
SHORTHANDS: dict[str, tuple[str, str, str]] = {
    "--spec-method": ("speculative_config", "method", "text"),
    "--spec-model": ("speculative_config", "model", "text"),
    "--spec-tokens": ("speculative_config", "num_speculative_tokens", "int"),
    "--max-cudagraph-capture-size": ("compilation_config", "max_cudagraph_capture_size", "int"),
    "--cudagraph-capture-sizes": ("compilation_config", "cudagraph_capture_sizes", "ints"),
}
_JSON_FLAG = {"speculative_config": "--speculative-config", "compilation_config": "--compilation-config"}


def shorthand(name: str) -> str | None:
    """The SHORTHANDS flag `name` is in any spelling vLLM reads (`--spec_tokens`, `--max-cudagraph`), else None."""
    name = dashed(name)
    return name if name in SHORTHANDS else (found if (found := expand_prefix(name)) in SHORTHANDS else None)


def apply_shorthands(values: dict[str, Any], given: dict[str, list[str]]) -> None:
    """Put each shorthand's value into its JSON flag in `values` (JSON text or an object), as vLLM does;
    UserError where the JSON flag has the key too, or a number is not a whole one."""
    from sparktui.errors import UserError

    for flag, words in given.items():
        field, key, kind = SHORTHANDS[flag]
        current = values.get(field)
        try:
            merged = json.loads(current) if isinstance(current, str) else current
        except (json.JSONDecodeError, RecursionError):
            continue  # the JSON flag's own check says what is wrong with it
        merged = dict(merged) if isinstance(merged, dict) else {}
        if key in merged:
            raise UserError(
                f"{flag} and {_JSON_FLAG[field]}'s {key}: vLLM stops (they are mutually exclusive); drop one"
            )
        if kind == "text":
            merged[key] = words[0]
        else:
            if not all(re.fullmatch(r"[+-]?\d+", w.strip()) for w in words):
                raise UserError(
                    f"{flag}: got {' '.join(words)}; expected {'whole numbers' if kind == 'ints' else 'a whole number'}"
                )
            merged[key] = [int(w) for w in words] if kind == "ints" else int(words[0])
        values[field] = merged
