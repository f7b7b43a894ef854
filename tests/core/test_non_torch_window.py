"""What vLLM's non-torch figure covers, per version (vllm_rules non_torch_window): the worker's growth
outside torch from init_device's snapshot to the end of the profile run (mem_utils.py memory_profiling);
from 0.18.0 to 0.26.x Worker.determine_available_memory also runs profile_cudagraph_memory inside that
window, from 0.27.0 after it. The fit's working says which, so a non-torch figure from one window is not
read as the other's."""

from __future__ import annotations

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import load_model_spec

GRAPHS = "to the end of the profile run and the CUDA-graph profiling)"
RUN_ONLY = "to the end of the profile run)"


def _non_torch_line(version: str, **flags) -> str:
    spec = load_model_spec("openai/gpt-oss-20b")
    result = fit(ServeConfig(model=spec.name, vllm_version=version, max_model_len=8192, **flags), spec, dgx_spark())
    (line,) = [line for line in result.memory_working if line.startswith("− non-torch")]
    return line


@pytest.mark.parametrize(("version", "window"), [
    ("0.13.0", RUN_ONLY), ("0.17.0", RUN_ONLY), ("0.18.0", GRAPHS), ("0.26.0", GRAPHS), ("0.27.0", RUN_ONLY),
    ("0.32.0", RUN_ONLY),
])  # fmt: skip
def test_the_non_torch_window_holds_the_cuda_graph_profiling_from_0_18_to_0_26(version, window):
    assert window in _non_torch_line(version)


def test_without_cuda_graphs_the_window_is_the_profile_run_alone():
    """--enforce-eager: Worker.determine_available_memory skips profile_cudagraph_memory (0.18-0.20: not
    enforce_eager; 0.21 on: cudagraph_mode != NONE, which --enforce-eager sets)."""
    assert RUN_ONLY in _non_torch_line("0.20.0", enforce_eager=True)
    assert GRAPHS in _non_torch_line("0.20.0")
