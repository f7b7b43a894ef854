"""The activation peak of vLLM's profile pass, measured on vLLM's own model code, beside the fit's.

    python bench/activation_oracle.py [--tokens N] [--seqs S] [MODEL ...]
        (default: every fixture config and the two Gemma 3 configs of bench/fit_accuracy.py,
         at the GB10 defaults: 2048 batched tokens, 256 sequences)

Runs tests/support/vllm_activation_oracle.py under the installed vLLM (the CI's 0.32.0 CPU venv:
SPARKTUI_TEST_VLLM or .ci/setup-vllm): each model is built with vLLM's own model class on the meta
device, a few layers deep, and its profile pass (the forward over N tokens with attention skipped,
then the logits of min(N, S) dummy requests, as the V2 runner's profile_run does) runs under torch's
FakeTensorMode while a dispatch mode counts the live tensor bytes. Prints per model the oracle's
forward and sampler-pass peaks against sparktui's (fit_settings.activation_parts), the ratio, what
vLLM cannot build without a GPU and why, and the run time; for a Gated-DeltaNet hybrid, the fit's
prefill-buffer term (which vLLM's profile pass skips) and the fit without it; with --live, the
largest tensors live at each forward peak and the op that made each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.fit_accuracy import GEMMA3_12B, GEMMA3_27B  # noqa: E402
from sparktui.core.modelspec import spec_from_config  # noqa: E402
from sparktui.core.units import GiB  # noqa: E402
from tests.support.vllm_activations import ask_activations, fit_terms, oracle_terms, unquantized  # noqa: E402
from tests.support.vllm_layers import fixture_config  # noqa: E402
from tests.support.vllm_oracle import ci_python  # noqa: E402

EXTRA = {"google__gemma-3-12b-it": GEMMA3_12B, "google__gemma-3-27b-it": GEMMA3_27B}


def configs(names: list[str]) -> dict[str, dict[str, Any]]:
    if not names:
        names = sorted(
            p.stem for p in (REPO / "tests" / "fixtures" / "model-configs").glob("*.json") if "__hf_quant" not in p.stem
        ) + sorted(EXTRA)
    return {n: EXTRA[n] if n in EXTRA else fixture_config(n) for n in names}


def load_vocab(config: dict[str, Any]) -> int:
    return int(spec_from_config(unquantized(config), name="vocab", source="fixture").vocab_size)


def _g(n: int) -> str:
    return f"{n / GiB:6.3f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--seqs", type=int, default=256)
    parser.add_argument("--live", action="store_true", help="list the largest tensors live at each forward peak")
    parser.add_argument("models", nargs="*")
    args = parser.parse_args(argv)
    python = ci_python()
    if python is None:
        print("no vLLM 0.32 venv (SPARKTUI_TEST_VLLM or .ci/setup-vllm)", file=sys.stderr)
        return 2
    models = configs(args.models)
    started = time.monotonic()
    answer = ask_activations(python, models, args.tokens, args.seqs)
    print(f"fakes registered for the CPU build's out-parameter ops: {', '.join(answer['fakes_added']) or 'none'}")
    print(f"profile pass at {args.tokens:,} batched tokens, {args.seqs} sequences (GiB; ratio = oracle / fit):")
    print(f"  {'model':<46} {'layers':>6} {'fwd':>6} {'fit':>6} {'ratio':>5}  {'smp':>6} {'fit':>6} {'ratio':>5}  "
          f"{'peak':>6} {'fit':>6} {'ratio':>5}  {'moe ws':>6} {'logits':>6} {'V1 cp':>5}  s")  # fmt: skip
    built = 0
    for row in answer["models"]:
        name = row["name"]
        if "error" in row:
            print(f"  {name:<46} vLLM cannot run it here: {' '.join(row['error'].split())[:160]}")
            continue
        built += 1
        o, f = oracle_terms(row), fit_terms(name, models[name], args.tokens, args.seqs)
        peak, fit_peak = max(o.forward, o.sampler), max(f.forward, f.sampler)
        grow = f"  depth {o.depth_growth:+,} B" if o.depth_growth else ""
        seqs = min(args.seqs, args.tokens)
        v1 = f"{o.v1_sampler / (seqs * load_vocab(models[name]) * 4):5.2f}" if o.v1_sampler else "    —"
        print(
            f"  {name:<46} {o.layers[0]:>2}/{o.layers[1]:<3} {_g(o.forward)} {_g(f.forward)} {o.forward / f.forward:5.2f}"
            f"  {_g(o.sampler)} {_g(f.sampler)} {o.sampler / f.sampler:5.2f}"
            f"  {_g(peak)} {_g(fit_peak)} {peak / fit_peak:5.2f}  {_g(o.moe_workspace)} {_g(o.logits)} {v1} {o.seconds:4.0f}"
            f"{grow}  [{f.runner}]"
        )
        if f.gdn:  # vLLM's profile pass returns from the GDN core before its chunked prefill (eager and compiled)
            rest = f.forward - f.gdn
            print(f"  {'':<46} Gated-DeltaNet: fit's prefill term {_g(f.gdn)}, fit without it {_g(rest)} "
                  f"(oracle / that {o.forward / rest:4.2f})")  # fmt: skip
        if args.live:
            for nbytes, op in row["forward_live"][-1]:
                print(f"  {'':<46}   {nbytes / 2**20:9.1f} MiB  {op}")
    print("  (fwd: the forward's peak, the MoE workspace included; smp: the V2 sampler pass, the forward's hidden")
    print("  states and the workspace still held; V1 cp: the V1 runner's sampler pass in fp32 copies of the logits)")
    print(f"\n{built} of {len(answer['models'])} models run; {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
