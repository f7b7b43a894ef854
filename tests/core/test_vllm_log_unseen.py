"""Real vLLM logs sparktui had not seen (tests/fixtures/vllm-logs/SOURCES.md, "Logs from the unseen-log
check"), each of which read wrong before: every figure checked against the log by hand, through the same
readers inspect-log, --calibrate-from and the log pane use."""

from __future__ import annotations

import json

import pytest

from sparktui.cli import main
from sparktui.core.calibration import calibration_from_log, read_log_figures
from sparktui.core.units import GiB
from sparktui.core.vllm_log import Failure, parse_line, split_line, summarize
from sparktui.errors import UserError
from sparktui.ui.widgets.logview import compact
from tests.support import FIXTURES

LOGS = FIXTURES / "vllm-logs"

# file -> (summary without failure, failure kind); each figure is the line quoted beside it
UNSEEN = {
    "discrete_v0.7-V0_phi-4-bnb_A100-80GB_indented_excerpt.log": (
        # indented four spaces as pasted; the V0 engine's "Model loading took 8.6253 GB" (GiB, labelled GB)
        # and "the rest of the memory reserved for KV Cache is 45.21GiB"; "Maximum concurrency for 512
        # tokens per request: 462.97x"; it ends after "Graph capturing finished"
        dict(version=None, model="/opt/tiger/test0/Phi-4", max_model_len=512, weights_gib=8.6253,
             available_kv_gib=45.21, kv_cache_tokens=None, max_concurrency=462.97, ready=False),
        "log_ended",
    ),
    "discrete_v0.8-V0_unsloth-lora_48GB-GPU_excerpt.log": (
        # "Model loading took 0.5151 GiB"; "the rest of the memory reserved for KV Cache is 34.81GiB";
        # "Maximum concurrency for 32768 tokens per request: 92.82x"
        dict(version=None, model=None, max_model_len=32768, weights_gib=0.5151, available_kv_gib=34.81,
             kv_cache_tokens=None, max_concurrency=92.82, ready=False),
        "log_ended",
    ),
    "discrete_v0.7.3-V0_qwen2.5-bnb-int4_rtx3050-6GB_negative-kv_excerpt.log": (
        # "the rest of the memory reserved for KV Cache is -0.94GiB." (vLLM then raises: no KV memory)
        dict(version=None, model=None, max_model_len=4200, weights_gib=None, available_kv_gib=-0.94,
             kv_cache_tokens=None, max_concurrency=0.0, ready=False),
        "no_kv_memory",
    ),
    "discrete_v0.11.0_gpt-oss-120b_H100_negative-kv_excerpt.log": (
        # "Available KV cache memory: -2.28 GiB", then "EngineCore failed to start" and a traceback cut short
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=-2.28,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "no_kv_memory",
    ),
    "discrete_v0.10.2_qwen3-next-80b-a3b-instruct_tp2-H200_success.log": (
        # two ranks: "Model loading took 74.2812 GiB", "Available KV cache memory: 44.59 GiB" each;
        # "GPU KV cache size: 973,760 tokens"; "Maximum concurrency for 262,144 tokens per request: 14.77x"
        dict(version="0.10.2", model="/data/models/Qwen3-Next-80B-A3B-Instruct", max_model_len=262144,
             weights_gib=74.2812, available_kv_gib=44.59, kv_cache_tokens=973760, max_concurrency=14.77,
             ready=True),
        None,
    ),
    "ray-4node_minimax-m2.5-fp8_excerpt.log": (
        # "(EngineCore pid=89247) (RayWorkerWrapper pid=89561) INFO … Model loading took 13.2 GiB memory"
        dict(version=None, model=None, max_model_len=None, weights_gib=13.2, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "log_ended",
    ),
    "npu_vllm-ascend_worker-died-no-exit-code_excerpt.log": (
        # "ERROR … [multiproc_executor.py:231] Worker proc VllmWorker-0 died unexpectedly, shutting down
        # executor." (no "(exit code: N)" before vLLM printed it), then the engine's traceback, cut
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "worker_died",
    ),
    "spark3x_v0.2x_free-memory-less-than-desired_wrapped_excerpt.log": (
        # "ValueError: Free memory on device cuda:0 (100.94/121.69 GiB) on startup is less" / "than desired
        # GPU memory utilization (0.835, 101.61 GiB)." wrapped as quoted
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "free_memory",
    ),
    "discrete_v0.28.0_wsl2-8GB_free-memory_indented-wrapped_excerpt.log": (
        # the same refusal, indented and wrapped after "on startup is less"
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "free_memory",
    ),
    "compose_v0.8-V0_mqllmengine-dead_serving_excerpt.log": (
        # the V0 engine (0.8.x: "[launcher.py:116]") under docker compose: "CRITICAL … MQLLMEngine is already
        # dead, terminating server process" after the engine's AssertionError
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "engine_dead",
    ),
    "discrete_v0-mqllmengine_engine-process-died_8xH100_excerpt.log": (
        # "ERROR … client.py:282] RuntimeError('Engine process (pid 76) died.')", then the API server stops
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "engine_dead",
    ),
    "slurm-label_v0.10.1_gh200x2-ray-tp8_qwen3-30b-a3b_excerpt.log": (
        # every line led by `srun --label`'s "0: ", then Ray's two prefixes: "GPU KV cache size: 6,167,536
        # tokens"; "Maximum concurrency for 262,144 tokens per request: 23.53x"; "Available KV cache memory:
        # 70.58 GiB [repeated 7x across cluster]"; an offline LLM() run, so no server and no "ready"
        dict(version=None, model="Qwen/Qwen3-30B-A3B-Instruct-2507", max_model_len=262144, weights_gib=None,
             available_kv_gib=70.58, kv_cache_tokens=6167536, max_concurrency=23.53, ready=False),
        "log_ended",
    ),
    "v0.4-api-server_llama-2-7b_gated-repo_quoted.log": (
        # "OSError: You are trying to access a gated repo." … "Repo model meta-llama/Llama-2-7b-hf is gated"
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "model_gated",
    ),
    "v0.8-serve_guided-decoding-backend_bad-argument_quoted.log": (
        # "vllm serve: error: argument --guided-decoding-backend: invalid choice: …" (argparse, then exit 2)
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "bad_argument",
    ),
    "gb10_v0.20.1-ngc_task-embed_unrecognized-argument.log": (
        # "vllm: error: unrecognized arguments: --task embed": the one line a GX10's container printed
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "bad_argument",
    ),
    "discrete_v0.26.0_glm-5.2-nvfp4_tp4-ep_B200_success.log": (
        # "Model loading took 106.69 GiB memory"; "Available KV cache memory: 50.62 GiB"; "GPU KV cache size:
        # 1,139,456 tokens"; "Maximum concurrency for 819,200 tokens per request: 1.39x"; ready
        dict(version="0.26.0", model="/wireless/public/models/GLM-5.2-NVFP4", max_model_len=819200,
             weights_gib=106.69, available_kv_gib=50.62, kv_cache_tokens=1139456, max_concurrency=1.39,
             ready=True),
        None,
    ),
    "gb10_v0.23.1rc1_qwen3.6-27b-nvfp4_mtp2_negative-graph-estimate_excerpt.log": (
        # "Model loading took 20.57 GiB memory"; "Available KV cache memory: 48.6 GiB"; "GPU KV cache size:
        # 1,394,129 tokens"; "Maximum concurrency for 262,144 tokens per request: 5.32x"; "Starting vLLM server"
        dict(version="0.23.1rc1.dev531+ga65f93fb2", model="nvidia/Qwen3.6-27B-NVFP4", max_model_len=262144,
             weights_gib=20.57, available_kv_gib=48.6, kv_cache_tokens=1394129, max_concurrency=5.32, ready=True),
        None,
    ),
    "gb10_v0.20.0_qwen3.6-35b-a3b-nvfp4-redhat_mtp2_negative-graph-estimate_excerpt.log": (
        # "Model loading took 23.43 GiB memory"; "Available KV cache memory: 66.37 GiB"; "GPU KV cache size:
        # 1,581,104 tokens"; "… 21.86x"; cut at "Supported tasks", before the server listens
        dict(version="0.20.0", model="RedHatAI/Qwen3.6-35B-A3B-NVFP4", max_model_len=262144, weights_gib=23.43,
             available_kv_gib=66.37, kv_cache_tokens=1581104, max_concurrency=21.86, ready=False),
        "log_ended",
    ),
    "markdown-quoted_v0.20.1rc_gemma-4-26b-a4b_spark-vllm-docker-217_excerpt.log": (
        # every line quoted as Markdown, "> (EngineCore pid=136) INFO … Model loading took 25.67 GiB memory …"
        dict(version=None, model=None, max_model_len=None, weights_gib=25.67, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "log_ended",
    ),
    "jetson-jp6_v0-engine_nvml-assert-oom_quoted.log": (
        # 'NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp":1131':
        # the caching allocator's out-of-memory message, which cannot list processes on unified memory
        dict(version=None, model=None, max_model_len=None, weights_gib=None, available_kv_gib=None,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "cuda_oom",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(UNSEEN))
def test_each_unseen_log_reads_as_its_lines_say(name):
    summary = summarize((LOGS / name).read_text().splitlines(keepends=True))
    expected, kind = UNSEEN[name]
    got = summary.to_dict()
    failure = got.pop("failure")
    assert got == expected
    assert (failure or {}).get("kind") == kind


@pytest.mark.parametrize("name", sorted(UNSEEN))
def test_inspect_log_prints_the_same(name, capsys):
    assert main(["inspect-log", str(LOGS / name), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got.pop("failure") or {}).get("kind") == UNSEEN[name][1]
    # the keys recorded before inspect-log's JSON gained the phase and launch count its text shows
    assert {key: got[key] for key in UNSEEN[name][0]} == UNSEEN[name][0]
    assert set(got) - set(UNSEEN[name][0]) == {"phase", "reached", "launches"}


def test_a_log_that_ends_at_a_negative_kv_figure_is_named_a_memory_failure(capsys):
    assert main(["inspect-log", str(LOGS / "discrete_v0.11.0_gpt-oss-120b_H100_negative-kv_excerpt.log")]) == 0
    out = capsys.readouterr().out
    assert "KV cache memory  -2.28 GiB" in out and "no_kv_memory" in out and "failed during kv cache" in out
    assert "raise --gpu-memory-utilization" in out


def test_the_v0_split_is_read_with_its_signs_for_calibration():
    # "non_torch_memory takes -0.51GiB; PyTorch activation peak memory takes 1.42GiB;" on a 6.00 GiB card
    f = read_log_figures((LOGS / "discrete_v0.7.3-V0_qwen2.5-bnb-int4_rtx3050-6GB_negative-kv_excerpt.log").read_text())
    assert f.non_torch == int(-0.51 * GiB) and f.torch_peak == int(1.42 * GiB)
    assert f.kv_memory == int(-0.94 * GiB) and f.total == int(6.00 * GiB) and f.utilization == 0.90
    phi = read_log_figures((LOGS / "discrete_v0.7-V0_phi-4-bnb_A100-80GB_indented_excerpt.log").read_text())
    assert phi.weights == int(8.6253 * GiB) and phi.kv_memory == int(45.21 * GiB)
    assert phi.total == int(79.15 * GiB) and phi.utilization == 0.70
    assert phi.torch_peak == int(1.16 * GiB) and phi.non_torch == int(0.09 * GiB)


def test_a_start_up_with_no_kv_memory_is_not_taken_as_a_calibration():
    text = "Model loading took 5.43 GiB and 9.1 seconds\nAvailable KV cache memory: -0.94 GiB\n"
    with pytest.raises(UserError, match=r"found no memory for the KV cache \(Available KV cache memory: -0.94 GiB\)"):
        calibration_from_log(
            read_log_figures(text), where="x.log", model="m", vllm_version="0.11.0", machine="m", total=6 * GiB, utilization=0.9,
            flags={}, graphs_counted=False, source="calibrated", date="2026-12-02",
        )  # fmt: skip


@pytest.mark.parametrize("name", ["tiny-llama-config.json", "metrics_final.txt"])
def test_a_file_that_is_not_a_vllm_log_is_a_user_error(name, capsys):
    # a model's config.json and vLLM's own /metrics text: text files, not what `vllm serve` printed
    assert main(["inspect-log", str(FIXTURES / "vllm-cpu" / name)]) == 2
    err = capsys.readouterr().err
    assert "is not a vLLM log" in err and "Traceback" not in err


def test_a_ray_workers_two_prefixes_are_cut_for_the_parser_and_the_log_pane():
    line = (
        "(EngineCore pid=89247) (RayWorkerWrapper pid=164889, ip=172.20.4.203) INFO 04-01 11:25:14 "
        "[gpu_model_runner.py:4566] Model loading took 13.2 GiB memory and 148.493862 seconds"
    )
    assert [type(e).__name__ for e in parse_line(line)] == ["WeightsLoaded"]
    shown, dim = compact(line)
    assert shown == "11:25:14 engine Model loading took 13.2 GiB memory and 148.493862 seconds" and dim == 16


def failures(line: str) -> list[Failure]:
    return [e for e in parse_line(line) if isinstance(e, Failure)]


def test_a_worker_that_died_before_vllm_printed_exit_codes_is_named():
    [failure] = failures(
        "(EngineCore_DP0 pid=265) ERROR 02-27 10:31:24 [multiproc_executor.py:231] Worker proc VllmWorker-0 died "
        "unexpectedly, shutting down executor."
    )
    assert failure.kind == "worker_died" and "VllmWorker-0 died, exit code not in the log" in failure.message
    [ray] = failures(
        "ERROR 05-01 10:00:00 [ray_executor_v2.py:464] RayWorkerProc rank=[3] died unexpectedly, shutting down executor."
    )
    assert ray.kind == "worker_died" and "rank=[3] died" in ray.message


def test_a_v0_engine_that_dies_while_serving_is_a_crash_after_ready():
    from sparktui.core.vllm_log import LogSummary

    summary = LogSummary()
    summary.feed_lines(["INFO:     Application startup complete.\n"])
    assert summary.ready
    lines = (LOGS / "compose_v0.8-V0_mqllmengine-dead_serving_excerpt.log").read_text().splitlines(keepends=True)
    summary.feed_serving(lines)  # the panel's reader once start-up has completed
    assert summary.failure is not None and summary.failure.kind == "engine_dead"


def test_a_gated_repo_is_named_with_what_to_do():
    [gated] = failures(
        "(APIServer pid=1) ERROR 05-01 10:00:00 [api_server.py:1] huggingface_hub.errors.GatedRepoError: 403 Client "
        "Error. Access to model meta-llama/Llama-3.1-8B is restricted and you are not in the authorized list."
    )
    assert gated.kind == "model_gated"
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B" in gated.hint and "HF_TOKEN" in gated.hint


@pytest.mark.parametrize(
    "name",
    ["discrete_v0.7-V0_phi-4-bnb_A100-80GB_indented_excerpt.log", "discrete_v0.8-V0_unsloth-lora_48GB-GPU_excerpt.log"],
)
def test_a_v0_calibration_takes_the_request_the_log_prints(name):
    # "x gpu_memory_utilization (0.70) = 55.09GiB" on 79.15 GiB: the fraction is rounded (0.70 × 79.15 = 55.41),
    # so the rest of the request (activation + non-torch) is what the log's own split says it is
    f = read_log_figures((LOGS / name).read_text())
    assert f.utilization is not None and f.total is not None
    c = calibration_from_log(
        f, where=name, model="m", vllm_version="0.10.0", machine="m", total=f.total,
        utilization=f.utilization, flags={}, graphs_counted=False, source="calibrated", date="2026-12-02",
    )  # fmt: skip
    assert c.figures["requested"] == f.requested
    assert f.torch_peak is not None and f.non_torch is not None
    assert abs(c.figures["activation_non_torch"] - (f.torch_peak + f.non_torch)) < 0.01 * GiB


def test_a_line_written_after_a_progress_bar_frame_is_read_as_its_own():
    # tqdm's frame has no newline: the engine's next line continues it (the GLM-5.2 B200 log)
    glued = next(
        line
        for line in (LOGS / "discrete_v0.26.0_glm-5.2-nvfp4_tp4-ep_B200_success.log").read_text().splitlines()
        if line.startswith("Capturing CUDA graphs (decode, FULL):")
    )
    assert split_line(glued) == (
        "EngineCore",
        "INFO",
        "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes "
        "are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).",
    )
    assert compact(glued)[0].startswith("17:27:38 engine No available shared memory broadcast block")
    # and a typed ^C before the engine's line
    assert split_line("^C(EngineCore pid=4775) INFO 06-04 12:30:26 [core.py:1266] Shutdown initiated (timeout=0)")[
        0:2
    ] == (
        "EngineCore",
        "INFO",
    )


@pytest.mark.parametrize(
    "line, shown",
    [
        # docker compose's service prefix, a loguru time, srun's label: the log pane reads past them as the parser does
        ("vllm-llm-1  | CRITICAL 03-30 02:15:01 [launcher.py:116] MQLLMEngine is already dead, terminating server process",
         "02:15:01 MQLLMEngine is already dead, terminating server process"),
        ("2026-05-01 19:57:53.560 | (APIServer pid=1) INFO 05-01 17:57:53 [utils.py:233] non-default args: {}",
         "17:57:53 non-default args: {}"),
        ("0: (EngineCore_0 pid=132079) INFO 10-08 13:12:44 [kv_cache_utils.py:849] GPU KV cache size: 6,167,536 tokens",
         "13:12:44 engine GPU KV cache size: 6,167,536 tokens"),
        ("    INFO 07-02 17:08:01 [model_runner.py:1146] Model loading took 8.6253 GB and 7.670299 seconds",
         "17:08:01 Model loading took 8.6253 GB and 7.670299 seconds"),
    ],
)  # fmt: skip
def test_the_log_pane_shortens_what_other_tools_put_before_the_line(line, shown):
    assert compact(line)[0] == shown


@pytest.mark.parametrize(
    "argv", [["inspect-log"], ["fit", "--offline", "--model", "openai/gpt-oss-20b", "--calibrate-from"]]
)
def test_a_named_pipe_is_refused_not_waited_on(argv, tmp_path, capsys, isolated):
    # opening a FIFO nobody writes to waits for ever: both readers of a log file refuse it first
    import os
    import signal

    fifo = tmp_path / "vllm.log"
    os.mkfifo(fifo)

    def hung(*_):
        raise TimeoutError("opening the named pipe hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        assert main([*argv, str(fifo)]) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "is a named pipe, not a log file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, graphs",
    [
        ("gb10_v0.23.1rc1_qwen3.6-27b-nvfp4_mtp2_negative-graph-estimate_excerpt.log", -0.81),
        ("gb10_v0.20.0_qwen3.6-35b-a3b-nvfp4-redhat_mtp2_negative-graph-estimate_excerpt.log", -0.87),
    ],
)
def test_a_negative_cuda_graph_estimate_is_calibrated_with_its_sign(name, graphs):
    # on a GB10, "Estimated CUDA graph memory: -0.81 GiB total": vLLM subtracts it (so adds 0.81 GiB to the KV
    # cache); read as nothing, the calibration put it in the activation term, which then outlives a changed flag
    text = (LOGS / name).read_text()
    f = read_log_figures(text)
    assert f.graphs == int(graphs * GiB)
    c = calibration_from_log(
        f, where=name, model="m", vllm_version="0.23.1", machine="m", total=int(119.63 * GiB),
        utilization=f.utilization or 0.0, flags={}, graphs_counted=True, source="calibrated", date="2026-12-02",
    )  # fmt: skip
    assert c.figures["cuda_graphs"] == int(graphs * GiB)
    f_kv, f_w = f.kv_memory or 0, f.weights or 0
    assert c.figures["activation_non_torch"] == c.figures["requested"] - f_w - f_kv - int(graphs * GiB)


def test_a_file_with_two_launches_is_summarised_by_the_last(capsys, tmp_path):
    # mrpid12org/imageworks' nohup.out holds a launch refused for free memory (its lines 1-151, one fixture)
    # and the next launch, which started (lines 152-252, the other): the file as it was, both in order
    nohup = tmp_path / "nohup.out"
    nohup.write_bytes(
        (LOGS / "discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_free-memory-less-than-desired_fail.log").read_bytes()
        + (LOGS / "discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_success.log").read_bytes()
    )
    summary = summarize(nohup.read_text().splitlines(keepends=True))
    assert summary.ready and summary.failure is None and summary.phase == "ready" and summary.launches == 2
    assert summary.available_kv_gib == 8.99 and summary.kv_cache_tokens == 18400
    assert main(["inspect-log", str(nohup)]) == 0
    out = capsys.readouterr().out
    assert "launches         2 in this file: the figures are of the last" in out and "free_memory" not in out


def test_calibration_reads_the_last_launch_of_a_file_as_inspect_log_does():
    # a log appended by every launch: vLLM 0.10.2's Qwen3-Next on two H200s, then llava on a 16 GB GPU
    first = (LOGS / "discrete_v0.10.2_qwen3-next-80b-a3b-instruct_tp2-H200_success.log").read_text()
    last = (LOGS / "discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_success.log").read_text()
    both = read_log_figures(first + last)
    assert both == read_log_figures(last) != read_log_figures(first)
    summary = summarize((first + last).splitlines(keepends=True))
    assert summary.launches == 2 and int(summary.available_kv_gib * GiB) == both.kv_memory


def test_calibration_takes_the_smallest_ranks_kv_memory_as_vllm_sizes_by():
    lines = (
        "(VllmWorker TP1 pid=12) INFO 10-23 15:14:30 [gpu_worker.py:298] Available KV cache memory: 44.59 GiB\n"
        "(VllmWorker TP0 pid=11) INFO 10-23 15:14:30 [gpu_worker.py:298] Available KV cache memory: 43.10 GiB\n"
    )
    assert read_log_figures(lines).kv_memory == int(43.10 * GiB)
    assert summarize(lines.splitlines(keepends=True)).available_kv_gib == 43.10
