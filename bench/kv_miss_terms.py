"""Per KV-memory miss of bench/fit_accuracy.py: the fit's terms beside what the log prints, term by term.

vLLM's KV memory is request − weights − torch peak − non-torch − CUDA-graph estimate
(v1/worker/gpu_worker.py Worker.determine_available_memory). A log at INFO level prints the weights
("Model loading took"), the graph estimate ("Estimated CUDA graph memory", 0.20 on) and the KV memory,
so the torch peak and the non-torch growth are seen only together (the rest); a DEBUG log splits them
("Memory profiling takes … torch peak memory increase … non-torch forward increase memory").
The fit's side is split further: the profile pass's forward, sampler, encoder and drafter passes
(its peak is the largest of them) and the CUDA-graph estimate's backend and graph counts."""

from __future__ import annotations

from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.fit import fit, kv_dtype_bytes, plan_kv
from sparktui.core.fit_settings import (
    cudagraph_estimate,
    drafter_pass_bytes,
    encoder_term,
    profile_activation,
    settings_from,
)

GiB = 1024**3


def terms(case: Any, spec: Any, rules: Any, machine: Any) -> dict[str, Any]:
    """The fit's terms for one case, in GiB, with the passes and the graph estimate spelled out."""
    config = ServeConfig(model=spec.name if case.arch is None else "inline", **case.serve)
    versioned = config.model_copy(update={"vllm_version": str(rules.version)})
    s = settings_from(versioned, spec, machine, rules)
    result = fit(versioned, spec, machine)
    b = result.budget
    forward, sampler = profile_activation(spec, s, machine.sms)
    encoder = encoder_term(spec, s)
    drafter = drafter_pass_bytes(spec, s) if s.num_spec else 0
    kv_bytes, _ = kv_dtype_bytes(spec, s.kv_cache_dtype, rules)
    plan = plan_kv(spec, kv_bytes, s.block_size, s.tp, s.max_num_batched_tokens, s.prefix_caching, s.num_spec,
                   s.mtp, rules, s.async_scheduling)  # fmt: skip
    graphs = cudagraph_estimate(spec, s, machine, kv_bytes, plan)
    return {
        "requested": b["requested"] / GiB,
        "weights": b["weights"] / GiB,
        "peak": b["activation_peak"] / GiB,
        "forward": forward / GiB,
        "sampler": sampler / GiB,
        "encoder": (encoder.forward / GiB, encoder.outputs / GiB) if encoder else None,
        "drafter": drafter / GiB,
        "non_torch": b["non_torch"] / GiB,
        "graphs": b["cuda_graphs"] / GiB,
        "graph_parts": (graphs.backend, graphs.piecewise, graphs.full),
        "kv": b["kv_cache"] / GiB,
        "tokens": s.max_num_batched_tokens,
        "seqs": s.max_num_seqs,
    }


def print_miss_terms(misses: list[tuple[Any, dict[str, Any], Any]]) -> None:
    """misses: (case, terms(...), the log's LogMemory or None)."""
    if not misses:
        return
    print()
    print("Per miss, term by term (GiB; Δ = log − fit, so + is memory the fit leaves out):")
    for case, t, m in misses:
        print(
            f"  {case.id} (vLLM {'.'.join(map(str, case.version))}, {t['tokens']:,} batched tokens, {t['seqs']} sequences)"
        )
        enc = t["encoder"]
        passes = (
            f"forward {t['forward']:.2f}, sampler {t['sampler']:.2f}"
            + (f", encoder {enc[0]:.2f} (outputs kept {enc[1]:.2f})" if enc else "")
            + (f", drafter {t['drafter']:.2f}" if t["drafter"] else "")
        )
        backend, pieces, full = t["graph_parts"]
        rest_fit = t["peak"] + t["non_torch"]
        graph_how = f"{backend} first capture, {pieces} PIECEWISE + {full} FULL graphs"
        if not t["graphs"]:
            graph_how += " (this version subtracts no estimate)"
        lines = [
            ("request", t["requested"], m.utilization * m.total_gib if m else None, ""),
            ("weights", t["weights"], m.weights_gib if m else None, ""),
            ("torch peak", t["peak"], m.torch_peak_gib if m else None, f"the largest pass: {passes}"),
            ("non-torch", t["non_torch"], m.non_torch_gib if m else None, "a measured constant"),
            ("peak + non-torch", rest_fit, m.rest_gib if m else None, "what an INFO log implies"),
            ("CUDA graphs", t["graphs"], m.graphs_gib if m else None, graph_how),
            ("KV memory", t["kv"], m.kv_gib if m else None, ""),
        ]  # fmt: skip
        for name, fitted, logged, how in lines:
            seen = "—" if logged is None else f"{logged:.2f}"
            delta = "" if logged is None else f"{logged - fitted:+.2f}"
            print(f"    {name:<17} fit {fitted:>6.2f}  log {seen:>6} {delta:>6}  {how}")
