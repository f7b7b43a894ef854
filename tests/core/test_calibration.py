"""core/calibration.py: a start-up log's own split, the calibrations file, and matching by key."""

from __future__ import annotations

import pytest

from sparktui.core.calibration import (
    Calibration,
    best_match,
    calibration_from_log,
    differences,
    dump_store,
    load_store,
    read_log_figures,
    release_version,
    with_record,
)
from sparktui.errors import UserError
from tests.support import FIXTURES

GiB = 1024**3
LOGS = FIXTURES / "vllm-logs"
GEMMA = (LOGS / "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log").read_text(errors="replace")


def test_the_split_vllm_prints():
    f = read_log_figures(GEMMA)
    assert (f.weights, f.kv_memory, f.graphs) == (int(51.54 * GiB), int(41.66 * GiB), int(4.22 * GiB))
    assert f.total == int(119.63 * GiB) and f.utilization == 0.85
    assert (f.torch_peak, f.non_torch) == (int(1.72 * GiB), int(2.54 * GiB))


def calibrate(text: str = GEMMA, utilization: float = 0.85, **kw) -> Calibration:
    args = dict(where="log", model="m", vllm_version="0.21.0", machine="dgx-spark 119.63 GiB", total=int(119.63 * GiB),
                utilization=utilization, flags={"weights": {"tp": "1"}}, graphs_counted=True, source="calibrated",
                date="2026-12-01")  # fmt: skip
    return calibration_from_log(read_log_figures(text), **{**args, **kw})  # type: ignore[arg-type]


def test_what_is_left_of_the_request_is_activation_and_non_torch():
    c = calibrate()
    requested = c.figures["requested"]
    assert (
        requested - c.figures["weights"] - c.figures["cuda_graphs"] - c.figures["kv_memory"]
        == (c.figures["activation_non_torch"])
    )
    # vLLM's own split of it: 1.72 + 2.54 GiB, within the log's rounding of the rest
    assert abs(c.figures["activation_non_torch"] / GiB - (1.72 + 2.54)) < 0.02
    # a vLLM that does not subtract its graph estimate: none taken out
    assert calibrate(graphs_counted=False).figures["cuda_graphs"] == 0


def test_a_log_that_is_not_a_start_up_or_ran_other_flags_is_refused():
    with pytest.raises(UserError, match="Model loading took"):
        calibrate("INFO nothing here\n")
    with pytest.raises(UserError, match=r"--gpu-memory-utilization 0\.85"):
        calibrate(utilization=0.8)


def test_the_store_keeps_the_newest_of_a_key_and_reads_damage_as_empty():
    a = calibrate()
    b = calibrate(date="2026-12-02")
    other = calibrate(flags={"weights": {"tp": "2"}})
    records = with_record(with_record(with_record([], a), other), b)
    assert [r.date for r in records] == ["2026-12-01", "2026-12-02"] and other in records
    assert load_store(dump_store(records)) == records
    for bad in ("", "[]", '{"version": 99, "entries": []}', '{"version": 1, "entries": [{"model": 1}]}', "{"):
        assert load_store(bad) == []
    # the best match agrees on the most terms' flags
    assert best_match(records, "m", "0.21.0", "dgx-spark 119.63 GiB", {"weights": {"tp": "2"}}) == other
    assert best_match(records, "m", "0.22.0", "dgx-spark 119.63 GiB", {"weights": {"tp": "2"}}) is None


def test_differences_and_release_versions():
    assert differences({"a": "1", "b": "2"}, {"a": "1", "b": "3"}) == ["b 2 → 3"]
    assert release_version("0.20.1rc1.dev91+ga749a33d8") == "0.20.1"
    assert release_version("0.1.dev1+g25ab073ef") is None and release_version(None) is None


def test_a_log_whose_args_leave_out_the_utilization_ran_at_its_releases_default():
    # vLLM lists the flags given in "non-default args"; without --gpu-memory-utilization there it took
    # its default: 0.9 to 0.19.1, 0.92 from 0.20.0 (vllm/config/cache.py CacheConfig)
    def log(version: str, args: str = "'max_model_len': 8192") -> str:
        return (
            f"(APIServer pid=1) INFO 10-14 19:22:10 [utils.py:233] non-default args: {{'model': 'm', {args}}}\n"
            f"(EngineCore pid=2) INFO 10-14 19:22:16 [core.py:114] Initializing a V1 LLM engine (v{version}) with "
            "config: model='m', max_seq_len=8192\n"
        )

    assert read_log_figures(log("0.19.1")).utilization == 0.9
    assert read_log_figures(log("0.20.0")).utilization == 0.92
    assert read_log_figures(log("0.20.1rc1.dev91+ga749a33d8")).utilization == 0.92
    assert read_log_figures(log("0.20.0", "'gpu_memory_utilization': 0.8")).utilization == 0.8
    # no args line (an excerpt), or a release the rules do not know: not read
    assert read_log_figures(log("0.20.0").splitlines()[1]).utilization is None
    assert read_log_figures(log("0.1.dev5+g1234")).utilization is None
    # so a calibration with other flags is refused, as when the log names it
    with pytest.raises(UserError, match=r"ran with --gpu-memory-utilization 0\.92, these flags say 0\.9;"):
        calibrate(
            log("0.20.0")
            + GEMMA.replace("'gpu_memory_utilization': 0.85", "").replace(
                "Desired GPU memory utilization is (0.85", "Desired GPU memory utilization is (x"
            ),
            utilization=0.9,
        )


def test_a_damaged_figure_is_refused_naming_its_line_as_grep_counts_it():
    """The last launch of a log two launches long, a progress bar's carriage returns before it, and one
    tensor-parallel rank's KV memory damaged: the line is the file's (grep -n), not the launch's, and the
    \\r of the bar starts no line (str.splitlines would count two)."""
    launch = (
        "(APIServer pid=1) INFO 06-08 11:55:23 [api_server.py:1] vLLM API server version 0.21.0\n"
        "Loading safetensors checkpoint shards:  50% 1/2\rLoading safetensors checkpoint shards: 100% 2/2\n"
        "(EngineCore pid=3) INFO 06-08 12:01:39 [gpu_model_runner.py:1] Model loading took 51.54 GiB memory and "
        "3.2 seconds\n"
        "(Worker_TP0 pid=4) INFO 06-08 12:03:46 [gpu_worker.py:1] Available KV cache memory: 41.66 GiB\n"
        "(Worker_TP1 pid=5) INFO 06-08 12:03:46 [gpu_worker.py:1] Available KV cache memory: {} GiB\n"
    )
    good = read_log_figures(launch.format("40.5"))
    assert good.kv_memory == int(40.5 * GiB)  # the least rank's
    for damaged, said in (("4.0.5", "a memory figure of 4.0.5 GiB"), ("x", "a memory figure of x GiB")):
        with pytest.raises(UserError) as caught:
            read_log_figures(launch.format("40.5") + launch.format(damaged))
        assert str(caught.value) == f"line 10: {said}, which no vLLM prints; give the log vLLM wrote, undamaged"
