"""One `vllm serve` flag's declaration (`Flag`): its name as vLLM spells it, type, vLLM's own default,
range or choices, help and category; what it accepts in words, the coercion of a value from argv,
TOML or a form into the typed value (UserError naming the flag otherwise), and its argv.

The table of them, `FLAGS`, and the configuration they make, `ServeConfig`, are core/config.py's.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from sparktui.core.record import record
from sparktui.core.units import parse_human_int
from sparktui.core.vllm_rules import parse_version
from sparktui.errors import UserError

FlagType = Literal["str", "int", "float", "bool", "choice", "size", "json", "version"]
Category = Literal["model", "memory", "scheduling", "server", "advanced"]
CATEGORIES: tuple[Category, ...] = ("model", "memory", "scheduling", "server", "advanced")

_SAME = object()  # sparktui's default is vLLM's own


@record
class Flag:
    """One `vllm serve` flag.

    `default` is what vLLM does when the flag is absent (None: vLLM decides, e.g. from the model).
    `ours` is sparktui's default where it deliberately differs (safer host, utilization ≤ 0.90).
    """

    name: str  # "--gpu-memory-utilization"; "model" for the positional argument
    field: str  # ServeConfig attribute
    type: FlagType
    default: Any
    help: str
    category: Category
    minimum: float | None = None
    maximum: float | None = None
    min_exclusive: bool = False
    choices: tuple[str, ...] = ()
    open_choices: bool = False  # choices are suggestions; vLLM accepts other values too
    allow_auto: bool = False  # accepts -1 / "auto" (stored as -1)
    negatable: bool = False  # argparse.BooleanOptionalAction: also --no-NAME
    multi: bool = False  # takes several space-separated values (argparse nargs="+")
    secret: bool = False  # never in argv; passed by environment
    env: str | None = None  # the environment variable a secret travels in
    aliases: tuple[str, ...] = ()
    ours: Any = _SAME
    unit: str = ""
    example: str = ""  # a value to show in errors ("json" flags)
    local: bool = False  # sparktui's own setting (which vLLM will run): never on vLLM's command line
    any_json: bool = False  # "json" flags: any JSON value, not only an object

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")

    @property
    def key(self) -> str:
        """The TOML key: the flag without its leading dashes."""
        return self.name.lstrip("-")

    @property
    def field_default(self) -> Any:
        """The ServeConfig default: sparktui's where it differs from vLLM's, else vLLM's."""
        return self.default if self.ours is _SAME else self.ours

    @property
    def optional(self) -> bool:
        return self.field_default is None

    def expected(self) -> str:
        """What this flag accepts, in words (used in every error message)."""
        if self.type == "bool":
            return "true or false"
        if self.type == "choice":
            listed = ", ".join(self.choices)
            return f"one of {listed}" + (" (or another method vLLM knows)" if self.open_choices else "")
        if self.type == "json":
            return f"a JSON {'value' if self.any_json else 'object'}, e.g. '{self.example}'"
        if self.type == "str":
            return "a non-empty text"
        if self.type == "version":
            return "a vLLM version X.Y or X.Y.Z from 0.10 on, such as 0.25.1"
        noun = {"int": "a whole number", "float": "a number", "size": "a whole number"}[self.type]
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.min_exclusive else '≥'} {_num(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"≤ {_num(self.maximum)}")
        text = noun + (" " + " and ".join(parts) if parts else "")
        if self.type == "size":
            text += " (suffixes as vLLM takes them: 32k = 32000, 32K = 32768, 64M = 64 MiB)"
        if self.allow_auto:
            text += ", or -1 / auto"
        return text

    def error(self, given: Any) -> UserError:
        if isinstance(given, str) and len(given) > 200:  # a pasted file or garbage: its start says enough
            shown = repr(given[:80]) + f" … ({len(given):,} characters)"
        elif isinstance(given, str) and given.strip() == given and given:
            shown = given
        elif isinstance(given, (int, float)) and not isinstance(given, bool):
            shown = str(given)
        else:
            shown = repr(given)
        unexpanded = isinstance(given, str) and given.startswith("$")  # `--max-model-len $MAX_LEN` pasted as is
        hint = "; that is a shell variable, which sparktui does not expand: write its value" if unexpanded else ""
        return UserError(f"{self.name}: got {shown}; expected {self.expected()}{hint}")

    def coerce(self, value: Any) -> Any:
        """Turn a value from argv, TOML or a form into the typed value, or raise UserError."""
        if value is None:
            if self.optional:
                return None
            raise self.error(value)
        kind = self.type
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "yes", "on", "1"):
                return True
            if text in ("false", "no", "off", "0"):
                return False
            raise self.error(value)
        if kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise self.error(value)
            return value.strip() if self.multi else value
        if kind == "version":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
                raise self.error(value)
            try:
                return str(parse_version(str(value), self.name))
            except UserError:
                raise self.error(value) from None
        if kind == "choice":
            if not isinstance(value, str) or not value.strip():
                raise self.error(value)
            if value not in self.choices and not self.open_choices:
                raise self.error(value)
            return value
        if kind == "json":
            if isinstance(value, dict):
                return json.dumps(value, separators=(",", ":"))
            if not isinstance(value, str):
                raise self.error(value)
            try:
                parsed = json.loads(value)
            except (json.JSONDecodeError, RecursionError):  # RecursionError: nested thousands deep
                raise self.error(value) from None
            if not isinstance(parsed, dict) and not self.any_json:
                raise self.error(value)
            return value
        if kind == "float":
            if isinstance(value, bool):
                raise self.error(value)
            try:
                number: float = float(value)
            except (TypeError, ValueError):
                raise self.error(value) from None
            if not math.isfinite(number):
                raise self.error(value)
        else:  # int, size
            number = self._whole(value)
            if self.allow_auto and number == -1:
                return -1
        if self.minimum is not None and (number < self.minimum or (self.min_exclusive and number == self.minimum)):
            raise self.error(value)
        if self.maximum is not None and number > self.maximum:
            raise self.error(value)
        if abs(number) > NUMBER_LIMIT:  # 10**400 tokens: no 64-bit integer holds it, and the fit's floats overflow
            raise UserError(f"{self.error(value)} of at most {NUMBER_LIMIT:,} (a 64-bit integer)")
        return number

    def _whole(self, value: Any) -> int:
        if isinstance(value, bool):
            raise self.error(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if value.is_integer():
                return int(value)
            raise self.error(value)
        if not isinstance(value, str):
            raise self.error(value)
        text = value.strip()
        if self.allow_auto and text.lower() in ("auto", "-1"):
            return -1
        if self.type == "int":
            if re.fullmatch(r"[+-]?\d+", text):
                return int(text)
            raise self.error(value)
        try:
            return parse_human_int(text)
        except ValueError:
            raise self.error(value) from None

    def format(self, value: Any) -> str:
        """The value as it goes on the command line."""
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def to_argv(self, value: Any) -> list[str]:
        if self.type == "bool":
            return [self.name] if value else [self.negative] if self.negatable else []
        if self.multi:
            return [self.name, *str(value).split()]
        return [self.name, self.format(value)]

    @property
    def negative(self) -> str:
        return "--no-" + self.key


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


NUMBER_LIMIT = 2**63 - 1  # what vLLM's 64-bit integers hold; any real value is far below
