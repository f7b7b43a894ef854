"""`@record` behaves as `@dataclass(frozen=True)`: the same repr, equality, hash, immutability and
dataclass functions, for the field options core uses."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import ClassVar

import pytest

from sparktui.core.record import record


@record
class Point:
    """A record."""

    x: int
    y: float = 0.0
    tags: tuple[str, ...] = ()
    note: str = field(default="", repr=False, compare=False)
    extra: Mapping[str, str] = field(default_factory=dict, hash=False)
    LIMIT: ClassVar[int] = 3

    @property
    def norm(self) -> float:
        return math.hypot(self.x, self.y)


@dataclass(frozen=True)
class PointDc:
    """The same class as a dataclass."""

    x: int
    y: float = 0.0
    tags: tuple[str, ...] = ()
    note: str = field(default="", repr=False, compare=False)
    extra: Mapping[str, str] = field(default_factory=dict, hash=False)
    LIMIT: ClassVar[int] = 3


@record
class Empty:
    pass


@dataclass(frozen=True)
class EmptyDc:
    pass


def test_repr_is_the_dataclass_repr() -> None:
    for args in ((1,), (2, 3.5, ("a", "b"), "hidden", {"k": "v"})):
        assert repr(Point(*args)) == repr(PointDc(*args)).replace("PointDc(", "Point(")
    assert repr(Empty()) == "Empty()" == repr(EmptyDc()).replace("EmptyDc", "Empty")
    assert repr(Point(1, tags=("x",))) == "Point(x=1, y=0.0, tags=('x',), extra={})"


def test_equality_and_hash_follow_the_compared_fields() -> None:
    a, b = Point(1, 2.0, note="one"), Point(1, 2.0, note="two")
    assert a == b and hash(a) == hash(b)  # note: compare=False
    assert Point(1, extra={"k": "v"}) == Point(1, extra={"k": "v"})
    assert hash(Point(1, extra={"k": "v"})) == hash(Point(1))  # extra: hash=False
    assert Point(1) != Point(2)
    assert hash(Point(1, 2.0, ("t",))) == hash(PointDc(1, 2.0, ("t",)))
    assert hash(Empty()) == hash(EmptyDc())
    assert Empty() == Empty()
    nan = float("nan")  # the same NaN object: equal as 3.11's and 3.12's tuples of fields say, not from 3.13
    assert (Point(1, nan) == Point(1, nan)) == (PointDc(1, nan) == PointDc(1, nan))


def test_another_class_is_never_equal() -> None:
    assert Point(1) != PointDc(1)
    assert Point(1).__eq__(PointDc(1)) is NotImplemented
    assert Point(1).__eq__((1, 0.0, (), {})) is NotImplemented

    @record
    class Sub(Point):
        pass

    assert Point(1) != Sub(1)


def test_frozen() -> None:
    p = Point(1)
    with pytest.raises(FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del p.x  # type: ignore[misc]
    with pytest.raises(TypeError, match="frozen"):

        @dataclass
        class Thawed(Point):
            z: int = 0


def test_dataclass_functions() -> None:
    p = Point(1, 2.0, ("a",), "n", {"k": "v"})
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(p)] == [f.name for f in dataclasses.fields(PointDc)]
    assert dataclasses.asdict(p) == dataclasses.asdict(PointDc(1, 2.0, ("a",), "n", {"k": "v"}))
    q = dataclasses.replace(p, y=5.0)
    assert q == Point(1, 5.0, ("a",), "n", {"k": "v"}) and q is not p
    assert Point.__match_args__ == PointDc.__match_args__
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p
    assert {Point(1): "a"}[Point(1)] == "a"
    assert Point(3, 4).norm == 5.0 and Point.LIMIT == 3


def test_own_methods_are_kept() -> None:
    @record
    class Named:
        name: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name.lower() == self.name.lower()

        def __hash__(self) -> int:
            return hash(self.name.lower())

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert Named("A") == Named("a") and hash(Named("A")) == hash(Named("a")) and repr(Named("A")) == "<A>"
    with pytest.raises(FrozenInstanceError):
        Named("a").name = "b"  # type: ignore[misc]


@record(frozen=False)
class Box:
    """A mutable record."""

    name: str
    items: list[int] = field(default_factory=list)
    seen: int = field(default=0, compare=False)


@dataclass
class BoxDc:
    """The same class as a plain dataclass."""

    name: str
    items: list[int] = field(default_factory=list)
    seen: int = field(default=0, compare=False)


def test_mutable_record_is_a_plain_dataclass() -> None:
    box = Box("a", [1])
    box.items.append(2)
    box.name = "b"
    box.seen = 5
    assert repr(box) == repr(BoxDc("b", [1, 2], 5)).replace("BoxDc(", "Box(") == "Box(name='b', items=[1, 2], seen=5)"
    assert box == Box("b", [1, 2]) and box != Box("b", [1]) and box != BoxDc("b", [1, 2])
    assert Box.__hash__ is None and BoxDc.__hash__ is None
    with pytest.raises(TypeError, match="unhashable"):
        hash(box)
    assert dataclasses.replace(box, name="c") == Box("c", [1, 2])
    assert not Box.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert Point.__dataclass_params__.frozen  # type: ignore[attr-defined]
