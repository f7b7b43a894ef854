"""A network interface as this node sees it: sysfs for its state, `ip -j` for addresses and routes."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IFF_UP = 0x1


@dataclass(frozen=True)
class InterfaceFacts:
    name: str
    exists: bool
    up: bool = False  # IFF_UP: set administratively up
    carrier: bool = False  # operstate up (or unknown, as dummy/virtual links say while up)
    operstate: str | None = None
    addresses: tuple[str, ...] = ()  # IPv4 and IPv6 (not link-local), without prefix lengths
    route_to_master: str | None = None  # the interface the route to master-addr leaves through
    error: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InterfaceFacts:
        return cls(
            name=str(data.get("name", "")),
            exists=bool(data.get("exists")),
            up=bool(data.get("up")),
            carrier=bool(data.get("carrier")),
            operstate=data.get("operstate"),
            addresses=tuple(str(a) for a in data.get("addresses") or ()),
            route_to_master=data.get("route_to_master"),
            error=data.get("error"),
        )


def _ip_json(args: list[str]) -> list[dict[str, Any]] | None:
    try:
        done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=10, check=False)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else None


def interface_facts(name: str, master_addr: str | None) -> dict[str, Any]:
    """The interface as this node sees it (sysfs for its state, `ip -j` for addresses and routes)."""
    base = Path("/sys/class/net") / name
    if "/" in name or not base.is_dir():
        return {"name": name, "exists": False}
    out: dict[str, Any] = {"name": name, "exists": True}
    try:
        flags = int((base / "flags").read_text().strip(), 16)
        operstate = (base / "operstate").read_text().strip()
    except (OSError, ValueError) as exc:
        return {**out, "error": f"cannot read {base}: {exc}"}
    out.update(up=bool(flags & IFF_UP), operstate=operstate, carrier=operstate in ("up", "unknown"))
    addrs = _ip_json(["addr", "show", "dev", name])
    if addrs is None:
        out["error"] = "`ip -j addr` gave no answer (is iproute2 installed?)"
    else:
        # IPv6 link-local addresses (every up interface has one) say nothing of the link's subnet
        infos = [a for d in addrs for a in d.get("addr_info") or [] if a.get("local") and a.get("scope") != "link"]
        out["addresses"] = [str(a["local"]) for a in infos]
    if master_addr:
        route = _ip_json(["route", "get", master_addr])
        out["route_to_master"] = str(route[0].get("dev")) if route and route[0].get("dev") else None
    return out
