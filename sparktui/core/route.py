"""The route: several profiles behind one OpenAI-compatible port (`sparktui route`), and the policy
that decides which running servers must stop before another one starts.

A route file is TOML:

    [route]
    listen = "127.0.0.1:8080"    # 127.0.0.1 unless told
    queue = 32                   # requests that may wait for a model to come up; more get 503
    queue-timeout-s = 300        # a waiting request gets 503 (Retry-After) after this long
    evict = "lru"                # or "priority": lowest [route.models.X] priority first, then LRU
    ttl-s = 0                    # default idle time before a model is stopped (0: never)
    start-timeout-s = 900        # a server that is not ready after this long counts as failed

    [route.models.qwen]          # the name clients send as "model"
    profile = "qwen3-8b"         # a profile name or a path to a .toml profile
    ttl-s = 600
    priority = 5
    keep = true                  # never evicted to make room (a TTL may still stop it)
    preload = true               # started with the route

    [route.groups]               # optional: models in one group may run together, when the fit
    small = ["qwen", "gemma"]    # says they fit; starting one stops running models of other groups

Without [route.groups] every model of the route may run beside any other the pool has room for.
Pure: parsing and decisions only; runtime/route starts and stops the servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomlkit
import tomlkit.exceptions

from sparktui.core.pool import Reservation
from sparktui.core.units import format_gib
from sparktui.errors import UserError

EvictOrder = Literal["lru", "priority"]
EVICT_ORDERS: tuple[EvictOrder, ...] = ("lru", "priority")
DEFAULT_LISTEN = ("127.0.0.1", 8080)
ROUTE_KEYS = ("listen", "queue", "queue-timeout-s", "evict", "ttl-s", "start-timeout-s", "models", "groups")
MODEL_KEYS = ("profile", "ttl-s", "priority", "keep", "preload")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")


@dataclass(frozen=True)
class RouteModel:
    """One model the route serves: the name clients ask for, and the profile that serves it."""

    name: str
    profile: str  # a profile name or path (loaded by the runtime)
    ttl_s: float = 0.0  # stop after this long idle; 0: never
    priority: int = 0  # evict = "priority": the lowest goes first
    keep: bool = False  # never evicted to make room for another
    preload: bool = False  # started when the route starts
    group: str = ""  # models of one group may run together (when they fit)


@dataclass(frozen=True)
class RouteSettings:
    models: tuple[RouteModel, ...]
    host: str = DEFAULT_LISTEN[0]
    port: int = DEFAULT_LISTEN[1]
    queue: int = 32
    queue_timeout_s: float = 300.0
    evict: EvictOrder = "lru"
    start_timeout_s: float = 900.0
    warnings: tuple[str, ...] = ()

    def model(self, name: str) -> RouteModel | None:
        return next((m for m in self.models if m.name == name), None)


def parse_listen(text: str, where: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (or PORT alone: 127.0.0.1), IPv6 as [::1]:PORT."""
    host, port_text = DEFAULT_LISTEN[0], text
    if text.startswith("["):
        close = text.find("]")
        host, port_text = text[1:close], text[close + 2 :] if close > 0 else ""
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535 or not host:
        raise UserError(f"{where} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080 (or a port alone)")
    return host, int(port_text)


def _number(value: Any, what: str, *, minimum: float = 0.0, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        kind = "a whole number" if integer else "a number"
        raise UserError(f"{what}: got {value!r}; expected {kind} ≥ {minimum:g}")
    if value < minimum:
        raise UserError(f"{what}: got {value}; expected a value ≥ {minimum:g}")
    return float(value)


def parse_route(text: str, path: Path | None = None) -> RouteSettings:
    """A route file's [route] table; every error names the file and the key, and says what to write."""
    where = str(path) if path is not None else "<route>"
    try:
        doc = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        raise UserError(f"{where}:{exc.line}:{exc.col}: not valid TOML: {exc}") from None
    table = doc.get("route")
    if not isinstance(table, dict):
        raise UserError(f'{where}: [route] missing; a route file needs [route] and [route.models.NAME] profile = "…"')
    warnings = [f"{where}: [route] {k}: unknown key, ignored (known: {', '.join(ROUTE_KEYS)})"
                for k in table if k not in ROUTE_KEYS]  # fmt: skip
    host, port = parse_listen(str(table.get("listen", "127.0.0.1:8080")), f"{where}: [route] listen")
    evict = table.get("evict", "lru")
    if evict not in EVICT_ORDERS:
        raise UserError(f'{where}: [route] evict: got {evict!r}; expected "lru" or "priority"')
    default_ttl = _number(table.get("ttl-s", 0), f"{where}: [route] ttl-s")
    models_table = table.get("models")
    if not isinstance(models_table, dict) or not models_table:
        raise UserError(f'{where}: [route.models] missing; add [route.models.NAME] with profile = "PROFILE"')
    groups = _groups(table.get("groups"), list(models_table), where)
    models = []
    for name, entry in models_table.items():
        what = f"{where}: [route.models.{name}]"
        if not _NAME.fullmatch(name):
            raise UserError(f"{what}: not a usable model name; use letters, digits and . _ : / @ + -")
        if not isinstance(entry, dict) or not isinstance(entry.get("profile"), str) or not entry["profile"]:
            raise UserError(f'{what}: profile missing; expected profile = "a profile name or path"')
        warnings += [f"{what} {k}: unknown key, ignored (known: {', '.join(MODEL_KEYS)})"
                     for k in entry if k not in MODEL_KEYS]  # fmt: skip
        for flag in ("keep", "preload"):
            if not isinstance(entry.get(flag, False), bool):
                raise UserError(f"{what} {flag}: got {entry[flag]!r}; expected true or false")
        models.append(
            RouteModel(
                name=name,
                profile=entry["profile"],
                ttl_s=_number(entry.get("ttl-s", default_ttl), f"{what} ttl-s"),
                priority=int(_number(entry.get("priority", 0), f"{what} priority", minimum=-1e9, integer=True)),
                keep=bool(entry.get("keep", False)),
                preload=bool(entry.get("preload", False)),
                group=groups.get(name, ""),
            )
        )
    return RouteSettings(
        models=tuple(models),
        host=host,
        port=port,
        queue=int(_number(table.get("queue", 32), f"{where}: [route] queue", minimum=1, integer=True)),
        queue_timeout_s=_number(table.get("queue-timeout-s", 300), f"{where}: [route] queue-timeout-s", minimum=1),
        evict=evict,
        start_timeout_s=_number(table.get("start-timeout-s", 900), f"{where}: [route] start-timeout-s", minimum=1),
        warnings=tuple(warnings),
    )


def _groups(value: Any, names: list[str], where: str) -> dict[str, str]:
    """model name → its group; without [route.groups], one group for all."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f'{where}: [route] groups: expected a table, e.g. groups = {{ small = ["a", "b"] }}')
    found: dict[str, str] = {}
    for group, members in value.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise UserError(f'{where}: [route.groups] {group}: expected a list of model names, e.g. ["a", "b"]')
        for m in members:
            if m not in names:
                raise UserError(
                    f"{where}: [route.groups] {group}: {m!r} is not a model of the route ({', '.join(names)})"
                )
            if m in found:
                raise UserError(f"{where}: [route.groups]: {m!r} is in both {found[m]!r} and {group!r}; put it in one")
            found[m] = group
    if missing := [n for n in names if n not in found]:
        raise UserError(f"{where}: [route.groups]: {', '.join(missing)} in no group; with groups every model needs one")
    return found


def settings_for_profiles(
    names: Sequence[tuple[str, str]], host: str = DEFAULT_LISTEN[0], port: int = DEFAULT_LISTEN[1], **options: Any
) -> RouteSettings:
    """`sparktui route PROFILE…`: (served name, profile) pairs, no groups, one option set for all."""
    seen: set[str] = set()
    for name, profile in names:
        if name in seen:
            raise UserError(f"{profile}: serves {name!r}, like another profile given; give each a served-model-name")
        seen.add(name)
    ttl = float(options.pop("ttl_s", 0.0))
    return RouteSettings(models=tuple(RouteModel(n, p, ttl_s=ttl) for n, p in names), host=host, port=port, **options)


# ---------------------------------------------------------------- which servers make room


@dataclass(frozen=True)
class Running:
    """A server of the route that is up (or starting), as the eviction policy sees it."""

    model: RouteModel
    reservation: Reservation
    last_used: float  # monotonic seconds; larger is more recent
    busy: bool = False  # requests in flight (it may still go; they are drained first)


@dataclass(frozen=True)
class RoomPlan:
    """What must stop before `target` starts, and whether that is enough."""

    target: str
    evict: tuple[str, ...]  # model names, in the order to stop them
    fits: bool
    reason: str  # for a person: why these go, or why it cannot fit
    pool: int = 0
    others: tuple[Reservation, ...] = field(default=())  # servers the route did not start


def eviction_order(running: Iterable[Running], order: EvictOrder) -> list[Running]:
    """Idle before busy; then the least recently used (or the lowest priority, then LRU)."""
    if order == "priority":
        return sorted(running, key=lambda r: (r.busy, r.model.priority, r.last_used))
    return sorted(running, key=lambda r: (r.busy, r.last_used))


def plan_room(
    target: RouteModel,
    need: Reservation,
    running: Sequence[Running],
    others: Sequence[Reservation],
    pool: int,
    order: EvictOrder = "lru",
) -> RoomPlan:
    """Which of the route's running servers to stop so that `need` fits in `pool` beside the rest.

    Servers of other groups always go; a server on the target's port goes; then, while the
    reservations (the route's and `others`, servers it did not start and never stops) leave too
    little, the next in eviction order, skipping `keep` ones. The sum is core.pool's rule: each
    server reserves what it asked vLLM for, whatever MemAvailable says."""
    evict: list[Running] = [r for r in running if r.model.group != target.group or r.reservation.port == need.port]
    staying = [r for r in running if r not in evict]
    for r in evict:
        if r.model.keep:
            why = "another group" if r.model.group != target.group else f"the same port {need.port}"
            return RoomPlan(target.name, (), False, f"{r.model.name} is kept (keep = true) and is in {why}", pool)
    fixed = sum(o.bytes for o in others)

    def fits() -> bool:  # alone, a server is the fit's business (as in core.pool.PoolCheck.fits)
        alone = not staying and not others
        return alone or fixed + sum(r.reservation.bytes for r in staying) + need.bytes <= pool

    for r in eviction_order(staying, order):
        if fits():
            break
        if r.model.keep:
            continue
        staying.remove(r)
        evict.append(r)
    names = tuple(r.model.name for r in evict)
    if not fits():
        kept = [r.model.name for r in staying]
        parts = [f"{format_gib(need.bytes)} for {target.name}"]
        parts += [f"{format_gib(r.reservation.bytes)} for {r.model.name} (kept)" for r in staying]
        parts += [f"{format_gib(o.bytes)} for port {o.port} ({o.name}, not the route's)" for o in others]
        why = f"{' + '.join(parts)} exceed the {format_gib(pool)} pool"
        if kept or others:
            why += "; stop servers outside the route or drop keep = true"
        return RoomPlan(target.name, names, False, why, pool, tuple(others))
    reason = f"{target.name} fits beside {', '.join(r.model.name for r in staying) or 'nothing running'}"
    if names:
        reason = f"stop {', '.join(names)} so that {reason}"
    return RoomPlan(target.name, names, True, reason, pool, tuple(others))
