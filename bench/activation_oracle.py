"""The activation peak of vLLM's profile pass, measured on vLLM's own model code, beside the fit's,
at every installed vLLM version.

    python bench/activation_oracle.py [--tokens N] [--seqs S] [--venv PATH ...] [MODEL ...]
        (default: every fixture config, the two Gemma 3 configs of bench/fit_accuracy.py and Kimi-Linear's,
         at the GB10 defaults: 2048 batched tokens, 256 sequences; every venv found: the CI's 0.32.0
         (SPARKTUI_TEST_VLLM or .ci/setup-vllm) and each ~/.cache/sparktui-ci/vllm-venv-X made by
         bench/setup-oracle-venv X)

Runs tests/support/vllm_activation_oracle.py under each vLLM: each model is built with vLLM's own
model class on the meta device, a few layers deep, and its profile pass (the forward over N tokens
with attention skipped, then the logits of min(N, S) dummy requests as the V2 runner's profile_run
does, and the V1 runner's sampler pass) runs under torch's FakeTensorMode while a dispatch mode
counts the live tensor bytes. Prints per version per model the oracle's forward and sampler-pass
peaks against sparktui's at that version (fit_settings.activation_parts with that version's rules:
the runner, V1 or V2, is the fit's choice), the ratio, what vLLM cannot build without a GPU and why,
and the run time; the V1 sampler pass in fp32 copies of the logits (the fit takes the path each version
runs on a GPU, vllm_rules v1_sampler_top_k_top_p), both on PyTorch's sort path and, where the version has it, on the Triton top-k / top-p path a GPU
takes; for a Gated-DeltaNet hybrid, the fit's prefill-buffer term (which vLLM's profile pass skips)
and the fit without it; with --live, the largest tensors live at each forward peak and the op that
made each. Ends with one line per model across the versions.
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
from tests.support.architecture_configs import LAGUNA_S_2_1  # noqa: E402
from tests.support.vllm_activations import (  # noqa: E402
    DRAFTERS,
    ask_activations,
    fit_drafter,
    fit_terms,
    oracle_terms,
    unquantized,
)
from tests.support.vllm_layers import fixture_config  # noqa: E402
from tests.support.vllm_oracle import ci_python  # noqa: E402

VENVS = Path.home() / ".cache" / "sparktui-ci"

KIMI_LINEAR = "moonshotai__Kimi-Linear-48B-A3B-Instruct"  # its real config, kept with the unseen ones
EXTRA = {
    "google__gemma-3-12b-it": GEMMA3_12B,
    "google__gemma-3-27b-it": GEMMA3_27B,
    KIMI_LINEAR: fixture_config(f"unseen/{KIMI_LINEAR}"),
    "laguna-s-2.1": LAGUNA_S_2_1,  # at its geometry (no copy of its config.json found)
}


def known_models() -> list[str]:
    """Every model name the oracle takes: the fixture configs (owner__name) and EXTRA."""
    fixtures = (REPO / "tests" / "fixtures" / "model-configs").glob("*.json")
    return sorted(p.stem for p in fixtures if "__hf_quant" not in p.stem) + sorted(EXTRA)


def configs(names: list[str]) -> dict[str, dict[str, Any]]:
    known = known_models()
    unknown = [n for n in names if n not in known]
    if unknown:  # a clear refusal, not a FileNotFoundError from deep in fixture_config
        print(f"activation_oracle: unknown model {', '.join(map(repr, unknown))}: expected a config in "
              f"tests/fixtures/model-configs (owner__name) or one of {', '.join(sorted(EXTRA))}; "
              f"known: {', '.join(known)}", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    return {n: EXTRA[n] if n in EXTRA else fixture_config(n) for n in names or known}


def load_vocab(config: dict[str, Any]) -> int:
    return int(spec_from_config(unquantized(config), name="vocab", source="fixture").vocab_size)


def _g(n: int) -> str:
    return f"{n / GiB:6.3f}"


def pythons(paths: list[str]) -> list[Path]:
    """The venvs' interpreters: --venv paths (a venv or its python), else the CI's and every vllm-venv-X."""
    found: list[Path] = []
    if paths:
        for raw in paths:
            p = Path(raw).expanduser()
            python = p if p.is_file() else p / "bin" / "python"
            if not python.exists():
                raise SystemExit(f"activation_oracle: --venv {raw}: no {python}; expected a venv made by "
                                 "bench/setup-oracle-venv or .ci/setup-vllm (or its bin/python)")  # fmt: skip
            found.append(python)
        return found
    ci = ci_python()
    found += [ci] if ci is not None else []
    found += sorted(VENVS.glob("vllm-venv-*/bin/python"))
    unique: dict[Path, Path] = {}
    for python in found:  # by venv: every venv's python links to the same interpreter
        unique.setdefault(python.parent.parent.resolve(), python)
    return list(unique.values())


def _copies(nbytes: int | None, seqs: int, vocab: int) -> str:
    return f"{nbytes / (seqs * vocab * 4):5.2f}" if nbytes else "    —"


def report(answer: dict[str, Any], models: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, str]:
    """Print one version's table; return a short figure per model for the closing summary."""
    version = answer["version"].split("+")[0]
    summary: dict[str, str] = {}
    print(f"  {'model':<46} {'layers':>6} {'fwd':>6} {'fit':>6} {'ratio':>5}  {'smp':>6} {'fit':>6} {'ratio':>5}  "
          f"{'peak':>6} {'fit':>6} {'ratio':>5}  {'moe ws':>6} {'logits':>6} {'V1 cp':>5} {'V1 tr':>5}  s")  # fmt: skip
    for row in answer["models"]:
        name = row["name"]
        if "error" in row:
            print(f"  {name:<46} vLLM cannot run it here: {' '.join(row['error'].split())[:160]}")
            summary[name] = "cannot build"
            continue
        if "drafter" in row:  # built with its target (DRAFTERS): its own pass beyond what the runner holds
            target, method, k = DRAFTERS[name]
            total, own = fit_drafter((target, fixture_config(target)), models[name], method, k, args.tokens,
                                     args.seqs, version)  # fmt: skip
            stage = f", the context K/V stage {_g(row['context_kv'])}" if row["context_kv"] else ""
            print(f"  {name:<46} {method} drafter ({row['drafter_class']}, {k} tokens): its own pass "
                  f"{_g(row['drafter'])}{stage}; fit {_g(own)} (ratio {row['drafter'] / own:4.2f}; "
                  f"the fit's whole pass {_g(total)}) {row['seconds']:4.0f} s")  # fmt: skip
            summary[name] = f"drafter {row['drafter'] / own:4.2f}"
            continue
        o, f = oracle_terms(row), fit_terms(name, models[name], args.tokens, args.seqs, version)
        seqs = min(args.seqs, args.tokens)
        vocab = load_vocab(models[name])
        # the sampler pass the fit models at this version: V2's (hidden states held) or V1's (beyond them)
        smp = o.sampler if f.runner != "v1" else ((o.v1_sampler_triton if f.v1_triton else o.v1_sampler) or 0)
        peak, fit_peak = max(o.forward, smp), max(f.forward, f.sampler)
        grow = f"  depth {o.depth_growth:+,} B" if o.depth_growth else ""
        ws = f"{_g(o.moe_workspace)}{'' if o.moe_workspace_held or not o.moe_workspace else '*'}"
        print(
            f"  {name:<46} {o.layers[0]:>2}/{o.layers[1]:<3} {_g(o.forward)} {_g(f.forward)} {o.forward / f.forward:5.2f}"
            f"  {_g(smp)} {_g(f.sampler)} {smp / f.sampler:5.2f}"
            f"  {_g(peak)} {_g(fit_peak)} {peak / fit_peak:5.2f}  {ws:<7}{_g(o.logits)} "
            f"{_copies(o.v1_sampler, seqs, vocab)} {_copies(o.v1_sampler_triton, seqs, vocab)} {o.seconds:4.0f}"
            f"{grow}  [{f.runner}]"
        )
        summary[name] = f"{o.forward / f.forward:4.2f}/{smp / f.sampler:4.2f}"
        if f.gdn:  # vLLM's profile pass returns from the GDN core before its chunked prefill (eager and compiled)
            rest = f.forward - f.gdn
            print(f"  {'':<46} Gated-DeltaNet: fit's prefill term {_g(f.gdn)}, fit without it {_g(rest)} "
                  f"(oracle / that {o.forward / rest:4.2f})")  # fmt: skip
        if args.live:
            for nbytes, op in row["forward_live"][-1]:
                print(f"  {'':<46}   {nbytes / 2**20:9.1f} MiB  {op}")
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--seqs", type=int, default=256)
    parser.add_argument("--venv", action="append", default=[], help="a vLLM venv (repeatable; default: all found)")
    parser.add_argument("--live", action="store_true", help="list the largest tensors live at each forward peak")
    parser.add_argument("models", nargs="*")
    args = parser.parse_args(argv)
    models = configs(args.models)  # before the venvs: a typo is refused at once
    found = pythons(args.venv)
    if not found:
        print("no vLLM venv (SPARKTUI_TEST_VLLM, .ci/setup-vllm or bench/setup-oracle-venv X)", file=sys.stderr)
        return 2
    started = time.monotonic()
    summaries: dict[str, dict[str, str]] = {}
    for python in found:
        began = time.monotonic()
        try:
            targets = {t: fixture_config(t) for n, (t, _, _) in DRAFTERS.items() if n in models}
            answer = ask_activations(python, models, args.tokens, args.seqs, targets=targets)
        except (RuntimeError, OSError) as exc:
            print(f"\n{python}: {str(exc).splitlines()[0]}")
            continue
        version = answer["version"].split("+")[0]
        print(f"\nvLLM {version} ({python.parent.parent}): profile pass at {args.tokens:,} batched tokens, "
              f"{args.seqs} sequences (GiB; ratio = oracle / fit at {version})")  # fmt: skip
        print(f"  stand-ins and fakes: {', '.join(answer['fakes_added']) or 'none'}")
        summaries[version] = report(answer, models, args)
        built = sum(1 for row in answer["models"] if "error" not in row)
        print(f"  {built} of {len(answer['models'])} models run at {version}; {time.monotonic() - began:.0f} s")
    print("  (fwd: the forward's peak, the MoE workspace included; moe ws*: a transient inside the op, not held;")
    print("  smp: the sampler pass of the runner the fit assumes at that version [v1/v2]: V2 with the forward's")
    print("  hidden states and workspace held, V1 beyond them; V1 cp / V1 tr: the V1 sampler pass in fp32 copies of")
    print("  the logits on PyTorch's sort path / on the Triton top-k / top-p path, where that version has it)")
    if len(summaries) > 1:
        versions = list(summaries)
        print("\nforward / sampler pass, oracle / fit, per version:")
        print(f"  {'model':<46} " + " ".join(f"{v:>11}" for v in versions))
        for name in models:
            print(f"  {name:<46} " + " ".join(f"{summaries[v].get(name, '—'):>11}" for v in versions))
    print(f"\n{len(summaries)} vLLM version(s); {time.monotonic() - started:.0f} s in all")
    return 0 if summaries else 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
