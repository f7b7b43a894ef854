"""vLLM log parsing: every fixture log, summary values checked by reading the logs by hand."""

from __future__ import annotations

import json
import typing

import pytest

from sparktui.core import vllm_log as vl
from sparktui.core.vllm_log import LogSummary, parse_line, split_line, summarize

LOGS = "vllm-logs"
CPU = "vllm-cpu"

# file -> expected summary (without failure) and expected failure kind.
# Each value was read off the log: the line it comes from is quoted in the comment.
EXPECTED = {
    f"{LOGS}/discrete_v0.8.5.post1_deepseek-r1-distill-qwen-14b_unknownGPU_success.log": (
        # "vLLM API server version 0.8.5.post1"; engine config "max_seq_len=32768";
        # "Model loading took 27.5916 GiB and 4.056921 seconds"; no "Available KV cache memory" in 0.8.5;
        # "GPU KV cache size: 32,832 tokens"; "Maximum concurrency for 32,768 tokens per request: 1.00x"
        dict(version="0.8.5.post1", model="/opt/llm/deepseek-r1-14b", max_model_len=32768, weights_gib=27.5916,
             available_kv_gib=None, kv_cache_tokens=32832, max_concurrency=1.00, ready=True),
        None,
    ),
    f"{LOGS}/discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_free-memory-less-than-desired_fail.log": (
        # "ValueError: Free memory on device (13.58/15.99 GiB) on startup is less than desired GPU memory
        # utilization (0.85, 13.59 GiB)" before any weights were loaded
        dict(version="0.10.2", model="/home/stewa/ai-models/weights/ybelkada/llava-1.5-7b-hf-awq",
             max_model_len=4096, weights_gib=None, available_kv_gib=None, kv_cache_tokens=None,
             max_concurrency=None, ready=False),
        "free_memory",
    ),
    f"{LOGS}/discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_success.log": (
        # "Model loading took 4.2530 GiB"; "Available KV cache memory: 8.99 GiB"; "GPU KV cache size: 18,400
        # tokens"; "Maximum concurrency for 4,096 tokens per request: 4.49x"
        dict(version="0.10.2", model="/home/stewa/ai-models/weights/ybelkada/llava-1.5-7b-hf-awq",
             max_model_len=4096, weights_gib=4.2530, available_kv_gib=8.99, kv_cache_tokens=18400,
             max_concurrency=4.49, ready=True),
        None,
    ),
    f"{LOGS}/discrete_v0.11.0_llama-3.1-8b-instruct_L4_success.log": (
        dict(version="0.11.0", model="meta-llama/Meta-Llama-3.1-8B-Instruct", max_model_len=32000,
             weights_gib=14.9889, available_kv_gib=4.75, kv_cache_tokens=38944, max_concurrency=1.22, ready=True),
        None,
    ),
    f"{LOGS}/discrete_v0.13.0_qwen2.5-14b-instruct-awq_A5000_success.log": (
        # 0.13 says "Model loading took 9.3795 GiB memory and 854.112029 seconds"
        dict(version="0.13.0", model="Qwen/Qwen2.5-14B-Instruct-AWQ", max_model_len=8192, weights_gib=9.3795,
             available_kv_gib=10.39, kv_cache_tokens=56736, max_concurrency=6.93, ready=True),
        None,
    ),
    f"{LOGS}/nonexistent-model_v0.8.x_excerpt_vllm-issue-13510.log": (
        # only the ValueError names the model
        dict(version=None, model="neuralmagic/Meta-Llama-3-8B-Instruct-FP8-dynamic", max_model_len=None,
             weights_gib=None, available_kv_gib=None, kv_cache_tokens=None, max_concurrency=None, ready=False),
        "model_not_found",
    ),
    f"{LOGS}/nonexistent-model_vllm0.12-omni_excerpt_vllm-omni-issue-541.log": (
        dict(version=None, model="Qwen/Qwen-Image-Edit-2509", max_model_len=None, weights_gib=None,
             available_kv_gib=None, kv_cache_tokens=None, max_concurrency=None, ready=False),
        "model_not_found",
    ),
    f"{LOGS}/spark_v0.13.0-nv26.01_gpt-oss-20b-mxfp4-derivative_success.log": (
        # NGC banner says "vLLM Version 0.13.0+faa43dbf"; the API server line is more exact:
        # "vLLM API server version 0.13.0+faa43dbf.nv26.01"
        dict(version="0.13.0+faa43dbf.nv26.01", model="huihui-ai/Huihui-gpt-oss-20b-mxfp4-abliterated-v2",
             max_model_len=8192, weights_gib=13.7193, available_kv_gib=12.94, kv_cache_tokens=282624,
             max_concurrency=54.44, ready=True),
        None,
    ),
    f"{LOGS}/spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log": (
        # "Model loading took 95.46 GiB memory"; "Available KV cache memory: 8.72 GiB"; then the ValueError
        dict(version="0.25.1", model="poolside/Laguna-S-2.1-INT4", max_model_len=262144, weights_gib=95.46,
             available_kv_gib=8.72, kv_cache_tokens=None, max_concurrency=None, ready=False),
        "kv_too_small",
    ),
    f"{LOGS}/spark_v0.25.1_laguna-s-2.1-nvfp4-dflash_success.log": (
        # "Using max model len 65536" for the target, then 1048576 for the DFlash drafter (overridden
        # back to 65536): the engine's max_seq_len=65536 is the one served
        dict(version="0.25.1", model="poolside/Laguna-S-2.1-NVFP4", max_model_len=65536, weights_gib=95.63,
             available_kv_gib=6.97, kv_cache_tokens=94135, max_concurrency=1.44, ready=True),
        None,
    ),
    f"{LOGS}/spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log": (
        # the log stops after "torch.compile took 30.61 s in total", no error: the log alone cannot say
        # it was killed (SOURCES.md knows that from the README, not from the log)
        dict(version="0.25.1", model="poolside/Laguna-S-2.1-NVFP4", max_model_len=65536, weights_gib=95.63,
             available_kv_gib=None, kv_cache_tokens=None, max_concurrency=None, ready=False),
        "log_ended",
    ),
    f"{LOGS}/spark_v0.20.1_gemma-4-26b-a4b-nvfp4-dflash_success.log": (
        # the target and the DFlash drafter are both "/models/…" folders; "Model loading took 17.17 GiB";
        # "Available KV cache memory: 65.25 GiB"; "GPU KV cache size: 519,920 tokens"; 1.98x at 262,144
        dict(version="0.20.1", model="/models/target", max_model_len=262144, weights_gib=17.17,
             available_kv_gib=65.25, kv_cache_tokens=519920, max_concurrency=1.98, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g101584af0_qwen3.6-35b-a3b-nvfp4-dflash_success.log": (
        # target and drafter are /models/… folders; "GPU KV cache size: 582,832 tokens"; 4.71x at 262,144
        dict(version="0.20.1.dev0+g101584af0.d20260424", model="/models/target", max_model_len=262144,
             weights_gib=22.84, available_kv_gib=62.31, kv_cache_tokens=582832, max_concurrency=4.71, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g6804e1b81_qwen3.6-35b-a3b-nvfp4-dflash_success.log": (
        dict(version="0.1.dev1+g6804e1b81", model="/models/target", max_model_len=262144, weights_gib=22.84,
             available_kv_gib=63.23, kv_cache_tokens=1251446, max_concurrency=4.77, ready=True),
        None,
    ),
    f"{LOGS}/spark_v0.20.0_gemma-4-26b-a4b-it_bf16_success.log": (
        # "Model loading took 48.5 GiB"; "Available KV cache memory: 40.61 GiB"; "GPU KV cache size:
        # 177,440 tokens"; "Maximum concurrency for 8,192 tokens per request: 35.75x"
        dict(version="0.20.0", model="google/gemma-4-26B-A4B-it", max_model_len=8192, weights_gib=48.5,
             available_kv_gib=40.61, kv_cache_tokens=177440, max_concurrency=35.75, ready=True),
        None,
    ),
    f"{LOGS}/spark_v0.20.0_gemma-4-26b-a4b-it-qat-unquantized_success.log": (
        dict(version="0.20.0", model="google/gemma-4-26B-A4B-it-qat-q4_0-unquantized", max_model_len=8192,
             weights_gib=48.5, available_kv_gib=44.03, kv_cache_tokens=192368, max_concurrency=38.76, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-3-12b-it_bf16_success.log": (
        # a source build: the banner says "version 0.1.dev1+g9759e3b06"
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-3-12b-it", max_model_len=8192, weights_gib=22.62,
             available_kv_gib=59.15, kv_cache_tokens=335944, max_concurrency=41.01, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-3-12b-it_fp8kv_success.log": (
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-3-12b-it", max_model_len=8192, weights_gib=22.62,
             available_kv_gib=54.43, kv_cache_tokens=618254, max_concurrency=75.47, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-4-26b-a4b-it_bf16_success.log": (
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-4-26B-A4B-it", max_model_len=8192,
             weights_gib=47.47, available_kv_gib=33.72, kv_cache_tokens=370652, max_concurrency=45.25, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-4-26b-a4b-it_fp8kv_success.log": (
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-4-26B-A4B-it", max_model_len=8192,
             weights_gib=47.47, available_kv_gib=34.39, kv_cache_tokens=756092, max_concurrency=92.3, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log": (
        dict(version="0.1.dev1+g25ab073ef", model="google/gemma-3-27b-it", max_model_len=131072,
             weights_gib=51.54, available_kv_gib=41.66, kv_cache_tokens=884276, max_concurrency=6.75, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-4-31b-it_bf16_success.log": (
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-4-31B-it", max_model_len=8192, weights_gib=57.91,
             available_kv_gib=22.16, kv_cache_tokens=60886, max_concurrency=7.43, ready=True),
        None,
    ),
    f"{LOGS}/spark_vdev-g9759e3b06_gemma-4-31b-it_fp8kv_success.log": (
        dict(version="0.1.dev1+g9759e3b06", model="google/gemma-4-31B-it", max_model_len=8192, weights_gib=57.91,
             available_kv_gib=22.18, kv_cache_tokens=121873, max_concurrency=14.88, ready=True),
        None,
    ),
    f"{LOGS}/discrete_v0.23.0_qwen3.6-27b-nvfp4-mtp3_tp2-2x5060ti_success.log": (
        # tensor-parallel 2: the weights and KV memory it prints are one rank's
        dict(version="0.23.0", model="/data/models/qwen3.6-27b-text-nvfp4-mtp", max_model_len=65535, weights_gib=9.43,
             available_kv_gib=2.06, kv_cache_tokens=97684, max_concurrency=1.49, ready=True),
        None,
    ),
    f"{LOGS}/discrete_v0.19.1_nemotron-cascade-2-30b-a3b-nvfp4_excerpt.log": (
        # selected lines only: no engine banner (so no version) and no "Application startup complete"
        dict(version=None,
             model="/scratch-shared/dlindberg/hf_cache/hub/models--chankhavu--Nemotron-Cascade-2-30B-A3B-NVFP4/"
                   "snapshots/80ee3ccfe8cb5eb019a0cde78449e8b197a0155f",
             max_model_len=262144, weights_gib=18.03, available_kv_gib=68.97, kv_cache_tokens=4819104,
             max_concurrency=86.16, ready=False),
        "log_ended",
    ),
    f"{LOGS}/discrete_v0.20.1rc1_nemotron-cascade-2-30b-a3b-nvfp4_rtx5090_excerpt.log": (
        # selected lines, cut after the KV lines (it went on to serve: graph capture, autotuning)
        dict(version="0.20.1rc1.dev91+ga749a33d8", model="chankhavu/Nemotron-Cascade-2-30B-A3B-NVFP4",
             max_model_len=256000, weights_gib=18.54, available_kv_gib=3.72, kv_cache_tokens=1206303,
             max_concurrency=4.71, ready=False),
        "log_ended",
    ),
    f"{LOGS}/discrete_v0.31.0_llama-3.1-8b-instruct_A100-80GB_excerpt.log": (
        # five lines quoted in a study note: no banner, no engine config, cut after the KV line; the
        # length from "GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request"
        dict(version=None, model=None, max_model_len=131072, weights_gib=15.0, available_kv_gib=56.21,
             kv_cache_tokens=460496, max_concurrency=3.51, ready=False),
        "log_ended",
    ),
    f"{LOGS}/spark_v0.20.0_qwen3.6-35b-a3b-nvfp4-redhat_fp8kv_excerpt.log": (
        dict(version="0.20.0", model="RedHatAI/Qwen3.6-35B-A3B-NVFP4", max_model_len=65536, weights_gib=21.86,
             available_kv_gib=82.42, kv_cache_tokens=2158880, max_concurrency=108.50, ready=False),
        "log_ended",
    ),
    f"{LOGS}/spark_v0.22.0_qwen3.6-35b-a3b-prismaquant-mtp3_excerpt.log": (
        # selected lines: no banner, no engine-config line (so no version), no "Application startup
        # complete"; the length from "Maximum concurrency for 200,000 tokens per request: 15.66x"
        dict(version=None, model="rdtand/Qwen3.6-35B-A3B-PrismaQuant-4.75bit-vllm", max_model_len=200000,
             weights_gib=21.42, available_kv_gib=71.15, kv_cache_tokens=3131683, max_concurrency=15.66, ready=False),
        "log_ended",
    ),
    f"{LOGS}/spark2x_v0.30.0_qwen3.8-flash-next-nvfp4_nnodes2-rank1-headless_excerpt.log": (
        # a two-Spark --nnodes 2 start-up, the worker's headless rank 1 (selected lines): no API server,
        # so no banner and no "Application startup complete"; the version from "Launching vLLM
        # (v0.30.0) headless multiproc executor"; "Using max model len 262144"; one rank's
        # "Model loading took 62.66 GiB" and "Available KV cache memory: 25.37 GiB"
        dict(version="0.30.0", model=None, max_model_len=262144, weights_gib=62.66, available_kv_gib=25.37,
             kv_cache_tokens=None, max_concurrency=None, ready=False),
        "log_ended",
    ),
    f"{CPU}/startup_FAIL_default_kv_memutil.log": (
        # "ValueError: Available memory on node 0 (7.28/8.59 GiB) on startup is less than desired CPU
        # memory utilization (0.92, 7.9 GiB)"
        dict(version="0.32.0", model="/srv/models/tiny-llama", max_model_len=512, weights_gib=None,
             available_kv_gib=None, kv_cache_tokens=None, max_concurrency=None, ready=False),
        "free_memory",
    ),
    f"{CPU}/startup_float32_eager.log": (
        # the same flags with --dtype float32: every KV element 4 bytes, half the tokens
        dict(version="0.32.0", model="/tmp/fit20-vllm/tiny-llama", max_model_len=512, weights_gib=None,
             available_kv_gib=0.06, kv_cache_tokens=65536, max_concurrency=128.00, ready=True),
        None,
    ),
    f"{CPU}/startup_final_eager.log": (
        # CPU runner prints no "Model loading took"; "Explicitly set (0.06/9.46) GiB for KV cache";
        # "CPU KV cache size: 131,072 tokens, Maximum concurrency for 512 tokens per request: 256.00x"
        dict(version="0.32.0", model="/srv/models/tiny-llama", max_model_len=512, weights_gib=None,
             available_kv_gib=0.06, kv_cache_tokens=131072, max_concurrency=256.00, ready=True),
        None,
    ),
    f"{CPU}/startup_torchcompile.log": (
        dict(version="0.32.0", model="/srv/models/tiny-llama", max_model_len=512, weights_gib=None,
             available_kv_gib=1.0, kv_cache_tokens=2097152, max_concurrency=4096.00, ready=True),
        None,
    ),
}  # fmt: skip


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
        return fh.readlines()


def test_table_covers_every_fixture_log(fixtures):
    from tests.core.test_vllm_log_unseen import UNSEEN  # the unseen-log check's logs, checked there

    on_disk = {f"{p.parent.name}/{p.name}" for d in (LOGS, CPU) for p in (fixtures / d).glob("*.log")}
    assert on_disk == set(EXPECTED) | {f"{LOGS}/{name}" for name in UNSEEN}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_summary(fixtures, name):
    expected, failure_kind = EXPECTED[name]
    summary = summarize(read_lines(fixtures / name))
    got = summary.to_dict()
    assert list(got) == [
        "version", "model", "max_model_len", "weights_gib", "available_kv_gib",
        "kv_cache_tokens", "max_concurrency", "ready", "failure",
    ]  # fmt: skip
    failure = got.pop("failure")
    assert got == expected
    if failure_kind is None:
        assert failure is None
        assert summary.phase == "ready"
    else:
        assert failure["kind"] == failure_kind
        assert failure["message"] and failure["hint"]
        assert summary.phase == "failed"
    json.dumps(summary.to_dict())  # JSON-ready


def phases_of(lines):
    summary = LogSummary()
    seen = []
    for line in lines:
        for ev in summary.feed(line):
            if isinstance(ev, vl.PhaseChanged):
                seen.append(ev.phase)
    seen.extend(ev.phase for ev in summary.finish() if isinstance(ev, vl.PhaseChanged))
    return seen


def test_phases_of_a_gpu_start(fixtures):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-nvfp4-dflash_success.log")
    assert phases_of(lines) == ["loading_weights", "profiling", "kv_cache", "cuda_graphs", "ready"]


def test_phases_of_an_eager_cpu_start(fixtures):
    lines = read_lines(fixtures / CPU / "startup_final_eager.log")
    assert phases_of(lines) == ["loading_weights", "kv_cache", "ready"]


def test_phases_of_a_killed_start(fixtures):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log")
    assert phases_of(lines) == ["loading_weights", "profiling", "failed"]


def test_specific_failure_wins_over_engine_init_failed(fixtures):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log")
    kinds = [ev.kind for line in lines for ev in parse_line(line) if isinstance(ev, vl.Failure)]
    assert kinds[0] == "kv_too_small" and kinds[-1] == "engine_init_failed"
    failure = summarize(lines).failure
    assert failure.kind == "kv_too_small"
    assert "121840" in failure.hint and "--max-model-len 121840" in failure.hint
    assert failure.message.startswith("ValueError: To serve at least one request")


def test_free_memory_hint_on_gpu_suggests_drop_caches_and_a_lower_utilization(fixtures):
    name = "discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_free-memory-less-than-desired_fail.log"
    failure = summarize(read_lines(fixtures / LOGS / name)).failure
    assert vl.DROP_CACHES in failure.hint
    # 13.58 free of 15.99: 0.849..., so 0.84 fits
    assert "13.59 GiB" in failure.hint and "13.58 GiB" in failure.hint and "0.84" in failure.hint


def test_still_growing_log_is_not_called_killed(fixtures):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log")
    summary = summarize(lines, finished=False)
    assert summary.failure is None and summary.phase == "profiling"


# ---------------------------------------------------------------- line level

APISERVER = "\x1b[1;36m(APIServer pid=943457)\x1b[0;0m "
ENGINE = "\x1b[1;36m(EngineCore_DP0 pid=943603)\x1b[0;0m "


def only(line, kind):
    events = [ev for ev in parse_line(line) if isinstance(ev, kind)]
    assert len(events) == 1, events
    return events[0]


def test_split_line_strips_colour_prefix_level_and_carriage_returns():
    assert split_line(APISERVER + "INFO 09-30 18:37:06 [api_server.py:1971] Starting vLLM API server 0 on x\n") == (
        "APIServer", "INFO", "Starting vLLM API server 0 on x",
    )  # fmt: skip
    assert split_line("INFO:     Application startup complete.\n") == (None, "INFO", "Application startup complete.")
    bar = (
        ENGINE
        + "\rCapturing CUDA graphs (decode, FULL):   0%| 0/19\rCapturing CUDA graphs (decode, FULL): 100%| 19/19\n"
    )
    assert split_line(bar) == ("EngineCore_DP0", None, "Capturing CUDA graphs (decode, FULL): 100%| 19/19")
    assert split_line("\x1b[2K\x1b[32mINFO\x1b[0m:     Application startup complete.") == (
        None, "INFO", "Application startup complete.",
    )  # fmt: skip
    assert split_line("(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231] EngineCore failed to start.\r\n") == (
        "EngineCore", "ERROR", "EngineCore failed to start.",
    )  # fmt: skip


@pytest.mark.parametrize(
    "line, expected",
    [
        ("INFO 05-12 02:45:15 [api_server.py:1043] vLLM API server version 0.8.5.post1", vl.Version("0.8.5.post1", "api_server")),
        ("(APIServer pid=23283) INFO 08-01 20:59:09 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.25.1\r", vl.Version("0.25.1", "banner")),
        ("vLLM Version 0.13.0+faa43dbf", vl.Version("0.13.0+faa43dbf", "container")),
        ("INFO 09-30 19:50:06 [serve.py:221] Launching vLLM (v0.30.0) headless multiproc executor, with head node "
         "address 10.100.8.1:29523 for torch.distributed process group.", vl.Version("0.30.0", "headless")),
    ],
)  # fmt: skip
def test_version_lines(line, expected):
    assert only(line, vl.Version) == expected


def test_model_lines():
    banner = "(APIServer pid=1) INFO 08-01 20:59:09 [api_utils.py:339]   █▄█▀ █     █     █     █  model   poolside/Laguna-S-2.1-NVFP4\r"
    assert only(banner, vl.Model) == vl.Model("poolside/Laguna-S-2.1-NVFP4", "banner")
    args = "(APIServer pid=4394) INFO 10-14 19:22:10 [utils.py:233] non-default args: {'model': 'meta-llama/Meta-Llama-3.1-8B-Instruct', 'trust_remote_code': True, 'max_model_len': 32000}"
    assert only(args, vl.Model) == vl.Model("meta-llama/Meta-Llama-3.1-8B-Instruct", "args")
    assert only(args, vl.MaxModelLen) == vl.MaxModelLen(32000, "args")


@pytest.mark.parametrize(
    "lines",
    [
        # 0.28 on (here 0.31's kv_cache_utils.py update_kv_cache_capacity): one line
        ["(EngineCore pid=326) INFO 10-06 17:00:33 [kv_cache_utils.py:2464] GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request: 3.51x"],
        # 0.10 to 0.27: two lines
        ["(EngineCore pid=1) INFO 09-30 18:37:01 [kv_cache_utils.py:864] GPU KV cache size: 460,496 tokens",
         "(EngineCore pid=1) INFO 09-30 18:37:01 [kv_cache_utils.py:868] Maximum concurrency for 131,072 tokens per request: 3.51x"],
    ],
)  # fmt: skip
def test_max_model_len_from_the_kv_capacity_line(lines):
    # vLLM prints model_config.max_model_len there once the KV cache is sized: the length it runs with
    alone = LogSummary()
    for line in lines:
        alone.feed(line)
    assert (alone.max_model_len, alone.kv_cache_tokens, alone.max_concurrency) == (131072, 460496, 3.51)
    # the KV line is printed last (after --max-model-len -1 is resolved): its length wins
    auto = LogSummary()
    auto.feed(
        "(EngineCore pid=2) INFO 08-01 20:59:16 [core.py:114] Initializing a V1 LLM engine (v0.31.0) with config: model='m', max_seq_len=1048576, x=1"
    )
    assert auto.max_model_len == 1048576
    for line in lines:
        auto.feed(line)
    assert auto.max_model_len == 131072
    # a "Maximum concurrency" with no length (never printed so) leaves the engine's value alone
    other = LogSummary()
    other.feed(
        "(EngineCore pid=2) INFO 08-01 20:59:16 [core.py:114] Initializing a V1 LLM engine (v0.31.0) with config: model='m', max_seq_len=65536, x=1"
    )
    other.feed("(EngineCore pid=1) INFO 09-30 18:37:01 [kv_cache_utils.py:864] GPU KV cache size: 460,496 tokens")
    assert other.max_model_len == 65536


def test_max_model_len_prefers_the_engine_over_a_drafter():
    summary = LogSummary()
    for line in (
        "(APIServer pid=1) INFO 08-01 20:59:10 [model.py:1776] Using max model len 65536",
        "(APIServer pid=1) INFO 08-01 20:59:11 [model.py:1776] Using max model len 1048576",
        "(EngineCore pid=2) INFO 08-01 20:59:16 [core.py:114] Initializing a V1 LLM engine (v0.25.1) with config: model='m', max_seq_len=65536, x=1",
    ):
        summary.feed(line)
    assert summary.max_model_len == 65536 and summary.model == "m"
    first_only = LogSummary()
    first_only.feed("INFO 08-01 20:59:10 [model.py:1776] Using max model len 65536")
    first_only.feed("INFO 08-01 20:59:11 [model.py:1776] Using max model len 1048576")
    assert first_only.max_model_len == 65536


def test_weights_kv_and_concurrency_lines():
    assert only(
        ENGINE + "INFO 09-30 18:36:54 [gpu_model_runner.py:2392] Model loading took 4.2530 GiB and 1.175218 seconds",
        vl.WeightsLoaded,
    ) == vl.WeightsLoaded(4.2530, 1.175218)
    assert only(
        "(EngineCore pid=1) INFO 08-01 21:09:14 [gpu_model_runner.py:5306] Model loading took 95.63 GiB memory and 595.559227 seconds",
        vl.WeightsLoaded,
    ) == vl.WeightsLoaded(95.63, 595.559227)
    assert only(
        ENGINE + "INFO 09-30 18:37:01 [gpu_worker.py:298] Available KV cache memory: 8.99 GiB", vl.AvailableKVMemory
    ) == vl.AvailableKVMemory(8.99)
    assert only(
        "(Worker pid=20636) INFO 11-29 19:24:14 [cpu_worker.py:260] Explicitly set (0.06/9.46) GiB for KV cache on node 0.",
        vl.AvailableKVMemory,
    ) == vl.AvailableKVMemory(0.06)
    assert only(
        ENGINE + "INFO 09-30 18:37:01 [kv_cache_utils.py:864] GPU KV cache size: 18,400 tokens", vl.KVCacheSize
    ) == vl.KVCacheSize(18400, "GPU")
    assert only(
        ENGINE + "INFO 09-30 18:37:01 [kv_cache_utils.py:868] Maximum concurrency for 4,096 tokens per request: 4.49x",
        vl.MaxConcurrency,
    ) == vl.MaxConcurrency(4096, 4.49)
    cpu = "(EngineCore pid=20623) INFO 11-29 19:24:14 [kv_cache_utils.py:2327] CPU KV cache size: 131,072 tokens, Maximum concurrency for 512 tokens per request: 256.00x"
    assert only(cpu, vl.KVCacheSize) == vl.KVCacheSize(131072, "CPU")
    assert only(cpu, vl.MaxConcurrency) == vl.MaxConcurrency(512, 256.0)


def test_cuda_graph_and_server_lines():
    assert only(
        ENGINE + "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|  | 0/67 [00:00<?, ?it/s]",
        vl.CudaGraphCapture,
    ) == vl.CudaGraphCapture(False)
    assert only(
        ENGINE + "INFO 09-30 18:37:05 [gpu_model_runner.py:3118] Graph capturing finished in 4 secs, took 1.27 GiB",
        vl.CudaGraphCapture,
    ) == vl.CudaGraphCapture(True, 4.0, 1.27)
    assert (
        only(
            "INFO 05-12 02:46:33 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000",
            vl.ServerListening,
        ).url
        == "http://0.0.0.0:8000"
    )
    assert (
        only(
            "(APIServer pid=1) INFO 08-01 21:23:47 [api_server.py:616] Starting vLLM server on http://0.0.0.0:8000",
            vl.ServerListening,
        ).url
        == "http://0.0.0.0:8000"
    )
    assert (
        only("(APIServer pid=1) INFO 08-01 21:23:47 [launcher.py:37] Available routes are:", vl.ServerListening).url
        is None
    )
    assert only(APISERVER + "INFO:     Application startup complete.", vl.StartupComplete)


def test_warnings_and_errors():
    warning = only(
        APISERVER + "WARNING 09-30 18:28:59 [_ipex_ops.py:16] Import error msg: No module named 'x'", vl.Warning_
    )
    assert warning.text == "Import error msg: No module named 'x'"
    error = only("(EngineCore pid=1) ERROR 08-03 21:49:23 [core.py:1231] EngineCore failed to start.\r", vl.Error)
    assert error == vl.Error("EngineCore failed to start.", None)
    raw = only("AttributeError: 'NoneType' object has no attribute 'x'", vl.Error)
    assert raw.exception == "AttributeError"
    assert parse_line("INFO 05-12 02:45:31 [cuda.py:221] Using Flash Attention backend on V1 engine.") == []


def test_info_line_about_free_memory_is_not_a_failure():
    line = (
        ENGINE
        + "INFO 09-30 18:37:05 [gpu_worker.py:391] Free memory on device (14.66/15.99 GiB) on startup. Desired GPU memory utilization is (0.85, 13.59 GiB)."
    )
    assert not [ev for ev in parse_line(line) if isinstance(ev, vl.Failure)]


@pytest.mark.parametrize(
    "line, kind, in_hint",
    [
        # vllm/v1/worker/utils.py (0.32): the startup free-memory check, with a device name
        ("ValueError: Free memory on device cuda:0 (100.12/119.70 GiB) on startup is less than desired GPU memory utilization (0.9, 107.73 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
         "free_memory", "0.83"),
        # vllm/v1/core/kv_cache_utils.py without an estimate
        ("ValueError: To serve at least one request with the model's max seq len (8192), (2.00 GiB KV cache is needed, which is larger than the available KV cache memory (1.00 GiB). Try increasing `gpu_memory_utilization`",
         "kv_too_small", "Lower --max-model-len"),
        ("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
         "no_kv_memory", "--gpu-memory-utilization"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB of which 1.50 GiB is free.",
         "cuda_oom", "--gpu-memory-utilization"),
        ("(EngineCore pid=1) ERROR 01-01 00:00:00 [gpu_model_runner.py:1] Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization",
         "cuda_oom", "--enforce-eager"),
        ("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/nobody/nothing/revision/main.",
         "model_not_found", "'nobody/nothing'"),
        ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
         "engine_init_failed", "earlier in the log"),
    ],
)  # fmt: skip
def test_failure_lines(line, kind, in_hint):
    failure = only(line, vl.Failure)
    assert failure.kind == kind
    assert in_hint in failure.hint


def test_engine_init_failed_alone_quotes_the_last_error():
    summary = summarize(
        [
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.",
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] KeyError: 'lm_head.weight'",
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
    )
    assert summary.failure.kind == "engine_init_failed"
    assert "KeyError: 'lm_head.weight'" in summary.failure.message


def test_killed_when_the_process_exits_mid_start():
    summary = LogSummary()
    summary.feed("(EngineCore pid=1) INFO 08-01 17:36:32 [gpu_model_runner.py:5209] Starting to load model m...")
    assert summary.phase == "loading_weights" and summary.failure is None
    summary.finish(returncode=-9)
    assert summary.failure.kind == "killed"
    assert "SIGKILL" in summary.failure.message and "loading weights" in summary.failure.message
    assert summary.phase == "failed" and summary.reached == "loading_weights"


def test_unknown_error_at_exit():
    summary = summarize(["Traceback (most recent call last):", "KeyError: 'foo'"], returncode=1)
    assert summary.failure.kind == "unknown" and summary.failure.message == "KeyError: 'foo'"


def test_normal_stop_after_ready_is_no_failure(fixtures):
    summary = summarize(read_lines(fixtures / CPU / "startup_final_eager.log"), returncode=0)
    assert summary.failure is None and summary.ready


def test_exit_after_ready():
    lines = ["INFO:     Application startup complete."]
    assert summarize(lines, returncode=0).failure is None
    assert summarize(lines, returncode=-9).failure.message == "vLLM was killed by SIGKILL while serving."
    assert summarize(lines, returncode=1).failure.kind == "unknown"


def test_a_stop_sparktui_asked_for_is_no_failure():
    summary = LogSummary()
    summary.feed("(EngineCore pid=1) INFO 08-01 17:36:32 [gpu_model_runner.py:5209] Starting to load model m...")
    assert summary.finish(returncode=-15, requested=True) == []
    assert summary.failure is None and summary.phase == "loading_weights"


def test_kv_cache_size_device_names():
    line = "(EngineCore pid=1) INFO 01-01 00:00:00 [kv_cache_utils.py:2327] GPU + host KV cache size: 1,024 tokens, Maximum concurrency for 512 tokens per request: 2.00x"
    assert only(line, vl.KVCacheSize) == vl.KVCacheSize(1024, "GPU + host")
    assert (
        only("INFO 01-01 00:00:00 [kv_cache_utils.py:1] XPU KV cache size: 2,048 tokens", vl.KVCacheSize).device
        == "XPU"
    )


def test_describe_gives_people_the_milestones(fixtures):
    summary = LogSummary()
    said = []
    for line in read_lines(fixtures / LOGS / "discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_success.log"):
        said.extend(text for ev in summary.feed(line) if (text := vl.describe(ev)))
    assert "vLLM 0.10.2" in said
    assert "weights loaded: 4.253 GiB in 1.2 s" in said
    assert "GPU KV cache: 18,400 tokens" in said
    assert "CUDA graphs captured in 4 s (1.27 GiB)" in said
    assert "listening on http://localhost:24001" in said
    assert said[-2:] == ["ready", "phase: ready"]
    assert vl.describe(vl.Warning_("x")) is None


# ---------------------------------------------------------------- prefixes added by other tools

SUCCESS_025 = f"{LOGS}/spark_v0.25.1_laguna-s-2.1-nvfp4-dflash_success.log"
PREFIXES = {
    # loguru-style time, as a wrapper script writes it
    "timestamp_pipe": lambda i: f"2026-04-19 17:30:{i % 60:02d}.611 | ",
    # `docker compose logs` (colourless, and coloured as on a terminal)
    "compose": lambda i: "vllm-1  | ",
    "compose_coloured": lambda i: "\x1b[36mvllm-1  |\x1b[0m ",
    # `docker compose logs -t`: the container name, then docker's RFC 3339 time
    "compose_with_time": lambda i: f"vllm_1  | 2026-04-19T17:30:{i % 60:02d}.611234567Z ",
    # journalctl -u vllm
    "journald": lambda i: f"Apr 19 17:30:{i % 60:02d} spark vllm[4242]: ",
    # CI runners
    "bracketed_time": lambda i: f"[2026-04-19T17:30:{i % 60:02d}Z] ",
}


@pytest.mark.parametrize("style", sorted(PREFIXES))
def test_a_prefixed_log_gives_the_same_figures(fixtures, style):
    lines = read_lines(fixtures / SUCCESS_025)
    prefixed = [PREFIXES[style](i) + line for i, line in enumerate(lines)]
    expected = summarize(lines).to_dict()
    got = summarize(prefixed).to_dict()
    assert got == expected
    assert got["kv_cache_tokens"] == 94135 and got["ready"] is True


@pytest.mark.parametrize("style", sorted(PREFIXES))
def test_a_prefixed_failure_is_still_diagnosed(fixtures, style):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log")
    prefixed = [PREFIXES[style](i) + line for i, line in enumerate(lines)]
    failure = summarize(prefixed).failure
    assert failure is not None and failure.kind == "kv_too_small" and "--max-model-len 121840" in failure.hint


def test_text_with_a_pipe_is_not_taken_for_a_prefix():
    bar = "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:01<00:00,  3.1it/s]"
    assert split_line(bar) == (None, None, bar)


# ---------------------------------------------------------------- root causes, not wrappers

# The shape of vLLM 0.2x's output when a CUDA call runs out of memory (torch ≥ 2.8 raises
# torch.AcceleratorError, not torch.OutOfMemoryError), then the wrappers the engine and API server add.
ACCELERATOR_OOM = [
    "(EngineCore_DP0 pid=77) INFO 04-19 17:31:02 [gpu_model_runner.py:2892] Model loading took 67.9 GiB memory and 95.2 seconds",
    "(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843] EngineCore failed to start.",
    "(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 276, in determine_available_memory',
    "(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843]     self.model_runner.profile_run()",
    "(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843] torch.AcceleratorError: CUDA error: out of memory",
    "(EngineCore_DP0 pid=77) ERROR 04-19 17:31:40 [core.py:843] Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
    "(APIServer pid=1) Traceback (most recent call last):",
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
]  # fmt: skip


def test_accelerator_error_out_of_memory_is_a_cuda_oom():
    summary = summarize(ACCELERATOR_OOM, returncode=1)
    assert summary.failure is not None and summary.failure.kind == "cuda_oom"
    assert "CUDA error: out of memory" in summary.failure.message
    assert "inspect-log" not in summary.failure.hint
    assert summary.reached == "profiling"


def test_engine_init_failed_names_the_first_exception_and_never_sends_you_to_inspect_log():
    summary = summarize(
        [
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] Traceback (most recent call last):",
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] KeyError: 'lm_head.weight'",
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] The above exception was the direct cause of the following exception:",
            "(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] RuntimeError: could not build the model",
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
    )  # fmt: skip
    failure = summary.failure
    assert failure is not None and failure.kind == "engine_init_failed"
    assert failure.message.startswith("KeyError: 'lm_head.weight'")
    assert "inspect-log" not in failure.hint


def test_unknown_exit_names_the_root_not_the_wrapper():
    summary = summarize(
        ["Traceback (most recent call last):", "ImportError: libcudart.so.13: cannot open shared object file",
         "RuntimeError: Worker failed with error 'boom', please check the stack trace above for the root cause"],
        returncode=1,
    )  # fmt: skip
    assert summary.failure is not None and summary.failure.message.startswith("ImportError: libcudart.so.13")


def test_errors_survived_before_progress_are_not_the_root_cause():
    summary = summarize(
        [
            "ValueError: a probe that failed and was handled",
            "(EngineCore pid=1) INFO 01-01 00:00:00 [x.py:1] Model loading took 1.00 GiB and 1.0 seconds",
            "KeyError: 'the real one'",
        ],
        returncode=1,
    )
    assert summary.failure is not None and summary.failure.message == "KeyError: 'the real one'"


# ---------------------------------------------------------------- listening addresses


def test_eaddrnotavail_is_not_someone_else_listening():
    line = (
        "(APIServer pid=1) ERROR:    [Errno 99] error while attempting to bind on address ('10.9.9.9', 8000): "
        "cannot assign requested address"
    )
    failure = summarize([line], returncode=1).failure
    assert failure is not None and failure.kind == "address_unavailable"
    assert "already" not in failure.hint and "--host" in failure.hint
    raw = "OSError: [Errno 99] Cannot assign requested address"
    assert only(raw, vl.Failure).kind == "address_unavailable"


def test_eaddrinuse_is_someone_else_listening():
    line = (
        "(APIServer pid=1) ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
        "address already in use"
    )
    failure = summarize([line], returncode=1).failure
    assert failure is not None and failure.kind == "address_in_use" and "--port" in failure.hint


# ---------------------------------------------------------------- how the log and the process ended

LOADING = "(EngineCore pid=1) INFO 08-01 17:36:32 [gpu_model_runner.py:5209] Starting to load model m..."
OOM_HINT = "OOM killer"


@pytest.mark.parametrize("returncode", [1, 2, 3, 125, 126, 127])
def test_a_non_zero_exit_without_an_error_is_not_called_killed(returncode):
    summary = summarize([LOADING, "some last words"], returncode=returncode)
    failure = summary.failure
    assert failure is not None and failure.kind == "exited_early"
    assert f"status {returncode}" in failure.message and "loading weights" in failure.message
    assert "'some last words'" in failure.message
    assert OOM_HINT not in failure.hint


def test_docker_daemon_down_says_so():
    # `docker run` with the daemon stopped prints this one line and exits 125
    line = "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    failure = summarize([line], returncode=125).failure
    assert failure is not None and failure.kind == "exited_early"
    assert "Cannot connect to the Docker daemon" in failure.message
    assert "Docker daemon" in failure.hint and "systemctl start docker" in failure.hint


def test_sh_usage_error_exit_2():
    # `sh -c 'vllm serve --bad'` style: the shell's own message, exit status 2
    failure = summarize(["sh: 1: Syntax error: Unterminated quoted string"], returncode=2).failure
    assert failure is not None and failure.kind == "exited_early"
    assert "Status 2" in failure.hint and OOM_HINT not in failure.hint


@pytest.mark.parametrize(
    "returncode, kind, name, oom",
    [(-9, "killed", "SIGKILL", True), (137, "killed", "SIGKILL", True), (-15, "killed", "SIGTERM", False),
     (143, "killed", "SIGTERM", False), (-11, "crashed", "SIGSEGV", False), (134, "crashed", "SIGABRT", False)],
)  # fmt: skip
def test_signal_deaths(returncode, kind, name, oom):
    failure = summarize([LOADING], returncode=returncode).failure
    assert failure is not None and failure.kind == kind and name in failure.message
    assert (OOM_HINT in failure.hint) is oom
    if returncode > 0:
        assert f"exit status {returncode}" in failure.message


def test_the_shells_killed_line_is_evidence_of_a_kill():
    lines = [LOADING, "bash: line 1:  4242 Killed                  vllm serve m --port 8000"]
    failure = summarize(lines).failure
    assert failure is not None and failure.kind == "killed" and OOM_HINT in failure.hint


def test_a_log_that_ends_mid_phase_says_so(fixtures):
    lines = read_lines(fixtures / LOGS / "spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log")
    summary = summarize(lines)
    failure = summary.failure
    assert failure is not None and failure.kind == "log_ended"
    assert failure.message.startswith("The log ends during profiling with no error")
    assert "torch.compile took" in failure.message  # its last line
    assert summary.reached == "profiling"
    # the same log with the exit status the supervisor saw is a kill
    assert summarize(lines, returncode=-9).failure.kind == "killed"


def test_a_log_that_ends_after_the_server_started_listening_is_ready():
    lines = [
        LOADING,
        "(APIServer pid=1) INFO 08-01 21:23:47 [api_server.py:616] Starting vLLM server on http://0.0.0.0:8000",
    ]
    summary = summarize(lines)
    assert summary.failure is None and summary.ready and summary.phase == "ready"
    assert summary.url == "http://0.0.0.0:8000"
    assert summarize(lines, returncode=0).failure is None
    after = summarize(lines, returncode=1).failure
    assert after is not None and after.kind == "unknown" and "after start-up" in after.message


def test_empty_input():
    summary = summarize([])
    assert summary.failure is not None and summary.failure.kind == "empty_log"
    assert OOM_HINT not in summary.failure.hint
    blank = summarize(["\n", "   \n"], returncode=127)
    assert blank.failure is not None and blank.failure.kind == "empty_log"
    assert "status 127" in blank.failure.message and "not found" in blank.failure.hint


def test_a_worker_dying_after_ready_is_a_failure_naming_its_signal():
    """vLLM 0.32's MultiprocExecutor monitor, then the API server's EngineDeadError; the server exits 0."""
    from sparktui.core.vllm_log import LogSummary

    lines = [
        "(APIServer pid=20603) INFO 11-29 19:24:14 [launcher.py:46] Route: /v1/models, Methods: GET",
        "(APIServer pid=20603) INFO:     Application startup complete.",
        "(EngineCore_DP0 pid=20731) ERROR 11-29 19:25:02 [multiproc_executor.py:316] Worker proc VllmWorker-0 "
        "died unexpectedly (exit code: -4), shutting down executor.",
        "(APIServer pid=20603) ERROR 11-29 19:25:02 [async_llm.py:906] AsyncLLM output_handler failed.",
        "(APIServer pid=20603) ERROR 11-29 19:25:02 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]
    summary = LogSummary()
    summary.feed_lines(lines)
    summary.finish(0)
    assert summary.ready and summary.phase == "failed"
    assert summary.failure.kind == "worker_died"
    assert "SIGILL" in summary.failure.message and "illegal instruction" in summary.failure.hint
    only_dead = LogSummary()
    only_dead.feed_lines([lines[1], lines[4]])
    only_dead.finish(0)
    assert only_dead.failure.kind == "engine_dead"


def test_every_event_has_a_stable_kind_the_state_files_already_use():
    # the names earlier versions wrote (type(event).__name__ less a trailing "_"): the file format
    written = {
        "Version", "Model", "MaxModelLen", "LoadingStarted", "WeightsRead", "WeightsLoaded", "Profiling",
        "AvailableKVMemory", "KVCacheSize", "MaxConcurrency", "CudaGraphCapture", "ServerListening",
        "StartupComplete", "Warning", "Error", "Failure", "KilledNotice", "PhaseChanged",
        "UnreadableFigure",  # new in round 3: a figure line whose number no vLLM prints
    }  # fmt: skip
    members = set(typing.get_args(vl.Event))
    assert set(vl.EVENT_KINDS) == members and set(vl.EVENT_KINDS.values()) == written
    assert vl.event_kind(vl.Warning_("careful")) == "Warning"


def _fixture_logs(fixtures) -> list[list[str]]:
    paths = sorted((fixtures / LOGS).glob("*.log")) + sorted((fixtures / CPU).glob("*.log"))
    return [p.read_bytes().decode("utf-8", "replace").split("\n") for p in paths]


def _shown(s: LogSummary) -> tuple:
    """What the panel reads of a summary (ui.logstate.LogState), and the counts finish() uses."""
    return (s.phase, s.reached, s.ready, s.failure, s.weights_gib, s.available_kv_gib, s.kv_cache_tokens,
            s.max_concurrency, s.lines, s.text_lines, s._last_raw, s.root_error, s.last_error)  # fmt: skip


def _coloured(line: str) -> str:
    """The line as vLLM writes it to a terminal: its process prefix in colour."""
    if line.startswith("(") and ")" in line:
        head, _, rest = line.partition(")")
        return f"\x1b[1;36m{head})\x1b[0;0m{rest}"
    return line


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_the_serving_feed_keeps_what_the_panel_shows(fixtures, batch):
    """feed_serving parses only what can change the phase, the figures and the failure once ready:
    each fixture log, the logs one after another (a flood), and in colour, fed in batches, read the
    same after every batch as a parse of every line; and so do a crash after ready, an exception
    before it, and a figure vLLM printed only after start-up completed."""
    logs = _fixture_logs(fixtures)
    crash = [
        "(APIServer pid=1) INFO 11-29 19:24:14 [api_server.py:1] Available routes are:",
        "(APIServer pid=1) INFO:     Application startup complete.",
        *[
            f'(APIServer pid=1) INFO:     127.0.0.1:4000 - "POST /v1/chat/completions HTTP/1.1" 200 OK {i}'
            for i in range(50)
        ],
        "(APIServer pid=1) WARNING 11-29 19:25:00 [serving.py:3] memory is tight",
        "(EngineCore_DP0 pid=2) Traceback (most recent call last):",
        "(EngineCore_DP0 pid=2) ValueError: boom in the worker",
        "(EngineCore_DP0 pid=2) ERROR 11-29 19:25:02 [multiproc_executor.py:316] Worker proc VllmWorker-0 "
        "died unexpectedly (exit code: -4), shutting down executor.",
        "(APIServer pid=1) ERROR 11-29 19:25:02 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "",
        "   ",
    ]
    late = [
        "(APIServer pid=1) INFO:     Application startup complete.",
        "(EngineCore pid=2) INFO 11-29 19:24:14 [gpu_worker.py:1] Available KV cache memory: 3.25 GiB",
        "(EngineCore pid=2) INFO 11-29 19:24:14 [kv_cache_utils.py:1] GPU KV cache size: 18,400 tokens",
    ]
    flood = [line for log in logs for line in log] * 2
    cases = [*logs, flood, [_coloured(line) for line in flood], crash, [_coloured(line) for line in crash], late]
    for lines in cases:
        every, serving = LogSummary(), LogSummary()
        for start in range(0, len(lines), batch):
            every.feed_lines(lines[start : start + batch])
            serving.feed_serving(lines[start : start + batch])
            assert _shown(serving) == _shown(every), (lines[0][:80], start)
    assert serving.kv_cache_tokens == 18_400 and serving.available_kv_gib == 3.25


def test_a_quiet_line_is_one_the_parser_reads_at_info_warning_or_debug(fixtures):
    """quiet() says a line holds no failure only when the parser reads its level so."""
    from sparktui.core.vllm_lines import clean, level_and_message, process_end, quiet

    lines = [line for log in _fixture_logs(fixtures) for line in log]
    lines += [_coloured(line) for line in lines]
    lines += [
        "(APIServer pid=1) INFO 11-29 no bracket here RuntimeError: CUDA error: out of memory",
        "(APIServer pid=1) INFO:RuntimeError: x",
        "(APIServer pid=1) INFO 11-29 19:24:14 [x.py:1]",
        "(APIServer) INFO 11-29 19:24:14 [x.py:1] no pid: no level",
        "(APIServer pid=1) WARNING 11-29 19:24:14 [x.py:1] a\rERROR 11-29 19:24:14 [x.py:1] redrawn",
        "\x1b[1;xm(APIServer pid=1)\x1b[0;0m INFO 11-29 19:24:14 [x.py:1] odd colour",
        "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 11-29 19:24:14 [x.py:1] \x1b[31mred\x1b[0m",
        "(APIServer pid=1)\tWARNING 11-29 19:24:14 [x.py:1] a tab before the level",
        "(APIServer pid=1) INFO:",
        "(APIServer pid=1) INFO:x RuntimeError: no space after the colon",
        "(APIServer pid=1) INFO \u00b2 [x.py:1] RuntimeError: a digit isdigit() takes, not \\d",
        "(APIServer pid=1) INFO 1" + "x" * 76 + "] RuntimeError: the bracket at 78",
        "(APIServer pid=1) INFO 1" + "x" * 77 + "] RuntimeError: the bracket at 79",
        "(APIServer pid=1) INFO 1" + "x" * 90 + "]",
        "(" + "A" * 75 + " pid=1) INFO 11-29 19:24:14 [x.py:1] a long name",
        "(APIServer pid=1) INFOS 11-29 19:24:14 [x.py:1] RuntimeError: not a level",
        "(APIServer) pid=1) INFO 11-29 19:24:14 [x.py:1] pid after the bracket",
        "INFO 11-29 19:24:14 [x.py:1] one process, no prefix",
        " INFO 11-29 19:24:14 [x.py:1] RuntimeError: a blank before the level",
        "INFO 11-29 19:24:14 [x.py:1] a | b RuntimeError: a pipe",
        "DEBUG 11-29 19:24:14 [x.py:1] ends with a pipe |",
        "vllm-1  | INFO 11-29 19:24:14 [x.py:1] docker compose's prefix",
    ]
    seen = 0
    for raw in lines:
        if quiet(raw):
            seen += 1
            line = clean(raw)
            end = process_end(line)
            assert level_and_message(line[end:].lstrip() if end else line)[0] in ("INFO", "WARNING", "DEBUG"), raw
            assert not any(isinstance(e, (vl.Failure, vl.Error, vl.KilledNotice)) for e in parse_line(raw)), raw
    assert seen > len(lines) // 3  # most of vLLM's lines are so


def test_a_figure_no_vllm_prints_is_an_event_of_its_own_cut_short():
    """A figure line whose number float() cannot hold is no AvailableKVMemory (it made -inf): an
    UnreadableFigure naming the field, its phase, and the number cut to 24 characters (a line may hold a
    MiB of digits, and events go into the state record)."""
    digits = "9" * 100_000
    events = parse_line(f"INFO 06-11 18:58:40 [gpu_worker.py:480] Available KV cache memory: -{digits} GiB\n")
    (event,) = events
    assert isinstance(event, vl.UnreadableFigure)
    assert (event.field, event.phase, event.length) == ("available_kv_gib", "kv_cache", 100_001)
    assert event.text == "-" + "9" * 23 and event.shown() == f"-{'9' * 23}… (100,001 characters)"
    summary = summarize(["INFO 06-11 18:58:40 [gpu_worker.py:480] Available KV cache memory: 1.2.3 GiB\n"])
    assert summary.available_kv_gib is None and summary.unreadable == {"available_kv_gib": "1.2.3"}
    assert summary.reached == "kv_cache"


KV_LINE = "(EngineCore pid=2) INFO 11-29 19:24:14 [kv_cache_utils.py:1] GPU KV cache size: {} tokens\n"
CONCURRENCY_LINE = (
    "(EngineCore pid=2) INFO 11-29 19:24:14 [kv_cache_utils.py:1] Maximum concurrency for {} tokens per request: {}x\n"
)


@pytest.mark.parametrize(
    ("line", "field", "text"),
    [
        (KV_LINE.format("1234" * 100), "kv_cache_tokens", "1234" * 100),
        (KV_LINE.format(f"{2**40:,}"), "kv_cache_tokens", f"{2**40:,}"),
        (KV_LINE.format(",,,"), "kv_cache_tokens", ",,,"),
        (CONCURRENCY_LINE.format("9" * 400, "6.75"), "max_model_len", "9" * 400),
        (CONCURRENCY_LINE.format("131,072", "9" * 300), "max_concurrency", "9" * 300),
        ("INFO 11-29 19:24:14 [model.py:1] Using max model len " + "9" * 400 + "\n", "max_model_len", "9" * 400),
        ("INFO 11-29 [utils.py:1] non-default args: {'max_model_len': " + "9" * 50 + "}\n", "max_model_len", "9" * 50),
    ],
    ids=[
        "kv-400-digits",
        "kv-2**40",
        "kv-commas",
        "length-400-digits",
        "concurrency-300-digits",
        "using-len",
        "args-len",
    ],
)
def test_a_token_count_no_vllm_prints_is_said_not_taken(line, field, text):
    """A token count or concurrency past 2**40 (or with no digit) was taken as it came: a 400-digit
    KV cache size became the summary's kv_cache_tokens; "," a ValueError traceback."""
    (event,) = [e for e in parse_line(line) if not isinstance(e, vl.Version)]
    assert isinstance(event, vl.UnreadableFigure), event
    assert (event.field, event.text, event.length) == (field, text[:24], len(text))
    summary = summarize([line])
    assert summary.unreadable == {field: event.shown()}
    assert summary.kv_cache_tokens is None and summary.max_concurrency is None and summary.max_model_len is None
    assert summarize([KV_LINE.format(f"{2**40 - 1:,}")]).kv_cache_tokens == 2**40 - 1  # the bound, not below it


def test_a_longest_length_no_vllm_prints_is_not_advised():
    from sparktui.core.vllm_failures import _kv_too_small

    said = "the estimated maximum model length is {}. Try increasing `gpu_memory_utilization`"
    assert "set --max-model-len 121840 or less" in _kv_too_small(said.format(121840)).hint
    hint = _kv_too_small(said.format("9" * 400)).hint
    assert "9999" not in hint and "Lower --max-model-len" in hint, hint
