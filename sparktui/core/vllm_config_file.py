"""`vllm serve MODEL --config FILE.yaml`, read as vLLM reads it.

The rules are vLLM 0.32.0's own (vllm/utils/argparse_utils.py, FlexibleArgumentParser):
- `parse_args` reads a file only for the exact token `--config` followed by the path; `--config=FILE`
  goes to argparse, which takes it and reads nothing (refused here, so it is not silently lost);
  two `--config` are an error.
- `_pull_args_from_config` inserts the file's flags after the positional model (or first, when the
  command has none), so flags on the command line win over the file's, and the file over defaults.
- `load_config_file`: the path must end in .yaml or .yml; `yaml.safe_load`; each key becomes
  `--key`: true → the bare flag, false → `--no-key` (vLLM adds it only where the flag has a --no-
  form), a list → the flag then each item, a mapping → its JSON, anything else → `str(value)`.
- Underscores in a flag name read as dashes (`parse_args`), so `max_model_len:` is --max-model-len.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparktui.errors import UserError


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file's top-level mapping; errors name the file, the line and what was expected."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc}") from None
    import yaml  # here: every profile load imports this module, and yaml's import is 30-50 ms

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: not valid YAML: {problem}; fix the file (a {what} is a YAML mapping)") from None
    if not isinstance(data, dict):
        shown = "empty" if data is None else f"a {type(data).__name__}"
        raise UserError(f"{path}: the {what} is {shown}; expected a YAML mapping of keys such as `model: org/name`")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise UserError(f"{path}: key {bad[0]!r} is not text; keys are names such as max-model-len")
    return data


def flag_name(key: str) -> str:
    """`--key` with underscores read as dashes, as vLLM's parse_args does (up to the first '.')."""
    head, dot, rest = key.partition(".")
    return "--" + head.replace("_", "-") + dot + rest


def config_file_args(path: Path) -> list[str]:
    """The flags a `--config` file stands for, in file order (vLLM's load_config_file). A false
    value becomes --no-NAME for every flag: vLLM keeps it only where its parser has that form,
    which sparktui cannot see for flags it does not model (they are listed as not modelled)."""
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(
            f"--config {path}: vLLM reads only .yaml or .yml config files (got {path.suffix or 'no extension'})"
        )
    data = read_yaml_mapping(path, "vLLM config file")
    args: list[str] = []
    for key, value in data.items():
        name = flag_name(key)
        if isinstance(value, bool):
            args.append(name if value else "--no-" + name[2:])
        elif isinstance(value, list):
            if value:
                args += [name, *(str(item) for item in value)]
        elif isinstance(value, dict):
            args += [name, json.dumps(value)]
        else:
            args += [name, str(value)]
    return args


def expand_config(tokens: list[str]) -> tuple[list[str], Path | None]:
    """`tokens` (what follows `vllm serve`) with `--config FILE` replaced by the file's flags, placed
    as vLLM places them; and the file read (None when there was none)."""
    for token in tokens:
        if token.startswith("--config="):
            raise UserError(
                f"{token}: vLLM reads a config file only from `--config FILE` (a space, not '='); with '=' "
                "vLLM 0.32 takes the option and reads nothing. Write `--config FILE`"
            )
    count = tokens.count("--config")
    if count == 0:
        return tokens, None
    if count > 1:
        raise UserError("--config: more than one config file; vLLM reads one (it stops with an error)")
    index = tokens.index("--config")
    if index == len(tokens) - 1:
        raise UserError("--config: missing the file; expected `--config FILE.yaml`")
    path = Path(tokens[index + 1]).expanduser()
    from_file = config_file_args(path)
    rest = tokens[:index] + tokens[index + 2 :]
    if tokens and not tokens[0].startswith("-") and index > 0:
        # the positional model wins over the file's `model:` (vLLM serve sets args.model = model_tag)
        if "--model" in from_file:
            at = from_file.index("--model")
            from_file = from_file[:at] + from_file[at + 2 :]
        return [tokens[0], *from_file, *rest[1:]], path
    return [*from_file, *rest], path
