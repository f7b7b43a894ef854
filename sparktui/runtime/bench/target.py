"""Which server to benchmark: the one sparktui started (its state record, its key, its flags), or
a bare port on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparktui.errors import UserError
from sparktui.runtime.records import state as st
from sparktui.runtime.records.endpoint import base_url

# Not recorded in flags: a key is secret; where the server listens does not change its speed, and
# would keep two runs of one configuration on different ports from comparing as the same.
UNRECORDED_FLAGS = ("--api-key", "--host", "--port")


@dataclass(frozen=True)
class Target:
    """The server to benchmark, resolved from sparktui's state (or a bare port)."""

    url: str
    port: int
    api_key: str | None = field(repr=False)
    state_path: Path | None  # the supervisor's state file, when sparktui started it
    state: dict[str, Any] | None


def resolve_target(port: int | None = None) -> Target:
    """The server sparktui started (the only live one, or the one on `port`); a port with no
    record is taken as a server on 127.0.0.1 that sparktui did not start."""
    state: dict[str, Any] | None
    if port is None:
        try:
            state = st.find_state(None).to_dict()
        except UserError as exc:
            raise UserError(
                f"{exc}; start one with `sparktui serve PROFILE --detach`, or name one with --port"
            ) from None
    else:
        state = next((s.to_dict() for s in st.list_states() if s.port == port), None)
    if state is None:
        assert port is not None
        key = os.environ.get("VLLM_API_KEY") or None
        return Target(base_url("127.0.0.1", port), port, key, None, None)
    if not state.get("alive"):
        raise UserError(
            f"the server on port {state.get('port')} is not running (status {state.get('status')}); "
            "start it again, or see `sparktui status --all`"
        )
    url = base_url(str(state.get("host") or "127.0.0.1"), int(state["port"]))
    return Target(url, int(state["port"]), _api_key_of(state), st.state_path(int(state["port"])), state)


def _api_key_of(state: dict[str, Any]) -> str | None:
    """The key the server was started with: its profile's, else VLLM_API_KEY from the environment."""
    from sparktui.core.profiles import load_profile

    path = state.get("profile_path")
    if path:
        try:
            profile = load_profile(path)
        except UserError:
            profile = None
        if profile is not None:
            key = profile.serve.api_key or profile.env.get("VLLM_API_KEY")
            if key:
                return str(key)
    return os.environ.get("VLLM_API_KEY") or None


def recorded_flags(argv: Sequence[str] | None) -> list[str]:
    """`vllm serve` arguments after the model, less UNRECORDED_FLAGS (and an executable path)."""
    if not argv:
        return []
    args = list(argv)
    if "serve" in args:
        args = args[args.index("serve") + 2 :]
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in UNRECORDED_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out
