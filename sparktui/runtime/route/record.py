"""The route's record: state_dir/route/PORT.json (0600), written by the route (front.py) at most
every 0.5 s, read by `sparktui route --show` and the panel. A record counts as live only while
its process (pid and start time) runs; the last one stays on disk with status "stopped"."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparktui.errors import UserError
from sparktui.files import Untrusted, read_regular, warn_shared_folder
from sparktui.paths import state_dir
from sparktui.runtime.host import proc

RECORD_LIMIT = 16 << 20  # a route's record is a few KiB (its models and last swaps)


def _load(path: Path, *, own: bool = False) -> Any:
    """A route record's JSON: UserError when it is no regular file of sane size (a FIFO would hang
    its reader: read_regular), ValueError or RecursionError when it is damaged. `own`: Untrusted
    when it, or its folder, is another user's or others may write it (files.open_regular)."""
    return json.loads(read_regular(path, RECORD_LIMIT, "route record", own=own))


def route_record_path(port: int) -> Path:
    folder = state_dir() / "route"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{port}.json"


@dataclass(frozen=True)
class RouteModelRecord:
    name: str
    profile: str
    port: int
    status: str  # down | starting | up | draining | stopping
    in_flight: int = 0
    queued: int = 0
    keep: bool = False
    ttl_s: float = 0.0
    start_s: float | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, m: dict[str, Any]) -> RouteModelRecord:
        return cls(str(m["name"]), str(m.get("profile", "")), int(m.get("port", 0)), str(m.get("status", "?")),
                   int(m.get("in_flight", 0)), int(m.get("queued", 0)), bool(m.get("keep")),
                   float(m.get("ttl_s") or 0), m.get("start_s"), m.get("error"))  # fmt: skip


@dataclass(frozen=True)
class SwapRecord:
    at: float
    model: str  # "" for a TTL stop
    stopped: tuple[str, ...]
    reason: str
    ok: bool
    total_s: float
    stop_s: float = 0.0
    memory_s: float = 0.0
    start_s: float = 0.0
    step: str = "done"
    error: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SwapRecord:
        return cls(float(d.get("at", 0)), str(d.get("model", "")), tuple(d.get("stopped", ())), str(d.get("reason", "")),
                   bool(d.get("ok")), float(d.get("total_s", 0)), float(d.get("stop_s", 0)),
                   float(d.get("memory_s", 0)), float(d.get("start_s", 0)), str(d.get("step", "done")),
                   d.get("error"))  # fmt: skip


@dataclass(frozen=True)
class RouteRecord:
    listen: str
    pid: int
    status: str  # starting | running | stopping | stopped
    models: tuple[RouteModelRecord, ...]
    queued: int = 0
    served: int = 0
    swapping: SwapRecord | None = None
    history: tuple[SwapRecord, ...] = field(default=())
    live: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any], live: bool) -> RouteRecord:
        models = tuple(RouteModelRecord.from_dict(m) for m in d.get("models", ()))
        swapping = SwapRecord.from_dict(d["swapping"]) if d.get("swapping") else None
        history = tuple(SwapRecord.from_dict(h) for h in d.get("history", ()))
        return cls(str(d.get("listen", "?")), int(d.get("pid", 0)), str(d.get("status", "?")), models,
                   int(d.get("queued", 0)), int(d.get("served", 0)), swapping, history, live)  # fmt: skip


def read_routes(*, live_only: bool = True, problems: list[str] | None = None) -> list[RouteRecord]:
    """The routes recorded in the state dir (the live ones: their pid and start time still run).
    A file that is no regular file of sane size (a FIFO would hang the reader) is skipped, and
    said in `problems`."""
    out = []
    warn_shared_folder(state_dir() / "route", "route record")  # shown only: nothing is done from them here
    for path in sorted((state_dir() / "route").glob("*.json")):
        try:
            data = _load(path)
            live = (
                data.get("status") != "stopped"
                and proc.ProcessIdentity(int(data["pid"]), int(data.get("start_time", 0))).is_alive()
            )
            if live or not live_only:
                out.append(RouteRecord.from_dict(data, live))
        except UserError as exc:
            if problems is not None:
                problems.append(f"{exc}; skipped (remove it: routes rewrite their records)")
        except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
            continue  # half-written by an older version, or not ours: nothing to show
    return out


def leftovers(port: int) -> list[tuple[str, int, str]]:
    """(model, port, launch id) of the servers a route on `port` started and left running when it
    ended without stopping them (SIGKILL, a crash): its record says so, and its process is gone.
    UserError naming the record when it is no regular file of sane size (a FIFO hung the route), or
    when it or its folder is not ours alone: servers are stopped from it, so a planted one is not
    believed (Untrusted says the folder and the fix)."""
    try:
        data = _load(route_record_path(port), own=True)
    except Untrusted:
        raise
    except UserError as exc:
        raise UserError(f"{exc}; remove it (the route writes its record anew)") from None
    except (OSError, ValueError, RecursionError):
        return []  # none, or damaged: nothing to learn from it
    try:
        if data.get("status") == "stopped":
            return []
        if proc.ProcessIdentity(int(data["pid"]), int(data.get("start_time", 0))).is_alive():
            return []  # it still runs: not ours to touch
        return [
            (str(m["name"]), int(m["port"]), str(m["launch_id"])) for m in data.get("models", ()) if m.get("launch_id")
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return []
