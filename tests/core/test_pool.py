"""Several servers on one machine: reservations, the pool check, the guard's stop order."""

from __future__ import annotations

import math

from sparktui.core import pool
from sparktui.core.config import ServeConfig
from sparktui.core.machine import dgx_spark, machine_from_name
from sparktui.core.pool import Reservation, check_pool, pool_bytes, reserved_bytes, stop_order
from sparktui.core.units import GB, GiB


def test_a_server_reserves_its_request_plus_its_cuda_context():
    spark = dgx_spark()
    got, basis = reserved_bytes(spark, 0.5)
    assert got == math.ceil(0.5 * spark.total) + spark.cuda_context
    assert "--gpu-memory-utilization 0.5" in basis


def test_kv_cache_memory_bytes_reserves_weights_overheads_and_that_kv():
    spark = dgx_spark()
    budget = {"weights": 40 * GiB, "activation_peak": 2 * GiB, "non_torch": GiB // 4, "cuda_graphs": 4 * GB}
    got, basis = reserved_bytes(spark, 0.9, kv_cache_memory_bytes=8 * GiB, fit_budget=budget)
    assert got == 40 * GiB + 2 * GiB + GiB // 4 + 4 * GB + 8 * GiB + spark.cuda_context
    assert "--kv-cache-memory-bytes" in basis
    # without the model's weights the utilization's request is the honest upper figure
    unknown, why = reserved_bytes(spark, 0.9, kv_cache_memory_bytes=8 * GiB)
    assert unknown == math.ceil(0.9 * spark.total) + spark.cuda_context and "weights are unknown" in why


def test_two_halves_overcommit_and_two_thirds_of_that_fit():
    spark = dgx_spark()
    half, basis = reserved_bytes(spark, 0.5)
    a = Reservation(8001, "chat", half, basis)
    refused = check_pool(spark, half, [a])
    assert not refused.fits
    text = refused.explain(basis)
    assert "port 8001 (chat)" in text and "sparktui stop --port 8001" in text and "--force" in text
    small, basis = reserved_bytes(spark, 0.3)
    assert check_pool(spark, small, [Reservation(8001, "chat", small, basis)]).fits
    assert pool_bytes(spark) == spark.mem_total - spark.os_need_min
    assert check_pool(spark, 10 * spark.total, []).fits  # alone, a server is the fit's business


def test_a_discrete_gpu_pool_is_the_gpu():
    gpu = machine_from_name("80")
    assert pool_bytes(gpu) == 80 * GiB


def test_stop_order_lowest_priority_first_then_the_largest():
    servers = [
        Reservation(1, "big-important", 60 * GiB, "", priority=10),
        Reservation(2, "small-expendable", 5 * GiB, "", priority=0),
        Reservation(3, "large-expendable", 30 * GiB, "", priority=0),
    ]
    assert [r.port for r in stop_order(servers)] == [3, 2, 1]
    assert Reservation.from_dict(servers[0].to_dict()) == servers[0]


def test_the_utilization_is_read_from_a_recorded_argv_in_either_spelling():
    assert pool.utilization_in(["vllm", "serve", "m", "--gpu-memory-utilization", "0.5"]) == 0.5
    assert pool.utilization_in(["m", "--gpu-memory-utilization=0.42", "--port", "8001"]) == 0.42
    assert pool.utilization_in(["m", "--gpu-memory-utilization"]) is None  # cut short
    assert pool.utilization_in(["m", "--gpu-memory-utilization", "lots"]) is None
    assert pool.utilization_in(["m"]) is None


def test_one_pool_verdict_for_preflight_and_the_panel():
    machine = dgx_spark()
    config = ServeConfig(model="m", gpu_memory_utilization=0.5)
    other = pool.recorded_or_counted(machine, 8001, "embed", None, 0.5)  # an older record: counted
    assert other.bytes == pool.reserved_bytes(machine, 0.5)[0]
    verdict = pool.beside_others(machine, config, None, [other])
    assert not verdict.fits and verdict.new == pool.reserved_bytes(machine, 0.5)[0]
    assert verdict.check.verdict_with("fits") == "wont_start" and verdict.check.verdict_with("unsafe") == "unsafe"
    assert verdict.refusal(config).startswith("--gpu-memory-utilization 0.5: the servers already running reserve")
    assert verdict.check.beside_line().startswith("won't fit beside :8001")
    alone = pool.beside_others(machine, config, None, [])
    assert alone.fits and alone.check.verdict_with("tight") == "tight"


def test_a_recorded_argv_without_the_utilization_counts_vllm_s_newest_default():
    # sparktui passes --gpu-memory-utilization on every launch; an argv without it ran at vLLM's own
    # default, 0.92 from 0.20 (0.9 before): the record does not say which vLLM, so the larger
    machine = dgx_spark()
    bytes_, basis = pool.reserved_bytes(machine, None)
    assert bytes_ == math.ceil(0.92 * machine.total) + machine.cuda_context
    assert basis.startswith("--gpu-memory-utilization 0.92 × ") and "not passed: vLLM's own default" in basis
    given, given_basis = pool.reserved_bytes(machine, 0.9)
    assert given == math.ceil(0.9 * machine.total) + machine.cuda_context and "not passed" not in given_basis
