"""A systemd user unit that runs `sparktui serve PROFILE` in the foreground.

The unit's stop is the supervisor's own: KillMode=mixed sends SIGTERM to sparktui alone, which stops
vLLM's whole tree (SIGTERM, SIGKILL after the grace) and removes what it left; whatever is still in
the unit's cgroup after sparktui exits gets SIGKILL. Restarts: on failure, at most `burst` times in
`interval_s`, never after the guard stopped the server (exit 97: it would fill memory again) or after
a refusal (exit 2: bad input or a failed preflight, which a restart does not fix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GUARD_EXIT = 97  # runtime/server/supervisor.py GUARD_EXIT, `sparktui guard`'s own
REFUSED_EXIT = 2


def unit_name(profile_name: str) -> str:
    """sparktui-NAME.service, NAME reduced to what a unit name may hold."""
    safe = re.sub(r"[^A-Za-z0-9:_.-]", "-", profile_name).strip("-.") or "server"
    return f"sparktui-{safe}.service"


def quote(word: str) -> str:
    """One ExecStart word as systemd reads it: % and $ doubled, quoted when it holds a space or quote."""
    text = word.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", text) or not text:
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


@dataclass
class UnitSpec:
    profile: str  # the profile's name, for the description
    argv: list[str]  # sparktui serve PROFILE, absolute paths
    environment: dict[str, str] = field(default_factory=dict)  # never secrets: the unit file is read by systemd
    stop_timeout_s: int = 90  # vLLM's shutdown plus the guard's grace, with room
    restart_s: int = 10
    burst: int = 3
    interval_s: int = 600


def render(spec: UnitSpec) -> str:
    env_lines = [f"Environment={quote(f'{k}={v}')}" for k, v in sorted(spec.environment.items())]
    return "\n".join(
        [
            "# written by `sparktui service install`; `sparktui service remove` deletes it",
            "[Unit]",
            f"Description=sparktui: vLLM from profile {spec.profile} under the memory guard",
            "Documentation=man:systemd.service(5)",
            "Wants=network-online.target",
            "After=network-online.target",
            f"StartLimitIntervalSec={spec.interval_s}",
            f"StartLimitBurst={spec.burst}",
            "",
            "[Service]",
            "Type=exec",
            "ExecStart=" + " ".join(quote(word) for word in spec.argv),
            *env_lines,
            "Environment=PYTHONUNBUFFERED=1",
            "# sparktui stops vLLM's whole tree on SIGTERM; systemd signals sparktui alone, then kills leftovers",
            "KillMode=mixed",
            "KillSignal=SIGTERM",
            f"TimeoutStopSec={spec.stop_timeout_s}",
            "Restart=on-failure",
            f"RestartSec={spec.restart_s}",
            f"RestartPreventExitStatus={REFUSED_EXIT} {GUARD_EXIT}",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )
