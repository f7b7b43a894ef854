"""A cluster rank's identity and its link environment: the --node-rank a serve config carries, and the
variables that make that rank's vLLM talk over [cluster] interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktui.runtime.host.interfaces import interface_facts

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile


def node_rank(serve: ServeConfig) -> int | None:
    """The --node-rank a serve config carries (a node's own supervisor), or None (not launched yet)."""
    args = serve.extra_args
    for i, arg in enumerate(args):
        key, _, inline = arg.partition("=")
        if key in ("--node-rank", "-r"):
            value = inline or (args[i + 1] if i + 1 < len(args) else "")
            return int(value) if value.isdigit() else None
    return None


def link_vars(interface: str | None, address: str | None) -> dict[str, str]:
    """The variables that make a node's vLLM ranks (mp, or Ray's and the actors it starts) talk over
    the link: gloo's and NCCL's socket interface, and VLLM_HOST_IP (this node's address there)."""
    env = {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface} if interface else {}
    if address:
        env["VLLM_HOST_IP"] = address
    return env


def link_env(profile: Profile, serve: ServeConfig) -> dict[str, str]:
    """What makes an mp rank (`--node-rank`) talk over [cluster] interface (link_vars). Without them
    vLLM 0.32 takes the address its host name resolves to for gloo (127.0.0.1 in the test cluster:
    "Gloo connectFullMesh failed … Connection refused") and, for its message queue, the source
    address of the default route (`vllm.utils.network_utils.get_ip`): the LAN, not the link between
    the Sparks. The Ray backend sets the same on each node's Ray (ray_cluster.node_env). The
    profile's [env] still wins."""
    cluster = profile.cluster
    rank = node_rank(serve)
    name = cluster.interface_at(rank) if cluster is not None and rank is not None else None
    if not name:
        return {}
    facts = interface_facts(name, None)
    ipv4 = [a for a in facts.get("addresses") or [] if ":" not in a]
    return link_vars(name, ipv4[0] if ipv4 else None)
