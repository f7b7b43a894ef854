"""sparktui's reading of each layer against vLLM's own KV specs, built on the meta device.

    python bench/vllm_layer_oracle.py [MODEL ...]   (default: every fixture config)
    python bench/vllm_layer_oracle.py --unseen      (the configs outside the catalog, model-configs/unseen)

Runs tests/support/vllm_layer_oracle.py under the CI's vLLM 0.32.0 CPU build (the only installed
venv whose compiled ops load, so the only one that can build models): for each config in
tests/fixtures/model-configs it builds the model on torch's meta device and asks every layer for
its KV cache spec, then compares kinds, counts, KV heads, head sizes, windows and Mamba state
shapes with sparktui's LayerGroups. Prints a line per model, what vLLM could not build without a
GPU and why, and the run time. Exit 1 on any disagreement.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.vllm_layers import ask_layers, fixture_config, ours, theirs  # noqa: E402
from tests.support.vllm_oracle import ci_python  # noqa: E402


def main(argv: list[str]) -> int:
    python = ci_python()
    if python is None:
        print("no vLLM 0.32 venv (SPARKTUI_TEST_VLLM or .ci/setup-vllm)", file=sys.stderr)
        return 2
    configs = REPO / "tests" / "fixtures" / "model-configs"
    if argv == ["--unseen"]:  # named unseen/<stem>, as fixture_config reads them
        names = [f"unseen/{p.stem}" for p in sorted((configs / "unseen").glob("*.json")) if "__hf_quant" not in p.stem]
    else:
        names = argv or sorted(p.stem for p in configs.glob("*.json") if "__hf_quant" not in p.stem)
    started = time.monotonic()
    answers = ask_layers(python, names)
    agree = disagree = unbuilt = 0
    for answer in answers:
        name = answer["name"]
        if "error" in answer:
            unbuilt += 1
            reason = " ".join(answer["error"].split())[:150]
            print(f"  {name:<50} vLLM cannot build it here: {reason}")
            continue
        mine, vllms = ours(name, fixture_config(name)), theirs(answer["layers"])
        if mine == vllms:
            agree += 1
            summary = ", ".join(
                f"{n}× {k[0]} "
                + (f"state {k[4]}" if k[4] else f"{k[1]}×{k[2]}")
                + (f" w{k[3]}" if k[3] else "")
                + (f" V {k[5]}" if k[5] and k[5] != k[2] else "")
                for k, n in vllms.items()
            )
            print(f"  {name:<50} agrees: {summary}  ({answer['seconds']} s)")
        else:
            disagree += 1
            print(f"  {name:<50} DISAGREES: sparktui {dict(mine)} vLLM {dict(vllms)}")
    print(
        f"\nsummary: {agree} agree, {disagree} disagree, {unbuilt} not buildable without a GPU; "
        f"{time.monotonic() - started:.0f} s"
    )
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
