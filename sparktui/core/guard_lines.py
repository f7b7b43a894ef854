"""The guard's lines: one model from the profile's [guard] table to the guard, its state record,
`set-guard` and the panel.

`GuardLines` is what the guard watches: three lines on MemAvailable (warn, term, kill: GiB, None
turns one off), the grace between SIGTERM and SIGKILL, and the two triggers that act before a line
is crossed (a fast fall, memory pressure). The profile's [guard] table holds the fields it sets by
these names (`GuardSettings.lines`; the guard's defaults fill in the rest), the state record holds a
`GuardLines` as the guard runs it, `set-guard` names the lines it moves by these names, and the
panel draws a `GuardLines`. Why the defaults: runtime/guard/guard.py.

A frozen stdlib dataclass, not a pydantic model: the guard reads it on every sample and
`sparktui guard` starts without pydantic. The state record validates it all the same (pydantic
checks a dataclass's fields and runs its `__post_init__`; the record refuses what is not a number).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Literal, get_args

from sparktui.core.record import record
from sparktui.core.units import GiB
from sparktui.errors import UserError

DEFAULT_WARN_GIB = 10.0
DEFAULT_TERM_GIB = 6.0
DEFAULT_KILL_GIB = 3.5
DEFAULT_GRACE_S = 5.0
DEFAULT_FALL_RATE_GIB_S = 8.0
DEFAULT_FALL_LOOKAHEAD_S = 0.5
DEFAULT_PSI_FULL_PCT = 30.0
MAX_LINE_GIB = 1 << 20  # 1 PiB: above any machine's memory, far below where GiB → bytes overflows

LineName = Literal["warn_below_gib", "term_below_gib", "kill_below_gib"]
LINE_NAMES: tuple[LineName, ...] = get_args(LineName)  # highest first
# Every field of GuardLines: what a profile's [guard] table may set of them (by these names)
GuardField = Literal[
    "warn_below_gib",
    "term_below_gib",
    "kill_below_gib",
    "grace_s",
    "fall_rate_gib_s",
    "fall_lookahead_s",
    "psi_full_pct",
]
GUARD_FIELDS: tuple[GuardField, ...] = get_args(GuardField)
_LINE_WORDS = {"warn_below_gib": "warn", "term_below_gib": "term", "kill_below_gib": "kill"}


@record
class GuardLines:
    """Lines in GiB of MemAvailable; None turns a line (or a trigger) off."""

    warn_below_gib: float | None = DEFAULT_WARN_GIB
    term_below_gib: float | None = DEFAULT_TERM_GIB
    kill_below_gib: float | None = DEFAULT_KILL_GIB
    grace_s: float = DEFAULT_GRACE_S
    fall_rate_gib_s: float | None = DEFAULT_FALL_RATE_GIB_S  # None turns the fall-rate trigger off
    fall_lookahead_s: float = DEFAULT_FALL_LOOKAHEAD_S
    psi_full_pct: float | None = DEFAULT_PSI_FULL_PCT  # None turns the PSI trigger off

    def __post_init__(self) -> None:
        for name in LINE_NAMES:
            v = getattr(self, name)
            if v is not None and not 0 <= v < MAX_LINE_GIB:
                raise UserError(
                    f"guard line {name} must be a number of GiB from 0 to below {MAX_LINE_GIB} (no machine has "
                    f"more), got {v!r}"
                )
        if not 0 <= self.grace_s < math.inf:
            raise UserError(f"guard grace_s must be a finite number of seconds >= 0, got {self.grace_s!r}")
        w, t, k = self.warn_below_gib, self.term_below_gib, self.kill_below_gib
        if t is not None and k is not None and k > t:
            raise UserError(
                f"guard lines out of order: kill line {k} GiB is above the term line {t} GiB; "
                "expected warn >= term >= kill"
            )
        if w is not None and max(x for x in (t, k, 0) if x is not None) > w:
            raise UserError(
                f"guard lines out of order: warn line {w} GiB is below a term/kill line; expected warn >= term >= kill"
            )

    @classmethod
    def from_given(cls, given: Mapping[GuardField, float]) -> tuple[GuardLines, list[str]]:
        """The lines and triggers a profile sets (by field name; the rest are our defaults), with
        notes: the lines given win, and a default line in their way is turned off (`resolve_lines`)."""
        unknown = set(given) - set(GUARD_FIELDS)
        if unknown:
            raise UserError(
                f"unknown guard setting(s) {', '.join(sorted(unknown))}; expected {', '.join(GUARD_FIELDS)}"
            )
        base = dataclasses.replace(cls(), **{k: v for k, v in given.items() if k not in LINE_NAMES})
        return resolve_lines({k: v for k, v in given.items() if k in LINE_NAMES}, base, what="default")

    def bytes(self, name: str) -> int | None:
        v = getattr(self, f"{name}_below_gib")
        return None if v is None else int(v * GiB)


def resolve_lines(
    given: Mapping[LineName, float | None], base: GuardLines, *, what: str = "current"
) -> tuple[GuardLines, list[str]]:
    """`base` with the lines in `given` set (None turns a line off). The lines given win: a line of
    `base` that would fall out of order with them (warn >= term >= kill) is turned off, and a
    one-line note says so. Lines given that conflict with each other raise UserError (exit 2)."""
    unknown = set(given) - set(LINE_NAMES)
    if unknown:
        raise UserError(f"unknown guard line(s) {', '.join(sorted(unknown))}; expected {', '.join(LINE_NAMES)}")
    explicit = {name: given[name] for name in LINE_NAMES if name in given}
    GuardLines(  # the order of the lines given
        warn_below_gib=explicit.get("warn_below_gib"),
        term_below_gib=explicit.get("term_below_gib"),
        kill_below_gib=explicit.get("kill_below_gib"),
        grace_s=base.grace_s,
    )
    values: dict[str, float | None] = {name: explicit.get(name, getattr(base, name)) for name in LINE_NAMES}
    notes: list[str] = []
    for i, name in enumerate(LINE_NAMES):
        v = values[name]
        if name in explicit or v is None:
            continue
        below = [(n, x) for n in LINE_NAMES[i + 1 :] if (x := explicit.get(n)) is not None and x > v]
        above = [(n, x) for n in LINE_NAMES[:i] if (x := explicit.get(n)) is not None and x < v]
        clashes = below or above
        if clashes:
            values[name] = None
            other, at = clashes[0]
            notes.append(
                f"the {what} {_LINE_WORDS[name]} line ({v:g} GiB) is turned off: it would be "
                f"{'below' if at > v else 'above'} your {_LINE_WORDS[other]} line ({at:g} GiB)"
            )
    return dataclasses.replace(  # the fall-rate and PSI triggers of `base` stay as they are
        base,
        warn_below_gib=values["warn_below_gib"],
        term_below_gib=values["term_below_gib"],
        kill_below_gib=values["kill_below_gib"],
    ), notes


__all__ = [
    "DEFAULT_FALL_LOOKAHEAD_S",
    "DEFAULT_FALL_RATE_GIB_S",
    "DEFAULT_GRACE_S",
    "DEFAULT_KILL_GIB",
    "DEFAULT_PSI_FULL_PCT",
    "DEFAULT_TERM_GIB",
    "DEFAULT_WARN_GIB",
    "GUARD_FIELDS",
    "LINE_NAMES",
    "MAX_LINE_GIB",
    "GuardField",
    "GuardLines",
    "LineName",
    "resolve_lines",
]
