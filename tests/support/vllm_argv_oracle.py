"""Run under a vLLM venv (not sparktui's): what `vllm serve`'s own parser reads from each argv.

Reads one JSON list per stdin line (the words after `vllm serve`), prints one JSON object per line:
the fields sparktui models, as vLLM's parser leaves them (enums by name, JSON flags as objects), or
{"error": ...} where vLLM's parser refuses the argv. vLLM 0.32.0: FlexibleArgumentParser with
make_arg_parser (vllm/entrypoints/launchers/cli_args.py), as `vllm serve` builds it.
"""

import contextlib
import io
import json
import re
import sys

from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

FIELDS = (
    "served_model_name", "dtype", "quantization", "max_model_len", "trust_remote_code", "gpu_memory_utilization",
    "kv_cache_dtype", "kv_cache_memory_bytes", "block_size", "enforce_eager", "max_num_seqs",
    "max_num_batched_tokens", "enable_prefix_caching", "host", "port", "tensor_parallel_size",
    "speculative_config", "enable_lora", "mamba_ssm_cache_dtype", "attention_backend", "load_format",
    "async_scheduling", "language_model_only", "limit_mm_per_prompt",
)  # fmt: skip


def plain(value):
    if hasattr(value, "name") and not isinstance(value, (str, int, float, bool, dict, list)):
        return value.name
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def main():
    parser = FlexibleArgumentParser(prog="vllm serve")
    parser.add_argument("model_tag", nargs="?")
    parser = make_arg_parser(parser)
    for line in sys.stdin:
        argv = json.loads(line)
        print(json.dumps(read_argv(parser, argv)), flush=True)


def read_argv(parser, argv):
    """vLLM's reading; flags this vLLM does not know (newer ones, or removed: --swap-space in 0.32), and
    a flag whose value is a shell variable the line leaves unexpanded, are taken out and listed under
    "unknown_to_vllm", as a vLLM that knows them (or a shell that expands them) would read the rest."""
    dropped = []
    while True:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(["serve", *argv])
            break
        except SystemExit:
            message = err.getvalue().strip().splitlines()[-1]
            words = message.partition("unrecognized arguments: ")[2].split()
            unset = re.search(r"argument (\S+?)(/\S+)?: invalid \w+ value: '(\$\S+)'", message)
            if unset and unset.group(3) in argv:  # a shell variable left in a flag sparktui does not model
                words = [argv[argv.index(unset.group(3)) - 1], unset.group(3)]
            if not words or not all(w in argv for w in words):
                return {"error": message}
            for word in words:
                argv = argv[: argv.index(word)] + argv[argv.index(word) + 1 :]
            dropped += words
    read = {f: plain(getattr(ns, f)) for f in FIELDS}
    read["model"] = ns.model_tag or ns.model
    if dropped:
        read["unknown_to_vllm"] = dropped
    return read


if __name__ == "__main__":
    main()
