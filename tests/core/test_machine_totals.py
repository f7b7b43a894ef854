"""The CUDA total a fit assumes: DGX Sparks report 119.63 or 121.69 GiB (their MemTotal; the firmware's
reservation, not the flags, decides which), so a Spark not at hand spans both and says which it took;
`--machine auto` on a Spark takes its own MemTotal (tests/fixtures/machines/SOURCES.md)."""

from __future__ import annotations

import math

from sparktui.cli import main
from sparktui.core.config import ServeConfig
from sparktui.core.fit import fit, plan_kv
from sparktui.core.machine import Machine, dgx_spark, machine_from_name
from sparktui.core.modelspec import load_model_spec
from sparktui.core.units import GB
from sparktui.core.vllm_rules import UMA_NON_TORCH, rules_for

GiB = 1024**3
GB10_CUDA_TOTALS = (int(119.63 * GiB), int(121.69 * GiB))  # as vLLM prints them: "Free memory on device (…/T GiB)"
KIB = 1024
# MemTotal of the two kinds of Spark, kB, as public /proc/meminfo readings show them
SMALL_SPARK_KB, LARGE_SPARK_KB = 125_443_120, 127_600_748
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def box(total: int) -> Machine:
    """One Spark whose CUDA total (and MemTotal) is `total`: the fit of a box at hand."""
    spark = dgx_spark()
    return Machine(
        "one spark", total, total, unified=True, mem_available=total - 4 * GB, assumed_available=True,
        non_torch=UMA_NON_TORCH.bytes, device_memory_known=False, sms=spark.sms, fp4=True,
    )  # fmt: skip


def test_the_two_totals_are_the_two_kinds_of_spark():
    from sparktui.core import machine

    assert machine.GB10_CUDA_TOTALS == GB10_CUDA_TOTALS
    # each is its box's MemTotal, to the 0.01 GiB vLLM prints
    assert round(SMALL_SPARK_KB * KIB / GiB, 2) == 119.63 and round(LARGE_SPARK_KB * KIB / GiB, 2) == 121.69


def test_a_spark_not_at_hand_covers_both_totals_and_keeps_the_smaller_as_its_figure():
    spec = load_model_spec(LLAMA)
    config = ServeConfig(model=LLAMA, max_model_len=32768, gpu_memory_utilization=0.8)
    spark = fit(config, spec, dgx_spark())
    small, large = (fit(config, spec, box(t)) for t in GB10_CUDA_TOTALS)
    assert spark.kv_cache_bytes == small.kv_cache_bytes < large.kv_cache_bytes
    assert spark.kv_cache_bytes_low == small.kv_cache_bytes_low
    # the high end is the larger box's: the request there is ceil(0.8 × 121.69 GiB)
    assert spark.kv_cache_bytes_high == large.kv_cache_bytes_high > small.kv_cache_bytes_high
    assert large.kv_cache_bytes_high - small.kv_cache_bytes_high == math.ceil(0.8 * GB10_CUDA_TOTALS[1]) - math.ceil(
        0.8 * GB10_CUDA_TOTALS[0]
    )
    # what either box would log at the fit's own terms lies inside the range
    for one in (small, large):
        assert spark.kv_cache_bytes_low <= one.kv_cache_bytes <= spark.kv_cache_bytes_high
    # a GPU given by its size has one total: no span
    gpu = fit(config, spec, machine_from_name(80))
    assert gpu.to_dict()["cuda_total"] == {"assumed": 80 * GiB, "low": 80 * GiB, "high": 80 * GiB, "basis": ""}


def test_one_request_that_fits_only_on_the_larger_spark_is_tight_and_past_it_won_t_start():
    spec = load_model_spec(LLAMA)
    util = {"gpu_memory_utilization": 0.2}
    small = fit(ServeConfig(model=LLAMA, max_model_len=8192, **util), spec, box(GB10_CUDA_TOTALS[0]))
    spark = fit(ServeConfig(model=LLAMA, max_model_len=8192, **util), spec, dgx_spark())
    plan = plan_kv(spec, 2, None, 1, 2048, True, 0, False, rules_for(None))
    smaller_end, larger_end = (plan.max_len(r.kv_cache_bytes_high, 1 << 20) for r in (small, spark))
    assert smaller_end < larger_end
    between = (smaller_end + larger_end) // 2
    # on the smaller box alone nothing vLLM has measured leaves room; on the larger one it may
    assert fit(ServeConfig(model=LLAMA, max_model_len=between, **util), spec, box(GB10_CUDA_TOTALS[0])).verdict == (
        "wont_start"
    )
    straddling = fit(ServeConfig(model=LLAMA, max_model_len=between, **util), spec, dgx_spark())
    assert straddling.verdict == "tight", straddling.reasons
    beyond = fit(ServeConfig(model=LLAMA, max_model_len=larger_end + 4096, **util), spec, dgx_spark())
    assert beyond.verdict == "wont_start", beyond.reasons


def test_auto_on_a_spark_takes_its_own_memtotal_as_the_cuda_total():
    for kb in (SMALL_SPARK_KB, LARGE_SPARK_KB):
        host = Machine.from_reading(kb * KIB, 100 * GiB)
        assert host.total == host.mem_total == kb * KIB
        assert host.totals() == (host.total, host.total)
        spec = load_model_spec(LLAMA)
        r = fit(ServeConfig(model=LLAMA, max_model_len=8192, gpu_memory_utilization=0.8), spec, host)
        assert r.budget["requested"] == math.ceil(0.8 * kb * KIB)
        assert "CUDA's total is MemTotal" in r.machine and r.to_dict()["cuda_total"]["basis"]


def test_the_total_assumed_and_why_is_in_the_text_the_reasons_and_the_json(capsys):
    spec = load_model_spec(LLAMA)
    r = fit(ServeConfig(model=LLAMA, max_model_len=8192, gpu_memory_utilization=0.8), spec, dgx_spark())
    assert r.verdict == "fits"
    assert "119.63 GiB visible to CUDA assumed" in r.machine and "121.69 GiB" in r.machine
    assert "firmware" in r.machine
    request = next(w for w in r.memory_working if w.startswith("request"))
    assert f"ceil(0.8 × 121.69 GiB) = {math.ceil(0.8 * GB10_CUDA_TOTALS[1]) / GiB:.2f} GiB there" in request
    assert "and CUDA totals 119.63–121.69 GiB" in r.reasons[-1]  # the reason the panel shows too
    d = r.to_dict()["cuda_total"]
    assert (d["assumed"], d["low"], d["high"]) == (GB10_CUDA_TOTALS[0], *GB10_CUDA_TOTALS)
    assert "firmware" in str(d["basis"])
    # a GPU given by its size says nothing of the kind
    gpu = fit(ServeConfig(model=LLAMA, max_model_len=8192), spec, machine_from_name(80))
    assert "CUDA totals" not in gpu.reasons[-1] and "assumed" not in gpu.machine
    # the CLI prints the same
    assert main(["fit", "--model", LLAMA, "--max-model-len", "8192", "--gpu-memory-utilization", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "119.63 GiB visible to CUDA assumed" in out and "121.69 GiB" in out


def test_the_panels_machine_line_says_which_total_and_that_the_range_covers_the_other():
    assert dgx_spark().label("dgx-spark") == "DGX Spark, 119.6 GiB (121.7 on some)"
    # a Spark at hand has one total: nothing to cover
    assert box(GB10_CUDA_TOTALS[1]).label("dgx-spark") == "DGX Spark (121.7 GiB unified memory)"
    assert machine_from_name(80).label("80") == "a GPU with 80 GiB"
    assert Machine.from_reading(24 * GiB, None).label("auto").startswith("this host (24.0 GiB")


def meminfo_text(kb: int) -> str:
    return f"MemTotal:       {kb} kB\nMemFree:        90000000 kB\nMemAvailable:   100000000 kB\n"


def test_a_spark_profile_on_a_spark_takes_this_spark_s_total_and_elsewhere_plans_for_either():
    from sparktui.core.machine import host_machine

    for kb in (SMALL_SPARK_KB, LARGE_SPARK_KB):
        here = Machine.from_meminfo(meminfo_text(kb))
        for spark in (machine_from_name("dgx-spark", here), host_machine("dgx-spark", here)):
            assert spark.name == "dgx-spark" and spark.total == spark.mem_total == kb * KIB
            assert spark.totals() == (kb * KIB, kb * KIB)  # nothing left to span
            words = f"this Spark: {kb * KIB / GiB:.1f} GiB"
            assert words in spark.describe() and words in str(spark.total_dict()["basis"])
            assert spark.label("dgx-spark") == f"DGX Spark, {words}"
    # on a host of another size (a laptop planning for a Spark), or none read: the smaller, spanning both
    for host in (Machine.from_reading(24 * GiB, None), Machine.from_reading(128 * GiB, None), None):
        planned = machine_from_name("dgx-spark", host)
        assert (planned.total, planned.totals()) == (GB10_CUDA_TOTALS[0], GB10_CUDA_TOTALS)
        assert planned.label("dgx-spark") == "DGX Spark, 119.6 GiB (121.7 on some)"


def test_the_fit_text_and_json_say_this_spark_s_total_when_run_on_one(capsys, monkeypatch, tmp_path):
    from sparktui.commands import fit as fit_command

    argv = ["fit", "--model", LLAMA, "--max-model-len", "8192", "--gpu-memory-utilization", "0.8"]
    reading = tmp_path / "meminfo"
    monkeypatch.setattr(fit_command, "MEMINFO", reading)
    reading.write_text(meminfo_text(LARGE_SPARK_KB))
    assert main([*argv, "--json"]) == 0
    d = __import__("json").loads(capsys.readouterr().out)
    total = LARGE_SPARK_KB * KIB
    assert (d["cuda_total"]["assumed"], d["cuda_total"]["low"], d["cuda_total"]["high"]) == (total, total, total)
    assert "this Spark: 121.7 GiB" in d["cuda_total"]["basis"]
    assert d["budget"]["requested"] == math.ceil(0.8 * total)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "this Spark: 121.7 GiB" in out and "121.69 GiB visible to CUDA" in out and "on some" not in out
    # on a 24 GiB laptop the same profile is planned for a Spark not at hand
    reading.write_text(meminfo_text(24 * 1024 * 1024))
    assert main([*argv, "--json"]) == 0
    d = __import__("json").loads(capsys.readouterr().out)
    assert (d["cuda_total"]["assumed"], d["cuda_total"]["high"]) == GB10_CUDA_TOTALS
    # and with no reading at all (not Linux), too: a Spark profile still fits, planned
    reading.unlink()
    assert main([*argv, "--json"]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["cuda_total"]["assumed"] == GB10_CUDA_TOTALS[0]


def test_a_reading_without_memtotal_plans_a_spark_and_refuses_auto(capsys, monkeypatch, tmp_path):
    from sparktui.commands import fit as fit_command

    reading = tmp_path / "meminfo"
    reading.write_text("MemFree: 1 kB\n")  # no MemTotal (a container's odd /proc)
    monkeypatch.setattr(fit_command, "MEMINFO", reading)
    argv = ["fit", "--json", "--model", LLAMA, "--max-model-len", "8192"]
    assert main(argv) == 0
    assert __import__("json").loads(capsys.readouterr().out)["cuda_total"]["assumed"] == GB10_CUDA_TOTALS[0]
    assert main([*argv, "--machine", "auto"]) == 2
    assert "no MemTotal" in capsys.readouterr().err
