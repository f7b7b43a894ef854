"""Does sparktui's fit engine agree with vLLM's own code, at every vLLM version installed?

    python bench/vllm_oracle.py [VERSION ...]     (default: every venv bench/vllm_oracle_venvs.py made)
    python bench/vllm_oracle.py --unseen [VERSION ...]

--unseen asks the model questions (KV cache, --kv-cache-dtype auto, quantization, model runner) of
the real configs outside the catalog (tests/fixtures/model-configs/unseen) instead of the catalog's;
the questions that do not depend on the model (batch defaults, CUDA-graph sizes) are left to the
catalog run, which --unseen does not change.

For each vLLM venv (ORACLE_DIR/vllm-X, and the CI's 0.32.0), ask vLLM itself, in that venv's
own interpreter (tests/support/vllm_kv_oracle.py):
  - the `vllm serve` batch defaults with NVML unable to report device memory (GB10), and on
    discrete GPUs (EngineArgs.get_batch_defaults);
  - what --kv-cache-dtype auto becomes for every quantized fixture checkpoint (0.14+);
  - get_kv_cache_configs (0.10: get_kv_cache_config) on every model of the catalog (the fixture
    configs) under several flag sets: blocks, groups, concurrency, the KV tokens as that version
    logs them, the in-flight reservation, and the error and length estimate when one request
    does not fit;
  - the CUDA-graph capture sizes, the cudagraph_mode vLLM resolves and the graphs it captures,
    over a grid of max_num_seqs, max_num_batched_tokens, speculative tokens and attention
    backends, on the V1 and (0.25+) the V2 model runner (VllmConfig._set_cudagraph_sizes, the
    mode resolution, CudagraphDispatcher, gpu/cudagraph_utils.CudaGraphManager);
  - which model runner `vllm serve` picks for each catalog model's kind, speculative method and
    mamba cache mode (VllmConfig.use_v2_model_runner);
  - whether it loads each ModelOpt MIXED_PRECISION checkpoint's quantization (get_config, the ModelOpt
    normalisation, ModelConfig._verify_quantization, weight_utils.get_quant_config), and Super's map
    over a Llama body flat in config.json and only in hf_quant_config.json;
and compare each answer with what sparktui predicts under that version's rules (core/vllm_rules.py).
Prints a table per version, the disagreements, and the run time. Exit 1 on any disagreement.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparktui.core.vllm_rules import parse_version, rules_for  # noqa: E402
from sparktui.errors import UserError  # noqa: E402
from tests.support.vllm_oracle import (  # noqa: E402
    DEVICES,
    GiB,
    ask,
    checkpoint_folders,
    cudagraph_disagreements,
    cudagraph_label,
    cudagraph_questions,
    kv_disagreements,
    kv_question,
    model_runner_label,
    model_runner_questions,
    model_spec,
    oracle_pythons,
    quantization_questions,
    scenarios,
    sparktui_cudagraphs,
    sparktui_kv_dtype,
    sparktui_loads_quantization,
    sparktui_model_runner,
    unseen_models,
    v4_disagreements,
    v4_question,
)


def check_version(version, python, folders, cases, quant, models=None) -> tuple[int, int, list[str], float]:
    """`models`: the unseen configs (only the model questions are asked), None for the catalog run."""
    rules = rules_for(version)
    devices = DEVICES if models is None else []
    graphs = cudagraph_questions() if models is None else []
    runners = model_runner_questions(models)
    built, built_v4 = [], []
    for sc in cases:
        spec = model_spec(sc.model)
        if spec.compress_ratios:  # DeepSeek V4: asked as its own layers declare their caches
            built_v4.append((sc, *v4_question(spec, sc, rules)))
        else:
            built.append((sc, *kv_question(spec, sc, rules)))
    request = {
        "kv": [case for _, case, _ in built],
        "deepseek_v4": [case for _, case, _ in built_v4],
        "batch_defaults": devices,
        "kv_dtype": [{"path": str(folder)} for _, folder in folders],
        "cudagraphs": graphs,
        "model_runner": runners,
        "quantization": [{"path": str(folder)} for _, folder, _ in quant],
    }
    started = time.monotonic()
    answer = ask(python, request)
    elapsed = time.monotonic() - started
    problems: list[str] = []
    checked = unsupported = 0
    print(f"\nvLLM {answer['version']} ({python.parents[1]}), rules of {rules.version}, {elapsed:.0f} s")
    print(f"  {'question':<78} {'sparktui':>22} {'vLLM':>22}  agree")
    for device, got in zip(devices, answer["batch_defaults"], strict=True):
        memory = None if device["memory_gib"] is None else int(device["memory_gib"] * GiB)
        ours = rules.batch_defaults(memory, str(device["name"]))
        label = f"batch defaults, {device['name']} ({device['memory_gib'] or 'memory unknown'} GiB)"
        if "error" in got:
            print(f"  {label:<78} {ours!s:>22} {'(not asked)':>22}  —")
            continue
        theirs = (got["max_num_batched_tokens"], got["max_num_seqs"])
        checked += 1
        ok = ours == theirs
        print(f"  {label:<78} {ours!s:>22} {theirs!s:>22}  {'yes' if ok else 'NO'}")
        if not ok:
            problems.append(f"{label}: sparktui {ours}, vLLM {theirs}")
    for (name, _), got in zip(folders, answer["kv_dtype"], strict=True):
        ours = sparktui_kv_dtype(name, rules)
        label = f"kv-cache-dtype auto, {name}"
        if "error" in got:
            print(f"  {label:<78} {ours:>22} {'(error)':>22}  —  {got['error'][:60]}")
            continue
        theirs = got["resolved"]
        theirs_norm = "fp8_e4m3" if theirs.startswith("fp8") else theirs
        checked += 1
        ok = ours == theirs_norm
        print(f"  {label:<78} {ours:>22} {theirs:>22}  {'yes' if ok else 'NO'}")
        if not ok:
            problems.append(f"{label}: sparktui {ours}, vLLM {theirs}")
    for (label, _, spec), got in zip(quant, answer.get("quantization", []), strict=True):
        ours = sparktui_loads_quantization(spec, rules)
        if "unreadable" in got:  # this version's transformers cannot read the config: nothing asked
            print(f"  {label:<78.78} {ours:>22} {'(unreadable)':>22}  —")
            continue
        theirs = "no" if "error" in got else "yes"
        checked += 1
        print(
            f"  {label:<78.78} {ours:>22} {theirs:>22}  {'yes' if ours == theirs else 'NO'}  {got.get('error', '')[:60]}"
        )
        if ours != theirs:
            problems.append(f"{label}: sparktui {ours}, vLLM {theirs} {got.get('error', got.get('method'))}")
    for question, got in zip(graphs, answer["cudagraphs"], strict=True):
        label = cudagraph_label(question)
        sizes, _, (pieces, full) = sparktui_cudagraphs(rules, question)
        ours = f"{len(sizes)} sizes, {pieces}+{full}"
        if "error" in got:
            print(f"  {label:<78.78} {ours:>22} {'(error)':>22}  —  {got['error'][:60]}")
            continue
        theirs = f"{len(got['sizes'])} sizes, {got['piecewise']}+{got['full']}"
        diffs = cudagraph_disagreements(rules, question, got)
        checked += 1
        print(f"  {label:<78.78} {ours:>22} {theirs:>22}  {'yes' if not diffs else 'NO'}")
        problems += [f"{label}: {d}" for d in diffs]
    for question, got in zip(runners, answer["model_runner"], strict=True):
        label, ours = model_runner_label(question), sparktui_model_runner(rules, question)
        checked += 1
        print(f"  {label:<78.78} {ours:>22} {got['runner']:>22}  {'yes' if ours == got['runner'] else 'NO'}")
        if ours != got["runner"]:
            problems.append(f"{label}: sparktui {ours}, vLLM {got['runner']}")
    kv_answers = [(*b, got, kv_disagreements) for b, got in zip(built, answer["kv"], strict=True)]
    kv_answers += [(*b, got, v4_disagreements) for b, got in zip(built_v4, answer["deepseek_v4"], strict=True)]
    for sc, case, plan, got, disagreements in kv_answers:
        if "unsupported" in got:  # this vLLM cannot group these layers at all: nothing to compare
            unsupported += 1
            print(f"  {sc.label():<78.78} {'—':>22} {'raises':>22}  —  {got['unsupported'][:50]}")
            continue
        diffs = disagreements(case, plan, got)
        checked += 1
        if "error" in got:
            ours_s = f"no (≤{plan.max_len(case['kv_memory'], case['max_model_len']):,})"
            theirs_s = f"no (≤{got['estimated_max_len']:,})" if got.get("estimated_max_len") else "no"
        else:
            _, tokens, conc = plan.capacity(case["kv_memory"], case["max_model_len"])
            ours_s = f"{tokens:,} {conc:.2f}x"
            theirs_s = f"{got['tokens']:,} {got['concurrency']:.2f}x" if got["tokens"] is not None else "(no log line)"
        print(f"  {sc.label():<78.78} {ours_s:>22} {theirs_s:>22}  {'yes' if not diffs else 'NO'}")
        problems += [f"{sc.label()}: {d}" for d in diffs]
    if unsupported:
        print(f"  ({unsupported} questions not asked: this vLLM raises on their layer mix)")
    return checked, checked - len(problems), problems, elapsed


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    unseen = "--unseen" in argv
    argv = [a for a in argv if a != "--unseen"]
    pythons = oracle_pythons()
    if argv:
        try:
            wanted = {parse_version(a, "version") for a in argv}
        except UserError as exc:
            print(f"bench/vllm_oracle.py: {exc} (or --help)", file=sys.stderr)
            return 2
        pythons = {v: p for v, p in pythons.items() if v in wanted}
    if not pythons:
        print("no vLLM venvs found: run python bench/vllm_oracle_venvs.py first", file=sys.stderr)
        return 2
    models = unseen_models() if unseen else None
    cases = scenarios(models)
    total_started = time.monotonic()
    summary = []
    with checkpoint_folders(unseen) as folders, quantization_questions(folders, stand_ins=not unseen) as quant:
        for version, python in pythons.items():
            try:
                checked, agreed, problems, elapsed = check_version(version, python, folders, cases, quant, models)
            except (RuntimeError, OSError, ValueError) as exc:  # this venv's vLLM failed: say so, go on
                print(f"\nvLLM {version}: the oracle failed: {str(exc)[-1500:]}")
                checked, agreed, problems, elapsed = 1, 0, [f"the oracle failed for {version}"], 0.0
            summary.append((version, checked, agreed, elapsed))
            for p in problems:
                print(f"  DISAGREES: {p}")
    print("\nsummary")
    for version, checked, agreed, elapsed in summary:
        print(f"  vLLM {version!s:<8} {agreed}/{checked} answers agree   {elapsed:.0f} s")
    print(f"  total run time {time.monotonic() - total_started:.0f} s for {len(summary)} versions")
    return 0 if all(c == a for _, c, a, _ in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
