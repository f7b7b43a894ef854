"""Preflight for a container runner: the `docker run` sparktui will start, read for what it gets
wrong on a Spark (core/container.py), and the image's vLLM version from its labels where its tag
does not say. Docker is a client only: the argv is built, never run; labels come from
`docker image inspect` where docker is installed (no container starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktui.core.container import container_warnings, parse_docker_run
from sparktui.runtime.launch.runner import build_command
from sparktui.runtime.launch.vllm_version import from_image

if TYPE_CHECKING:
    from sparktui.core.config import ServeConfig
    from sparktui.core.profiles import Profile


def world_of(profile: Profile, serve: ServeConfig) -> tuple[int, int]:
    """(world size, workers on this node): tensor × pipeline parallel, split over a [cluster]'s nodes."""
    pp = 1
    extra = serve.extra_args
    for i, tok in enumerate(extra):
        name, eq, value = tok.partition("=")
        if name in ("--pipeline-parallel-size", "-pp"):
            try:
                pp = int(value if eq else extra[i + 1])
            except (IndexError, ValueError):
                pp = 1
    world = max(1, serve.tensor_parallel_size) * max(1, pp)
    nodes = len(profile.cluster.nodes) if profile.cluster is not None else 1
    return world, max(1, world // max(1, nodes))


def container_preflight(profile: Profile, serve: ServeConfig, *, unified: bool, inspect: bool = True) -> list[str]:
    """Warnings for a container runner (none for a native one)."""
    if profile.runner.kind != "container" or not profile.runner.image:
        return []
    run = parse_docker_run(build_command(profile, serve).argv)
    world, local = world_of(profile, serve)
    out = container_warnings(run, world_size=world, local_workers=local, unified=unified)
    image = profile.runner.image
    if serve.vllm_version is None and from_image(image, inspect=False) is None:
        found = from_image(image, inspect=inspect)  # its labels, where docker can tell
        if found is not None:
            out.append(f"container: {found[1]} says vLLM {found[0]}; give --vllm-version {found[0]} to fit for it")
    return out
