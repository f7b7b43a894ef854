"""The fused-MoE workspace per token, asked of vLLM's own code, beside sparktui's figure.

    python bench/moe_workspace_oracle.py

Runs the installed vLLM (the CI's 0.32 CPU venv: SPARKTUI_TEST_VLLM or .ci/setup-vllm) and calls
each experts class's own `workspace_shapes` (fused_moe/experts: CutlassExpertsFp4, TritonExperts,
MarlinExperts) for every MoE model sparktui knows, with N as each class's moe_problem_size takes it
(the w13 width: 2 × intermediate for a gated activation; Marlin: the intermediate size), then counts
what FusedMoEModularKernel._allocate_buffers takes from the shared workspace (max(workspace13,
output) + workspace2, in the activation dtype). Prints bytes per batched token per backend and
sparktui's fit.moe_workspace_per_token, and the run time. Pure shape arithmetic: no GPU, no model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.core.fit import moe_workspace_per_token  # noqa: E402
from sparktui.core.modelspec import catalog_names, load_model_spec  # noqa: E402
from tests.support.vllm_oracle import ci_python  # noqa: E402

ASK = r"""
import json, sys, math
from types import SimpleNamespace
from vllm.model_executor.layers.fused_moe import modular_kernel as mk
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.experts.cutlass_moe import CutlassExpertsFp4
from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts
import vllm
M = 4096
out = {"version": vllm.__version__, "models": {}}
for q in json.load(sys.stdin):
    act = MoEActivation.SILU if q["gated"] else MoEActivation.RELU2_NO_MUL
    w13 = q["inter"] * (2 if q["gated"] else 1)
    dummy = SimpleNamespace(adjust_N_for_activation=mk.FusedMoEExpertsModular.adjust_N_for_activation)
    row = {}
    for name, cls, n in (("cutlass_fp4", CutlassExpertsFp4, w13), ("triton", TritonExperts, w13),
                         ("marlin", MarlinExperts, q["inter"])):
        ws13, ws2, output = cls.workspace_shapes(dummy, M, n, q["hidden"], q["topk"], 8, 8, None, act)
        row[name] = (max(math.prod(ws13), math.prod(output)) + math.prod(ws2)) * 2 // M
    out["models"][q["name"]] = row
print(json.dumps(out))
"""


def main() -> int:
    python = ci_python()
    if python is None:
        print("no vLLM venv (SPARKTUI_TEST_VLLM or .ci/setup-vllm)", file=sys.stderr)
        return 2
    questions, ours = [], {}
    for name in catalog_names():
        spec = load_model_spec(name)
        inter = spec.moe_intermediate_size or spec.intermediate_size  # Mixtral, gpt-oss: the MLP width
        if not (spec.num_experts and inter and spec.experts_per_token):
            continue
        gated = spec.model_type != "nemotron_h"  # Nemotron-H's experts use relu² without a gate
        questions.append({"name": name, "inter": inter, "hidden": spec.hidden_size,
                          "topk": spec.experts_per_token, "gated": gated})  # fmt: skip
        ours[name] = moe_workspace_per_token(spec)
    started = time.monotonic()
    done = subprocess.run([str(python), "-c", ASK], input=json.dumps(questions), capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"fused-MoE workspace, bytes per batched token (vLLM {answer['version']}'s own workspace_shapes):")
    print(f"  {'model':<48} {'sparktui':>9} {'cutlass_fp4':>12} {'triton':>9} {'marlin':>9}")
    for name, row in answer["models"].items():
        backend = "cutlass_fp4" if "nvfp4" in (load_model_spec(name).quantization or "").lower() else "triton"
        mark = f"  = {backend}" if ours[name] == row[backend] else f"  ≠ {backend}"
        print(f"  {name:<48} {ours[name]:>9,} {row['cutlass_fp4']:>12,} {row['triton']:>9,} {row['marlin']:>9,}{mark}")
    print("  (sparktui takes CutlassExpertsFp4 for NVFP4 checkpoints and TritonExperts' shapes for the rest)")
    print(f"{len(answer['models'])} MoE models; {time.monotonic() - started:.1f} s (the vLLM import most of it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
