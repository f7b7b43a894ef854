"""What each node of a Ray cluster runs (runtime/cluster/ray_backend.py), without starting anything: the
processes themselves are tested on the namespace cluster (test_cluster_ray.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparktui.core.profiles import parse_profile
from sparktui.errors import UserError
from sparktui.runtime.cluster import ray_backend as ray_cluster
from sparktui.runtime.launch.runner import build_command
from tests.support.stub_vllm import install_stub


def ray_profile(
    tmp_path: Path, cluster: str = 'master-addr = "10.213.0.1"\n', serve: str = "tensor-parallel-size = 2\n"
):
    stub = install_stub(tmp_path / "bin")
    text = (
        f'[serve]\nmodel = "/models/tiny"\nport = 8011\n{serve}'
        f'[runner]\nexecutable = "{stub}"\n'
        f'[cluster]\nnodes = ["a", "b"]\nbackend = "ray"\n{cluster}'
        '[env]\nNCCL_SOCKET_IFNAME = "mine"\n'
    )
    return parse_profile(text, tmp_path / "p.toml")


def test_the_head_starts_ray_then_becomes_vllm_with_the_ray_executor(tmp_path, isolated):
    profile = ray_profile(tmp_path, cluster='master-addr = "127.0.0.1"\ninterface = "lo"\n')
    head, serve = ray_cluster.head_profile(profile, profile.serve)
    assert head.cluster.rank == 0
    vllm = build_command(head, serve)
    assert vllm.argv[-2:] == ["--distributed-executor-backend", "ray"]
    command = ray_cluster.node_command(head, serve, vllm, 0)
    ready, count = command.argv[3], int(command.argv[4])
    ray_argv, vllm_argv = command.argv[5 : 5 + count], command.argv[5 + count :]
    assert command.argv[1:3] == ["-m", "sparktui.runtime.cluster.ray_head"]
    assert ray_argv[1:4] == ["start", "--head", "--port"] and ray_argv[-1] == "--block"
    assert ray_argv[ray_argv.index("--node-ip-address") + 1] == "127.0.0.1"
    assert ray_argv[ray_argv.index("--num-gpus") + 1] == "1"  # tp 2 over 2 nodes: one GPU each
    temp = ray_argv[ray_argv.index("--temp-dir") + 1]
    assert ready == f"{temp}/ray_current_cluster"
    # Ray's socket paths (session_<date>_<time>_<pid>/sockets/plasma_store) must stay below 108 bytes
    assert len(temp) + len("/session_2026-11-30_12-48-08_044818_4194304/sockets/plasma_store") < 108
    assert vllm_argv == vllm.argv
    assert command.env["RAY_ADDRESS"] == f"127.0.0.1:{head.cluster.ray_port}"
    assert command.env["VLLM_HOST_IP"] == "127.0.0.1"
    assert command.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert command.env["NCCL_SOCKET_IFNAME"] == "mine"  # the profile's [env] wins


def test_a_worker_runs_ray_start_against_the_head_and_nothing_else(tmp_path, isolated):
    profile = ray_profile(tmp_path, cluster='master-addr = "127.0.0.1"\n')
    worker = ray_cluster.worker_profile(profile, 1)
    command = ray_cluster.node_command(worker, worker.serve, build_command(worker, worker.serve), 1)
    assert command.argv[1:3] == ["start", "--address"] and command.argv[3] == "127.0.0.1:6379"
    assert "vllm" not in " ".join(command.argv) and "--head" not in command.argv
    # this node's address is where its packets to the head leave from
    assert command.argv[command.argv.index("--node-ip-address") + 1] == "127.0.0.1"
    assert command.env["VLLM_HOST_IP"] == "127.0.0.1"


def test_what_cannot_work_over_ray_is_refused_before_anything_starts(tmp_path, isolated):
    profile = ray_profile(tmp_path, serve="tensor-parallel-size = 1\n")
    with pytest.raises(UserError, match="--tensor-parallel-size 1 over 2 nodes"):
        ray_cluster.head_profile(profile, profile.serve)
    profile = ray_profile(
        tmp_path, serve='tensor-parallel-size = 2\nextra-args = ["--distributed-executor-backend", "mp"]\n'
    )
    with pytest.raises(UserError, match='--distributed-executor-backend mp: \\[cluster\\] backend = "ray"'):
        ray_cluster.head_profile(profile, profile.serve)
    profile = ray_profile(tmp_path, cluster="")
    with pytest.raises(UserError, match="give master-addr"):
        ray_cluster.head_profile(profile, profile.serve)
    profile = ray_profile(tmp_path, cluster='interface = "no-such-if0"\n')
    with pytest.raises(UserError, match="interface = 'no-such-if0': this node has no IPv4 address"):
        ray_cluster.head_profile(profile, profile.serve)
    worker = ray_cluster.worker_profile(ray_profile(tmp_path), 1)
    container = dataclasses.replace(worker, runner=dataclasses.replace(worker.runner, kind="container", image="x"))
    with pytest.raises(UserError, match='kind = "native"'):
        ray_cluster.node_command(container, container.serve, build_command(container, container.serve), 1)


@pytest.mark.parametrize(("version", "takes_own"), [("2.60.0", True), ("2.55.0", True), ("2.47.1", False)])
@pytest.mark.slow  # starts a process
def test_a_worker_whose_ray_ignores_its_own_temp_dir_is_followed_to_the_heads_path(
    tmp_path, isolated, version, takes_own
):
    """Ray before 2.55 ignores a worker's --temp-dir and keeps its sessions under the head's path:
    readiness is looked for, and leftovers removed, where that Ray really writes."""
    profile = ray_profile(tmp_path, cluster='master-addr = "127.0.0.1"\n')
    fake_ray = tmp_path / "bin" / "ray"  # beside the runner's executable: the Ray that would run
    fake_ray.write_text(f"#!/bin/sh\necho 'ray, version {version}'\n")
    fake_ray.chmod(0o755)
    head_dir = tmp_path / "head-ray-temp"
    worker = ray_cluster.worker_profile(profile, 1, head_dir)
    assert worker.cluster.head_ray_temp_dir == str(head_dir)
    runner = worker.runner
    chosen = ray_cluster.node_temp_dir(worker.cluster, 8011, runner.executable, runner.venv)
    assert chosen == (ray_cluster.ray_temp_dir(8011) if takes_own else head_dir)
    command = ray_cluster.node_command(worker, worker.serve, build_command(worker, worker.serve), 1)
    assert command.argv[command.argv.index("--temp-dir") + 1] == str(chosen)
    # the head itself always keeps its own
    head, _ = ray_cluster.head_profile(profile, profile.serve)
    assert ray_cluster.node_temp_dir(head.cluster, 8011, runner.executable, runner.venv) == ray_cluster.ray_temp_dir(
        8011
    )
