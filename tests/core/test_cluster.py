"""Two Sparks serving one model: the profile's [cluster] and the fit per node."""

from __future__ import annotations

import math
import re

import pytest

from sparktui.core.cluster import API_SERVER_BYTES, RAY_HEAD_BYTES, ClusterSettings, fit_cluster, open_ports_note
from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import load_model_spec
from sparktui.core.profiles import dumps_profile, parse_profile
from sparktui.core.units import GiB
from sparktui.errors import UserError

CLUSTER = '[serve]\nmodel = "meta-llama/Llama-3.3-70B-Instruct"\ntensor-parallel-size = 2\n\n'


def test_cluster_section_parses_and_bad_values_name_the_key(tmp_path):
    p = parse_profile(CLUSTER + '[cluster]\nnodes = ["spark-a", "spark-b"]\nbackend = "mp"\ninterface = "enp1s0f0np0"\n',
                      tmp_path / "two.toml")  # fmt: skip
    assert p.cluster == ClusterSettings(("spark-a", "spark-b"), "mp", "enp1s0f0np0")
    assert parse_profile(CLUSTER, tmp_path / "one.toml").cluster is None
    for body, key in (
        ('nodes = ["spark-a"]', "nodes"),
        ('nodes = ["a", "a"]', "nodes"),
        ('nodes = ["a", "b"]\nbackend = "nccl"', "backend"),
        ('nodes = ["a", "b"]\ninterface = "eth0; id"', "interface"),
        ('nodes = ["a", "b"]\nmaster-port = 70000', "master-port"),
        ('nodes = ["a", "b"]\nnode = 1', "node"),
    ):
        with pytest.raises(UserError, match=rf"\[cluster\] {key}"):
            parse_profile(CLUSTER + "[cluster]\n" + body + "\n", tmp_path / "bad.toml")


def test_each_node_can_name_its_own_interface_and_a_bad_table_names_the_field(tmp_path):
    """GB10 nodes can name their ConnectX ports differently: [cluster.interfaces], one per node."""
    body = CLUSTER + '[cluster]\nnodes = ["spark-a", "spark-b"]\nbackend = "mp"\n'
    table = '[cluster.interfaces]\nspark-a = "enP2p1s0f1np1"\nspark-b = "enp1s0f0np0"\n'
    p = parse_profile(body + table, tmp_path / "two.toml")
    assert p.cluster is not None and p.cluster.interface is None
    assert [p.cluster.interface_at(r) for r in (0, 1)] == ["enP2p1s0f1np1", "enp1s0f0np0"]
    assert p.cluster.interface_of("spark-b") == "enp1s0f0np0"
    # the worker's copy (the head sends it over SSH) keeps every node's name
    assert parse_profile(dumps_profile(p), tmp_path / "copy.toml").cluster == p.cluster
    one = parse_profile(body + 'interface = "cx1"\n', tmp_path / "one.toml").cluster
    assert one is not None and one.interface_at(0) == one.interface_at(1) == "cx1"
    for bad, field, says in (
        ('interfaces = "cx1"', "interfaces", "expected a table of node = interface name"),
        (
            'interface = "cx1"\n'
            + table.replace("[cluster.interfaces]\n", "interfaces = { ")[:-1].replace("\n", ", ")
            + " }",
            "interfaces",
            "not both",
        ),
        ('[cluster.interfaces]\nspark-a = "cx1"', "interfaces", "no interface for spark-b"),
        (
            '[cluster.interfaces]\nspark-a = "cx1"\nspark-b = "cx1"\nspark-c = "cx2"',
            "interfaces",
            "'spark-c' is not one of the nodes",
        ),
        (
            '[cluster.interfaces]\nspark-a = "cx1"\nspark-b = "eth0; id"',
            "interfaces.spark-b",
            "expected an interface name",
        ),
    ):
        with pytest.raises(UserError, match=rf"\[cluster\] {re.escape(field)}: .*{re.escape(says)}"):
            parse_profile(body + bad + "\n", tmp_path / "bad.toml")


def test_each_node_holds_one_rank_and_the_head_carries_the_api_server_and_ray():
    spec = load_model_spec("meta-llama/Llama-3.3-70B-Instruct")
    config = ServeConfig(model=spec.name, tensor_parallel_size=2, max_model_len=32768, gpu_memory_utilization=0.85)
    spark = dgx_spark()
    nodes = fit_cluster(config, spec, spark, ClusterSettings(("a", "b"), "ray")).nodes
    head, worker = nodes
    assert (head.role, worker.role) == ("head", "worker")
    assert head.extra_bytes == API_SERVER_BYTES + RAY_HEAD_BYTES and worker.extra_bytes == 0
    one = fit(config.replace(tensor_parallel_size=1), spec, spark)
    # a rank holds half the weights (and the whole rope cache: every rank has its own) and the same
    # tokens as the whole KV cache shards by head
    rope = spec.rope_cache_bytes
    assert rope == 131_072 * 128 * 2  # max_position × head_dim, bf16
    assert abs(worker.result.weights_bytes - ((one.weights_bytes - rope) / 2 + rope)) <= 1
    assert worker.result.kv_cache_tokens == head.result.kv_cache_tokens > one.kv_cache_tokens
    # the head keeps less for the OS: that is where the cluster runs short first
    assert head.result.budget["os_left"] == worker.result.budget["os_left"]  # vLLM's own request is alike
    mp = fit_cluster(config, spec, spark, ClusterSettings(("a", "b"), "mp")).nodes[0]
    assert mp.extra_bytes == API_SERVER_BYTES


def test_the_head_is_the_node_that_runs_short_first():
    spec = load_model_spec("meta-llama/Llama-3.3-70B-Instruct")
    spark = dgx_spark()
    config = ServeConfig(model=spec.name, tensor_parallel_size=2, max_model_len=8192, gpu_memory_utilization=0.9)
    # 112 GiB free on each node: enough for vLLM's request (0.9 × 119.6 GiB) beside its CUDA context on
    # the worker, not beside the API server and the Ray head as well
    result = fit_cluster(config, spec, spark, ClusterSettings(("a", "b"), "ray"), mem_available=112 * GiB)
    head, worker = result.nodes
    assert worker.result.verdict == "fits" and head.result.verdict == "wont_start"
    assert result.verdict == "wont_start"
    assert any("free memory at start-up" in r for r in head.result.reasons)


def test_ranks_must_split_evenly_over_the_nodes():
    spec = load_model_spec("meta-llama/Llama-3.3-70B-Instruct")
    with pytest.raises(UserError, match="--tensor-parallel-size 1 over 2 nodes"):
        fit_cluster(ServeConfig(model=spec.name), spec, dgx_spark(), ClusterSettings(("a", "b")))


def test_ray_port_and_node_rank_parse_and_travel_in_a_saved_copy(tmp_path):
    from sparktui.core.profiles import dumps_profile

    p = parse_profile(CLUSTER + '[cluster]\nnodes = ["a", "b"]\nmaster-addr = "10.0.0.1"\nray-port = 6380\n',
                      tmp_path / "two.toml")  # fmt: skip
    assert p.cluster == ClusterSettings(("a", "b"), "ray", None, "10.0.0.1", 29501, 6380)
    # the head sets each node's rank in the copy that node's supervisor loads
    import dataclasses

    copy = dataclasses.replace(p, cluster=dataclasses.replace(p.cluster, rank=1, head_ray_temp_dir="/tmp/h"))
    again = parse_profile(dumps_profile(copy), tmp_path / "copy.toml")
    assert again.cluster == dataclasses.replace(p.cluster, rank=1, head_ray_temp_dir="/tmp/h")
    assert "master-port" not in dumps_profile(copy)  # a default the file never stated stays unstated
    for body, key in (
        ('nodes = ["a", "b"]\nray-port = 12000', "ray-port"),  # Ray's worker ports
        ('nodes = ["a", "b"]\nray-port = true', "ray-port"),
        ('nodes = ["a", "b"]\nnode-rank = 2', "node-rank"),
        ('nodes = ["a", "b"]\nnode-rank = -1', "node-rank"),
        ('nodes = ["a", "b"]\nray-temp-dir = "relative"', "ray-temp-dir"),
    ):
        with pytest.raises(UserError, match=rf"\[cluster\] {key}"):
            parse_profile(CLUSTER + "[cluster]\n" + body + "\n", tmp_path / "bad.toml")


def test_the_per_rank_kv_matches_a_real_two_spark_start_up(fixtures):
    """vllm-cases c12 (eugr/spark-vllm-docker#396): MiniMax-M2.7-AWQ at TP=2 over two DGX Sparks,
    one rank per node. vLLM said one 196,608-token request needs 23.25 GiB of KV on a rank and,
    with 22.5 GiB there, estimated a longest request of 190,272 tokens."""
    import json

    from sparktui.core.fit import fit_to_kv_memory
    from sparktui.core.modelspec import spec_from_config

    case = next(c for c in json.loads((fixtures / "vllm-cases.json").read_text()) if c["id"] == "c12")
    arch = {k: v for k, v in case["arch"].items() if isinstance(v, (int, list))}
    spec = spec_from_config(arch, name="MiniMax-M2 (dimensions)", source="vllm-cases c12")
    config = ServeConfig(model=spec.name, tensor_parallel_size=2, max_model_len=case["max_model_len"],
                         gpu_memory_utilization=case["gpu_memory_utilization"], vllm_version="0.29.1")  # fmt: skip
    # the KV heads shard over the ranks: each node holds 4 of the 8 for every token
    per_rank_token = case["reported"]["kv_cache_needed_gib"] * GiB / case["max_model_len"]
    assert spec.kv_bytes_per_token() / 2 == per_rank_token == 126976
    _, tokens, concurrency = fit_to_kv_memory(spec, config, int(case["reported"]["available_kv_cache_gib"] * GiB))
    assert abs(tokens - case["reported"]["estimated_max_model_len"]) / tokens < 0.001
    assert concurrency < 1  # too small for one max-length request, as vLLM refused


def test_every_cluster_launch_names_the_ports_that_listen_on_every_address():
    ray = ClusterSettings(nodes=("node0", "node1"), backend="ray", ray_port=6390)
    mp = ClusterSettings(nodes=("node0", "node1"), backend="mp", master_port=29555)
    assert "Ray's GCS (port 6390)" in open_ports_note(ray) and "every address" in open_ports_note(ray)
    assert "--master-port 29555" in open_ports_note(mp) and "firewall" in open_ports_note(mp)


# the two Spark sizes' MemTotal (tests/fixtures/machines/SOURCES.md); on GB10 CUDA's total is MemTotal
SMALL_SPARK, LARGE_SPARK = 125_443_120 * 1024, 127_600_748 * 1024


def spark_here(mem_total: int):  # type: ignore[no-untyped-def]
    """`dgx-spark` run on a Spark of this MemTotal: this host's own total (core.machine.dgx_spark)."""
    from sparktui.core.machine import Machine, machine_from_name

    return machine_from_name("dgx-spark", Machine.from_reading(mem_total, None))


def llama_70b_over_two(utilization: float = 0.7):  # type: ignore[no-untyped-def]
    spec = load_model_spec("meta-llama/Llama-3.3-70B-Instruct")
    config = ServeConfig(model=spec.name, tensor_parallel_size=2, max_model_len=32768,
                         gpu_memory_utilization=utilization)  # fmt: skip
    return config, spec


def test_on_a_larger_spark_a_worker_not_read_is_planned_as_the_smaller_spark_and_limits_the_kv():
    """The head takes this Spark's own 121.69 GiB; the worker may be a 119.63 GiB Spark, so it is planned
    on 119.63 with the range to 121.69, and vLLM gives every rank the smaller rank's KV cache."""
    from sparktui.core.machine import GB10_CUDA_TOTALS

    config, spec = llama_70b_over_two()
    plan = fit_cluster(config, spec, spark_here(LARGE_SPARK), ClusterSettings(("spark-a", "spark-b"), "ray"))
    head, worker = plan.nodes
    assert head.result.cuda_total["assumed"] == head.result.cuda_total["high"] == LARGE_SPARK
    low, high = GB10_CUDA_TOTALS
    assert (worker.result.cuda_total["assumed"], worker.result.cuda_total["low"]) == (low, low)
    assert worker.result.cuda_total["high"] == high and not worker.read
    assert worker.result.budget["requested"] == math.ceil(0.7 * low)
    assert worker.result.kv_cache_tokens < head.result.kv_cache_tokens
    assert plan.limiting is worker
    d = plan.to_dict()
    assert d["kv_cache_tokens"] == worker.result.kv_cache_tokens
    assert (d["limited_by"]["host"], d["limited_by"]["role"]) == ("spark-b", "worker")
    assert d["limited_by"]["cuda_total"]["assumed"] == low
    assert d["nodes"][1]["cuda_total"]["high"] == high
    text = plan.limit_text()
    assert (
        f"KV cache {worker.result.kv_cache_tokens:,} tokens per rank, set by worker spark-b (119.63 GiB planned" in text
    )


def test_on_a_smaller_spark_the_plan_is_as_before_every_node_alike():
    """A 119.63 GiB head is the smaller size already: the worker planned for either size holds as much."""
    config, spec = llama_70b_over_two()
    plan = fit_cluster(config, spec, spark_here(SMALL_SPARK), ClusterSettings(("spark-a", "spark-b"), "ray"))
    head, worker = plan.nodes
    from sparktui.core.machine import GB10_CUDA_TOTALS

    assert head.result.cuda_total["assumed"] == worker.result.cuda_total["assumed"] == SMALL_SPARK
    assert worker.result.cuda_total["high"] == GB10_CUDA_TOTALS[1]  # it may be the larger: the KV range says so
    assert worker.result.kv_cache_tokens == head.result.kv_cache_tokens
    assert worker.result.verdict == head.result.verdict
    assert plan.limiting is head
    assert plan.to_dict()["limited_by"]["host"] == "spark-a"
    assert "set by every node alike (119.63 GiB, this host's)" in plan.limit_text()


def test_a_worker_whose_reading_is_known_is_planned_on_its_own_total():
    """The preflight reads each node's MemTotal: a 121.69 GiB worker beside a 119.63 GiB head is fitted on
    its own total (no range), and the head's total is then the one every rank is held to."""
    from sparktui.core.cluster import NodeReading
    from sparktui.core.machine import Machine, host_machine

    config, spec = llama_70b_over_two()
    worker_machine = host_machine("dgx-spark", Machine.from_reading(LARGE_SPARK, 110 * GiB))
    readings = {"spark-b": NodeReading(worker_machine, 110 * GiB)}
    plan = fit_cluster(config, spec, spark_here(SMALL_SPARK), ClusterSettings(("spark-a", "spark-b"), "ray"),
                       readings=readings)  # fmt: skip
    head, worker = plan.nodes
    assert worker.read and not head.read
    assert worker.result.cuda_total["assumed"] == worker.result.cuda_total["low"] == LARGE_SPARK
    assert worker.result.cuda_total["high"] == LARGE_SPARK
    assert worker.result.budget["requested"] == math.ceil(0.7 * LARGE_SPARK)
    assert worker.result.kv_cache_tokens > head.result.kv_cache_tokens
    assert plan.limiting is head
    assert plan.to_dict()["nodes"][1]["total_read"] is True
    assert "set by head spark-a (119.63 GiB, this host's)" in plan.limit_text()


def test_off_a_spark_every_node_is_planned_alike():
    """From a laptop (`dgx-spark` not at hand) every node, the head too, is a Spark planned for."""
    from sparktui.core.machine import GB10_CUDA_TOTALS

    config, spec = llama_70b_over_two()
    plan = fit_cluster(config, spec, dgx_spark(), ClusterSettings(("spark-a", "spark-b"), "ray"))
    for node in plan.nodes:
        total = node.result.cuda_total
        assert (total["assumed"], total["low"], total["high"]) == (GB10_CUDA_TOTALS[0], *GB10_CUDA_TOTALS)
    assert "set by every node alike (119.63 GiB planned" in plan.limit_text()


def test_auto_on_a_spark_plans_the_worker_as_a_spark_and_elsewhere_as_this_host():
    """`--machine auto` is this host: on a 121.69 GiB Spark a worker not read may be the smaller Spark;
    on a host of another size (not a Spark) every node is that host's size, as before."""
    from sparktui.core.machine import GB10_CUDA_TOTALS, Machine

    config, spec = llama_70b_over_two()
    plan = fit_cluster(config, spec, Machine.from_reading(LARGE_SPARK, 110 * GiB), ClusterSettings(("a", "b"), "ray"))
    assert plan.nodes[1].result.cuda_total["assumed"] == GB10_CUDA_TOTALS[0]
    assert plan.nodes[0].result.cuda_total["assumed"] == LARGE_SPARK
    from sparktui.core.cluster import planned_node

    worker = planned_node(Machine.from_reading(LARGE_SPARK, 100 * GiB))
    assert (worker.name, worker.total, worker.totals()) == ("dgx-spark", GB10_CUDA_TOTALS[0], GB10_CUDA_TOTALS)
    laptop = Machine.from_reading(24 * GiB, 20 * GiB)
    assert planned_node(laptop) is laptop
    assert plan.limiting is plan.nodes[1]
