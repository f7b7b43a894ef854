"""Real vLLM (the CPU build) at tensor-parallel 2 over two "nodes": `sparktui serve` of a [cluster]
profile (backend "mp": vLLM's --nnodes 2) on the test cluster of network namespaces with their own
sshd (tests/support/netns_cluster.py), a tiny local model. The head's rank answers a completion that
needs both ranks (gloo over the link named in [cluster] interface), and a stop on the head leaves
nothing on either node.

Same needs as test_real_vllm.py (SPARKTUI_TEST_VLLM; a failure, not a skip, under CI=true) plus
root and sshd for the namespaces. About two minutes on two cores: one test only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_real_vllm import (  # noqa: F401  (pytest fixtures, used by name)
    STARTUP_TIMEOUT_S,
    tiny_model,
    vllm,
    workdir,
)
from tests.support import netns_cluster as nc
from tests.support import wait_for

pytestmark = pytest.mark.slow
PORT = 8000


def cluster_profile(tmp_path: Path, executable: Path, model: Path) -> Path:
    path = tmp_path / "two-nodes.toml"
    # both "nodes" share this machine's memory: 0.3 each; the CPU backend sizes its KV cache from
    # --kv-cache-memory-bytes
    path.write_text(
        f'[serve]\nmodel = "{model}"\nport = {PORT}\ntensor-parallel-size = 2\nmax-model-len = 512\n'
        "enforce-eager = true\nkv-cache-memory-bytes = 67108864\ngpu-memory-utilization = 0.3\n"
        f'[machine]\nname = "auto"\n[runner]\nexecutable = "{executable}"\n'
        '[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-addr = "10.213.0.1"\nmaster-port = 29501\n'
        'interface = "cx1"\n'
    )
    return path


def status_is(cluster: nc.NetnsCluster, node: nc.Node, *wanted: str) -> dict | None:
    state = cluster.state_on(node, PORT)
    if state is not None and state["status"] == "exited" and "exited" not in wanted:
        raise AssertionError(f"{node.name}'s rank ended: {state.get('exit')}\nlog: {state.get('log_path')}")
    return state if state is not None and state["status"] in wanted else None


def test_real_vllm_tensor_parallel_2_over_two_nodes(netns_cluster, tmp_path, vllm, tiny_model):  # noqa: F811
    head, worker = netns_cluster.nodes
    done = netns_cluster.on_head("serve", "--detach", str(cluster_profile(tmp_path, vllm, tiny_model)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node node1 (rank 1): MemAvailable" in done.stderr  # the worker was checked over SSH
    wait_for(lambda: status_is(netns_cluster, head, "running"), STARTUP_TIMEOUT_S, "the head's rank", interval=1)
    wait_for(lambda: status_is(netns_cluster, worker, "running"), 60, "the worker's rank", interval=1)

    # a completion runs through both ranks (each holds half of every layer)
    ask = (
        f"import json, urllib.request as u; r = u.urlopen(u.Request('http://127.0.0.1:{PORT}/v1/completions', "
        f"data=json.dumps({{'model': {str(tiny_model)!r}, 'prompt': 'Hello', 'max_tokens': 4}}).encode(), "
        "headers={'Content-Type': 'application/json'}), timeout=120); print(r.read().decode())"
    )
    answer = netns_cluster.exec_argv(head, [sys.executable, "-c", ask])
    got = subprocess.run(answer, capture_output=True, text=True, timeout=180, check=False)
    assert got.returncode == 0, got.stderr[-2000:]
    body = json.loads(got.stdout)
    assert body["usage"]["completion_tokens"] == 4
    assert "tp2" in body.get("system_fingerprint", "")  # vLLM says it ran at tensor-parallel 2

    stop = netns_cluster.on_head("stop", "--port", str(PORT))
    assert stop.returncode == 0, stop.stderr
    assert wait_for(lambda: status_is(netns_cluster, worker, "exited"), 60, "the worker's rank to stop")
    assert wait_for(netns_cluster.nothing_left, 60, "no process but sshd on either node")
