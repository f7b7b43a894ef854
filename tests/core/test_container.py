"""A container runner's `docker run` read for what it gets wrong on a Spark; an image's labels."""

from __future__ import annotations

from sparktui.core.container import (
    DOCKER_DEFAULT_SHM,
    container_warnings,
    docker_size,
    parse_docker_run,
    shm_needed,
)

MiB = 1 << 20


def test_docker_sizes_as_docker_reads_them() -> None:
    assert docker_size("16g") == 16 << 30 and docker_size("1024m") == 1 << 30 and docker_size("512MiB") == 512 * MiB
    assert docker_size("2GB") == 2 << 30 and docker_size("65536") == 65536 and docker_size("lots") is None


def test_the_argv_is_read_as_docker_reads_it_the_last_option_wins() -> None:
    run = parse_docker_run(
        ["docker", "run", "--rm", "--ipc=host", "-p", "127.0.0.1:8000:8000", "--ipc", "private", "--shm-size=2g",
         "-m", "64g", "--ulimit", "memlock=-1:-1", "-e", "HF_TOKEN", "nvcr.io/nvidia/vllm:25.10-py3", "vllm", "serve"]
    )  # fmt: skip
    assert run.ipc == "private" and run.shm_size == 2 << 30 and run.memory == 64 << 30
    assert run.memlock == (-1, -1) and run.image == "nvcr.io/nvidia/vllm:25.10-py3"


def test_shared_memory_for_the_workers() -> None:
    assert shm_needed(1, 1) == 0  # one GPU: no multiproc executor, no message queues
    one_local = shm_needed(2, 1)  # two Sparks, one rank each: the broadcast queue + its worker's answers
    assert one_local == 10 * 16 * MiB + 10 * 24 * MiB
    assert shm_needed(2, 2) == 10 * 16 * MiB + 2 * 10 * 24 * MiB + 10 * 24 * MiB
    small = parse_docker_run(["docker", "run", "--ipc=private", "img"])
    (warning,) = container_warnings(small, world_size=2, local_workers=2, unified=False)
    assert f"{DOCKER_DEFAULT_SHM // MiB} MiB" in warning and "--shm-size 1g" in warning and "SIGBUS" in warning
    enough = parse_docker_run(["docker", "run", "--ipc=private", "--shm-size", "1g", "img"])
    assert container_warnings(enough, world_size=2, local_workers=2, unified=False) == []
    host = parse_docker_run(["docker", "run", "--ipc=host", "img"])  # the host's /dev/shm
    assert container_warnings(host, world_size=2, local_workers=2, unified=False) == []
    assert container_warnings(small, world_size=1, local_workers=1, unified=False) == []


def test_memory_limit_and_memlock() -> None:
    limited = parse_docker_run(["docker", "run", "--ipc=host", "--memory", "100g", "img"])
    (said,) = container_warnings(limited, world_size=1, local_workers=1, unified=True)
    assert "--memory 100g does nothing" in said and "not charged" in said
    assert container_warnings(limited, world_size=1, local_workers=1, unified=False) == []
    two_sparks = parse_docker_run(["docker", "run", "--ipc=host", "img"])
    (memlock,) = container_warnings(two_sparks, world_size=2, local_workers=1, unified=True)
    assert "--ulimit memlock is not set" in memlock and "memlock=-1" in memlock
    unlimited = parse_docker_run(["docker", "run", "--ipc=host", "--ulimit", "memlock=-1", "img"])
    assert container_warnings(unlimited, world_size=2, local_workers=1, unified=True) == []
