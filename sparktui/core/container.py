"""What a `docker run` for vLLM gets wrong on a DGX Spark, read from its argv. Pure: docker is a
client here; nothing asks an engine (runtime/launch/vllm_version.py reads an image's labels).

- shared memory: vLLM's multiproc executor (any world size above 1: tensor or pipeline parallel,
  one Spark or several) passes every step's scheduler output through a /dev/shm ring buffer of
  10 chunks of VLLM_MQ_MAX_CHUNK_BYTES_MB (16 MiB), and each local worker answers through one of
  10 × 24 MiB; with more than one worker on a node the tensor-parallel group has its own 10 × 24 MiB
  broadcaster (vLLM 0.31.0: vllm/v1/executor/multiproc_executor.py MultiprocExecutor._init_executor
  and WorkerProc.__init__, vllm/distributed/device_communicators/shm_broadcast.py MessageQueue;
  NCCL's shared-memory transport comes on top). Docker gives a container 64 MiB unless told
  (`--shm-size`, or `--ipc=host` for the host's /dev/shm); short of it, workers die of SIGBUS.
- `--memory` / `-m`: a cgroup limit. CUDA's unified-memory allocations are not charged to the
  container's cgroup, so on a Spark it never fires for the model's memory (nor does systemd-oomd).
- `--ulimit memlock`: NCCL over the ConnectX-7 link (RDMA) registers pinned memory; under Docker's
  default limit it fails or falls back to sockets. Several Sparks want `--ulimit memlock=-1`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sparktui.core.units import GiB

MiB = 1 << 20
DOCKER_DEFAULT_SHM = 64 * MiB
MQ_CHUNKS = 10
MQ_BROADCAST_CHUNK = 16 * MiB  # VLLM_MQ_MAX_CHUNK_BYTES_MB's default (vllm/envs.py, 0.31.0)
MQ_DEFAULT_CHUNK = 24 * MiB  # MessageQueue's own default max_chunk_bytes (shm_broadcast.py, 0.31.0)
UNLIMITED = -1
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgtp]?)i?b?", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def docker_size(text: str) -> int | None:
    """A docker size (`16g`, `1024m`, `512MiB`, bytes; 1024-based as docker reads them) in bytes."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class DockerRun:
    """The options of a `docker run` argv that matter to vLLM's memory (the last one given wins)."""

    ipc: str | None = None  # "host", "private", "shareable", "container:…"
    shm_size: int | None = None  # bytes
    memory: int | None = None  # bytes (--memory / -m)
    memory_text: str | None = None
    memlock: tuple[int, int] | None = None  # (soft, hard) bytes; -1 unlimited
    image: str | None = None


_VALUE_OPTIONS = {"--ipc", "--shm-size", "--memory", "-m", "--ulimit", "--name", "-p", "--publish", "-e", "--env",
                  "-v", "--volume", "--gpus", "--network", "--net", "-w", "--workdir", "--entrypoint", "-u", "--user",
                  "--runtime", "--device", "--mount", "--label", "-l", "--env-file", "--cpus", "--hostname", "-h",
                  "--platform", "--pull", "--restart", "--memory-swap", "--memory-reservation", "--cap-add",
                  "--cap-drop", "--security-opt", "--add-host", "--dns", "--log-driver", "--log-opt", "--pid",
                  "--userns", "--uts", "--cgroupns", "--stop-signal", "--stop-timeout", "--tmpfs", "--group-add",
                  "--expose", "--health-cmd", "--cidfile", "--mac-address", "--ip", "--ip6",
                  "--sysctl", "--device-cgroup-rule", "--cpuset-cpus", "--cpu-shares", "-c", "--volumes-from",
                  "--link", "-a", "--attach", "--oom-score-adj", "--cpu-quota", "--cpu-period", "--cpuset-mems",
                  "--annotation", "--isolation", "--detach-keys", "--domainname", "--dns-search", "--dns-option",
                  "--label-file", "--network-alias", "--storage-opt", "--pids-limit", "--cgroup-parent",
                  "--health-interval", "--health-retries", "--health-timeout", "--health-start-period",
                  "--blkio-weight", "--device-read-bps", "--device-write-bps", "--volume-driver"}  # fmt: skip


def split_docker_run(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """`docker run [OPTIONS] IMAGE [ARGS]` (argv from `docker` on, or from `run`) as (the options, the
    image, the words after it): the image is the first word that is not an option or an option's value."""
    args = list(argv)
    while args and args[0] != "run":
        args.pop(0)
    args = args[1:]
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return args[:i], args[i + 1] if i + 1 < len(args) else None, args[i + 2 :]
        if not word.startswith("-"):
            return args[:i], word, args[i + 1 :]
        i += 2 if "=" not in word and word in _VALUE_OPTIONS else 1
    return args, None, []


def parse_docker_run(argv: list[str]) -> DockerRun:
    """The memory options of `docker run …` (argv from `docker` on, or from `run`)."""
    options, image, _ = split_docker_run(argv)
    found: dict[str, object] = {"image": image} if image else {}
    i = 0
    while i < len(options):
        name, eq, value = options[i].partition("=")
        if not eq and name in _VALUE_OPTIONS:
            value = options[i + 1] if i + 1 < len(options) else ""
            i += 1
        i += 1
        if name == "--ipc":
            found["ipc"] = value
        elif name == "--shm-size":
            found["shm_size"] = docker_size(value)
        elif name in ("--memory", "-m"):
            found["memory"], found["memory_text"] = docker_size(value), value
        elif name == "--ulimit" and value.startswith("memlock="):
            found["memlock"] = _memlock(value.removeprefix("memlock="))
    return DockerRun(**found)  # type: ignore[arg-type]


def _memlock(text: str) -> tuple[int, int] | None:
    """`-1`, `-1:-1`, `68719476736:68719476736` (bytes, as docker takes memlock) → (soft, hard)."""
    parts = text.split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        return None
    soft = values[0]
    hard = values[1] if len(values) > 1 else soft
    return soft, hard


def shm_needed(world_size: int, local_workers: int) -> int:
    """/dev/shm vLLM's multiproc executor maps on one node (0 for a single GPU: no message queues)."""
    if world_size <= 1:
        return 0
    need = MQ_CHUNKS * MQ_BROADCAST_CHUNK + local_workers * MQ_CHUNKS * MQ_DEFAULT_CHUNK
    if local_workers > 1:
        need += MQ_CHUNKS * MQ_DEFAULT_CHUNK  # the tensor-parallel group's own broadcaster
    return need


def container_warnings(run: DockerRun, *, world_size: int, local_workers: int, unified: bool) -> list[str]:
    """What to tell the user about this `docker run` before vLLM starts in it."""
    out = []
    need = shm_needed(world_size, local_workers)
    if need and run.ipc != "host":
        have = run.shm_size if run.shm_size is not None else DOCKER_DEFAULT_SHM
        if have < need:
            given = "--shm-size" if run.shm_size is not None else "Docker's default /dev/shm"
            out.append(
                f"container: {given} is {have / MiB:.0f} MiB, less than the ~{need / MiB:.0f} MiB of shared memory "
                f"vLLM's {local_workers} worker(s) here map for a world size of {world_size} (its message queues; "
                "NCCL's come on top): workers die of SIGBUS. Give --shm-size "
                f"{max(1, -(-need // GiB))}g in [runner] container-args, or --ipc=host"
            )
    if run.memory is not None and unified:
        out.append(
            f"container: --memory {run.memory_text} does nothing for the model on unified memory: CUDA's "
            "allocations are not charged to the container's cgroup, so the limit (and systemd-oomd) never "
            "fires for them; sparktui's guard watches MemAvailable instead"
        )
    multi_node = world_size > local_workers
    if multi_node and (run.memlock is None or (UNLIMITED not in run.memlock and min(run.memlock) < 64 * GiB)):
        now = "not set (Docker's default)" if run.memlock is None else f"{run.memlock[0]}:{run.memlock[1]} bytes"
        out.append(
            f"container: --ulimit memlock is {now}: NCCL over the ConnectX-7 link (RDMA) pins memory and "
            "fails or falls back to sockets under a small limit; add --ulimit memlock=-1 to [runner] container-args"
        )
    return out


def labels_of_inspect(text: str | bytes) -> dict[str, str]:
    """An image's labels from `docker image inspect` output (a JSON array of images, or one image)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if isinstance(data, list):
        data = data[0] if data else {}
    config = data.get("Config") if isinstance(data, dict) else None
    labels = config.get("Labels") if isinstance(config, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {str(k): str(v) for k, v in labels.items()}
