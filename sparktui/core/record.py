"""`@record`: `@dataclass(frozen=True)` for the small immutable values core and runtime pass around,
made for less at import.

Python 3.11 and 3.12 compile every method a dataclass generates from source, one `exec` each:
a frozen dataclass costs six (`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`,
`__delattr__`), about 0.5 ms a class, and the panel's first screen defines some fifty of them
before it can show its fit. `record` lets dataclasses generate `__init__` and the frozen guards
and gives `__repr__`, `__eq__` and `__hash__` as functions made from each class's fields, which
behave as 3.11's and 3.12's dataclasses do: the same repr text, equal when the class is the same
and the tuples of compared fields are, the hash of the same tuple, `fields`, `replace`, `asdict`
and FrozenInstanceError as before. `record(frozen=False)` does the same for a mutable dataclass
(two execs less: `__repr__` and `__eq__`; `__hash__` is None, as dataclasses leave it). A class
that writes its own `__repr__`, `__eq__` or `__hash__` gets plain `dataclass(frozen=...)`, and so
does every class from Python 3.13 on (below).
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast, dataclass_transform, overload

T = TypeVar("T")

_OWN = ("__repr__", "__eq__", "__hash__")
# From 3.13 dataclasses compile a class's methods in one exec (cpython gh-110851) and __eq__ compares
# field by field, `a == a2 and b == b2`, not tuples (gh-104904): there `record` is plain dataclass,
# so equality stays the running Python's
_PLAIN = sys.version_info >= (3, 13)


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, frozen: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[T] | None = None, /, *, frozen: bool = True) -> type[T] | Callable[[type[T]], type[T]]:
    """`dataclass(frozen=True)` with `__repr__`, `__eq__` and `__hash__` made without `exec`;
    `record(frozen=False)`: a plain `dataclass` (mutable, so unhashable) made the same way."""
    if cls is None:
        return lambda cls: _record(cls, frozen)
    return _record(cls, frozen)


def _record(cls: type[T], frozen: bool) -> type[T]:
    if _PLAIN or any(name in cls.__dict__ for name in _OWN):
        return dataclasses.dataclass(frozen=frozen)(cls)
    made = dataclasses.dataclass(frozen=frozen, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cast(Any, made))
    shown = tuple(f.name for f in fields if f.repr)
    compared = _values(tuple(f.name for f in fields if f.compare))
    hashed = _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    for method in (__repr__, __eq__, __hash__) if frozen else (__repr__, __eq__):
        method.__qualname__ = f"{made.__qualname__}.{method.__name__}"
        setattr(made, method.__name__, method)
    if not frozen:
        made.__hash__ = None  # type: ignore[assignment]  # as dataclass(eq=True) leaves a mutable class
    return made


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of those fields' values, as dataclasses compare and hash it (attrgetter: in C)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()
