"""The `vllm serve` flags sparktui models: one table, and everything derived from it.

`FLAGS` declares each flag once (name exactly as vLLM spells it, type, vLLM's own default,
range or choices, help, category). `ServeConfig` validates a configuration against it, renders
the argv that follows `vllm serve`, and `parse_serve_command` reads a pasted command line back.
Defaults were checked against vLLM 0.32.0 (vllm/engine/arg_utils.py, vllm/config/*.py).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from sparktui.core.command_line import split_command, strip_launcher
from sparktui.core.flag import Category, Flag
from sparktui.core.speculation import Speculation, parse_speculation
from sparktui.core.vllm_argv import (
    SHORTHANDS,
    apply_shorthands,
    dashed,
    dotted_value,
    expand_prefix,
    merge_dotted,
    shorthand,
)
from sparktui.core.vllm_choices import (
    ATTENTION_BACKENDS,
    DTYPES,
    KV_CACHE_DTYPES,
    LOAD_FORMATS,
    MAMBA_DTYPES,
    QUANTIZATIONS,
)
from sparktui.core.vllm_config_file import expand_config
from sparktui.core.vllm_rules import rules_for
from sparktui.errors import UserError

FLAGS: tuple[Flag, ...] = (
    # model
    Flag("model", "model", "str", None, "Hugging Face repo id or local folder of the model to serve.", "model"),
    Flag("--served-model-name", "served_model_name", "str", None,
         "Name(s) clients use in requests, space-separated (default: the model id).", "model", multi=True),
    Flag("--dtype", "dtype", "choice", "auto", "Weight and activation dtype; auto follows the model config.",
         "model", choices=DTYPES),
    Flag("--quantization", "quantization", "choice", None,
         "Weight quantization method; unset: read from the model's quantization config.", "model",
         choices=QUANTIZATIONS, open_choices=True, aliases=("-q",)),
    Flag("--max-model-len", "max_model_len", "size", None,
         "Longest request (prompt + output) in tokens; unset: the model's own; -1/auto: longest that fits.",
         "model", minimum=1, allow_auto=True, unit="tokens"),
    Flag("--vllm-version", "vllm_version", "version", None,
         "The vLLM that will run (X.Y[.Z]); the fit follows its rules. Unset: detected from the runner, "
         "else the newest sparktui knows. sparktui's own setting, never passed to vLLM.", "model", local=True),
    Flag("--trust-remote-code", "trust_remote_code", "bool", False,
         "Run the model repo's own Python code (only for repos you trust).", "model", negatable=True),
    # memory
    # vLLM's default: 0.92 from 0.20, 0.9 before (vllm_rules gpu_memory_utilization_default); sparktui passes
    # its own 0.9 on every launch (is_rendered), so only a command run as it is gets vLLM's
    Flag("--gpu-memory-utilization", "gpu_memory_utilization", "float", 0.92,
         "Fraction of (unified) memory vLLM claims; keep ≤ 0.90 on a DGX Spark so the OS keeps room.",
         "memory", minimum=0, maximum=1, min_exclusive=True, ours=0.9),
    Flag("--kv-cache-dtype", "kv_cache_dtype", "choice", "auto",
         "KV cache storage type; fp8 halves KV memory per token.", "memory", choices=KV_CACHE_DTYPES),
    Flag("--kv-cache-memory-bytes", "kv_cache_memory_bytes", "size", None,
         "Exact KV cache size in bytes (e.g. 40G); overrides --gpu-memory-utilization for the KV cache.",
         "memory", minimum=1, unit="bytes"),
    Flag("--block-size", "block_size", "int", None, "Tokens per KV cache block (vLLM picks 16 for most models).",
         "memory", minimum=1, unit="tokens"),
    Flag("--swap-space", "swap_space", "float", None,
         "CPU swap space per GPU in GiB (older vLLM only: absent from vLLM 0.32, which rejects it).",
         "memory", minimum=0, unit="GiB"),
    Flag("--enforce-eager", "enforce_eager", "bool", False,
         "Skip CUDA graphs: less memory and faster start, slower decoding.", "memory", negatable=True),
    # scheduling
    Flag("--max-num-seqs", "max_num_seqs", "int", None,
         "Most sequences in one batch (concurrent requests); unset: vLLM's default for the device.",
         "scheduling", minimum=1),
    Flag("--max-num-batched-tokens", "max_num_batched_tokens", "size", None,
         "Most tokens in one scheduler step; larger speeds prefill but raises the activation peak.",
         "scheduling", minimum=1, unit="tokens"),
    Flag("--enable-prefix-caching", "enable_prefix_caching", "bool", True,
         "Reuse KV blocks of shared prompt prefixes; unset: vLLM's default (on in 0.32).",
         "scheduling", negatable=True, ours=None),
    # server
    Flag("--host", "host", "str", None,
         "Address to listen on; sparktui uses 127.0.0.1 (vLLM's default listens on all interfaces).",
         "server", ours="127.0.0.1"),
    Flag("--port", "port", "int", 8000, "TCP port of the OpenAI-compatible server.", "server",
         minimum=1, maximum=65535),
    Flag("--api-key", "api_key", "str", None,
         "Key clients must send; passed to vLLM as VLLM_API_KEY, never on the command line.", "server",
         secret=True, env="VLLM_API_KEY"),
    # advanced
    Flag("--tensor-parallel-size", "tensor_parallel_size", "int", 1, "Number of GPUs to split the model over.",
         "advanced", minimum=1, maximum=1024, aliases=("-tp",)),
    Flag("--speculative-config", "speculative_config", "json", None,
         "Speculative decoding settings as JSON (method, draft model, num_speculative_tokens).",
         "advanced", aliases=("-sc",), example='{"method": "ngram", "num_speculative_tokens": 3}'),
    Flag("--enable-lora", "enable_lora", "bool", False, "Allow serving LoRA adapters.", "advanced",
         negatable=True),
    Flag("--mamba-ssm-cache-dtype", "mamba_ssm_cache_dtype", "choice", "auto",
         "Mamba / linear-attention recurrent state dtype (hybrid models); auto: the model's own (Nemotron-H float32).",
         "advanced", choices=MAMBA_DTYPES),
    # flags the fit models (the CUDA-graph estimate, the loader, the towers, the scheduler)
    Flag("--attention-backend", "attention_backend", "choice", None,
         "Attention kernels; unset: vLLM picks for the GPU and model (the CUDA-graph estimate depends on it).",
         "advanced", choices=ATTENTION_BACKENDS, open_choices=True),
    Flag("--compilation-config", "compilation_config", "json", None,
         "torch.compile and CUDA-graph settings as JSON (cudagraph_mode, cudagraph_capture_sizes, …).",
         "advanced", aliases=("-cc",), any_json=True, example='{"cudagraph_mode": "PIECEWISE"}'),
    Flag("--attention-config", "attention_config", "json", None,
         "Attention settings as JSON; its backend is --attention-backend's (vLLM takes one of the two).",
         "advanced", example='{"backend": "FLASHINFER"}'),
    Flag("--load-format", "load_format", "choice", "auto",
         "How the weights are loaded; instanttensor loads safetensors straight to the GPU (more non-torch memory).",
         "advanced", choices=LOAD_FORMATS, open_choices=True),
    Flag("--async-scheduling", "async_scheduling", "bool", None,
         "Schedule the next step while one runs; unset: vLLM's default (on, unless the speculative method "
         "is ngram, medusa, mlp_speculator or suffix).", "scheduling", negatable=True),
    Flag("--language-model-only", "language_model_only", "bool", False,
         "Serve a multimodal model for text only: its vision / audio towers are not loaded (vLLM 0.17+).",
         "model", negatable=True),
    Flag("--limit-mm-per-prompt", "limit_mm_per_prompt", "json", None,
         "Most items of each modality per prompt as JSON; 0 for every modality of a tower skips it (vLLM 0.15+).",
         "model", example='{"image": 0, "video": 0}'),
    Flag("--mxfp4-layers", "mxfp4_layers", "str", None,
         "Weights eugr's spark-vllm-docker MXFP4 build stores as MXFP4 (moe,qkv,o,lm_head); not an upstream flag.",
         "advanced"),
)  # fmt: skip

# --mxfp4-layers names (eugr/spark-vllm-docker's vllm-node-mxfp4 build): moe → the routed experts,
# qkv / o → the attention projections, lm_head → the output layer
MXFP4_LAYER_NAMES = ("moe", "qkv", "o", "lm_head")

_BY_FIELD: dict[str, Flag] = {f.field: f for f in FLAGS}
_BY_NAME: dict[str, Flag] = {}
for _flag in FLAGS:
    for _name in (_flag.name, *_flag.aliases):
        _BY_NAME[_name] = _flag
_BY_KEY: dict[str, Flag] = {f.key: f for f in FLAGS}


def flag_by_field(field: str) -> Flag:
    try:
        return _BY_FIELD[field]
    except KeyError:
        raise KeyError(f"no flag for ServeConfig field {field!r}") from None


def flag_by_name(name: str) -> Flag | None:
    """The flag for "--gpu-memory-utilization", an alias such as "-tp", or a bare key."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    return _BY_KEY.get(name.lstrip("-")) if not name.startswith("-") else None


def flag_by_key(key: str) -> Flag | None:
    """The flag for a TOML key (the flag name without dashes, e.g. "gpu-memory-utilization")."""
    return _BY_KEY.get(key)


def close_matches(name: str) -> list[str]:
    """Modelled flag names that look like `name` (for "did you mean" hints)."""
    keys = [f.key for f in FLAGS]
    return ["--" + k for k in difflib.get_close_matches(name.lstrip("-"), keys, n=3, cutoff=0.6)]


def flags_in(category: Category) -> list[Flag]:
    return [f for f in FLAGS if f.category == category]


def _default(field: str) -> Any:
    return _BY_FIELD[field].field_default


def _lift_flags(extra: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """({field: value} of the modelled flags in `extra`, the tokens left): `--flag value`,
    `--flag=value`, `--bool-flag` and `--no-bool-flag` as vLLM's argparse reads them."""
    found: dict[str, Any] = {}
    kept: list[Any] = []
    dotted: dict[str, tuple[Flag, dict[str, Any]]] = {}
    shorthands: dict[str, list[str]] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        i += 1
        if not isinstance(token, str) or not _is_flag_token(token):
            kept.append(token)
            continue
        name, eq, inline = token.partition("=")
        if _dotted(name):
            value = inline if eq else extra[i] if i < len(extra) and isinstance(extra[i], str) else None
            if value is None:
                raise UserError(f"extra_args: {name} needs a value, e.g. {name} VALUE")
            if not _add_dotted(dotted, name, value):
                kept += [token] if eq else [token, value]
            i += 0 if eq else 1
            continue
        if (short := shorthand(name)) is not None:
            words, i = _shorthand_words(extra, i, short, inline if eq else None)
            shorthands[short] = words or [""]
            continue
        flag, negated = _flag_for(name)
        if flag is None or flag.positional:
            kept.append(token)
            continue
        if flag.type == "bool":
            if eq:
                raise UserError(f"extra_args: {name} takes no value (got {inline!r}); write {flag.name} alone")
            found[flag.field] = not negated
            continue
        if eq:
            found[flag.field] = inline
            continue
        if i >= len(extra) or not isinstance(extra[i], str) or _is_flag_token(extra[i]):
            example = f"{name} sk-..." if flag.secret else f"{name} VALUE"
            raise UserError(f"extra_args: {name} needs a value, e.g. {example}; expected {flag.expected()}")
        values = [extra[i]]
        i += 1
        while flag.multi and i < len(extra) and isinstance(extra[i], str) and not _is_flag_token(extra[i]):
            values.append(extra[i])
            i += 1
        found[flag.field] = " ".join(values)
    for flag, keys in dotted.values():  # vLLM appends them after everything: they win
        found[flag.field] = keys
    apply_shorthands(found, shorthands)
    return found, kept


def _shorthand_words(tokens: Sequence[Any], i: int, short: str, inline: str | None) -> tuple[list[str], int]:
    """A shorthand flag's words and where reading goes on: its `=value`, else the next word (every word
    up to the next flag for a list, `--cudagraph-capture-sizes 1 2 4`)."""
    if inline is not None:
        return [inline], i
    words: list[str] = []
    while i < len(tokens) and not _is_flag_token(str(tokens[i])) and (not words or SHORTHANDS[short][2] == "ints"):
        words.append(str(tokens[i]))
        i += 1
    return words, i


def _flag_for(name: str) -> tuple[Flag | None, bool]:
    """The modelled flag a token's name stands for as vLLM reads it (underscores as dashes, a unique
    prefix of a `vllm serve` option, an alias), and whether it is the flag's --no- form."""
    name = dashed(name)
    if name == "--model":
        return _BY_FIELD["model"], False
    for spelled in (name, expand_prefix(name)):
        if spelled is None:
            continue
        if spelled in _BY_NAME:
            return _BY_NAME[spelled], False
        negative = _BY_NAME.get("--" + spelled[5:]) if spelled.startswith("--no-") else None
        if negative is not None and negative.negatable:
            return negative, True
    return None, False


def _dotted(name: str) -> bool:
    """`--json-flag.key` (vLLM's dotted form: one key of a JSON flag)."""
    return "." in name and _is_flag_token(name)


def _add_dotted(dotted: dict[str, tuple[Flag, dict[str, Any]]], name: str, value: str) -> bool:
    """Merge `--flag.a.b VALUE` into `dotted` (by the name before the first '.', as vLLM gathers them)
    when the flag is a modelled JSON flag; False when it is not (the tokens then pass through)."""
    head, *keys = dashed(name).split(".")
    listed = keys[-1].endswith("+")
    if listed:
        keys[-1] = keys[-1][:-1]
    flag, negated = _flag_for(head)
    if flag is None or negated or flag.type != "json" or not all(keys):
        return False
    parsed = value.split(",") if listed else dotted_value(value, name)
    merge_dotted(dotted.setdefault(head, (flag, {}))[1], keys, parsed)
    return True


def _refuse_token_in_argv(extra: list[Any]) -> None:
    """vLLM's --hf-token takes the token itself as its value (bare, it means the saved login): on the
    command line every user sees it (ps) and it lands in the state record and logs."""
    for i, token in enumerate(extra):
        if not isinstance(token, str):
            continue
        name, eq, inline = token.partition("=")
        name = dashed(name)
        name = expand_prefix(name) or name  # --hf_token and --hf-tok are --hf-token to vLLM
        following = extra[i + 1] if i + 1 < len(extra) else None
        given = inline if eq else following if isinstance(following, str) and not following.startswith("-") else None
        if name == "--hf-token" and given and given.lower() not in ("true", "false"):
            raise UserError(
                "--hf-token: a token given on the command line is visible to every user and lands in logs; "
                "set HF_TOKEN in the environment or in the profile's [env] instead (a bare --hf-token uses "
                "the saved `hf auth login`)"
            )


def _is_flag_token(token: str) -> bool:
    return token.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", token) and token != "-"


class ServeConfig:
    """A `vllm serve` configuration. Construction validates every value against FLAGS and
    raises UserError naming the flag; attribute assignment is validated the same way.

    A plain class, not a pydantic model: it is built while the panel draws its first screen, and
    pydantic (with its plugin scan) cost ~70 ms of a ~0.4 s start there. `model_dump`,
    `model_copy` and `model_fields_set` keep the pydantic names and meaning the callers use."""

    model: str
    served_model_name: str | None = _default("served_model_name")
    host: str = _default("host")
    port: int = _default("port")
    api_key: str | None = _default("api_key")
    gpu_memory_utilization: float = _default("gpu_memory_utilization")
    max_model_len: int | None = _default("max_model_len")
    max_num_seqs: int | None = _default("max_num_seqs")
    max_num_batched_tokens: int | None = _default("max_num_batched_tokens")
    kv_cache_dtype: str = _default("kv_cache_dtype")
    mamba_ssm_cache_dtype: str = _default("mamba_ssm_cache_dtype")
    kv_cache_memory_bytes: int | None = _default("kv_cache_memory_bytes")
    block_size: int | None = _default("block_size")
    swap_space: float | None = _default("swap_space")
    quantization: str | None = _default("quantization")
    dtype: str = _default("dtype")
    enable_prefix_caching: bool | None = _default("enable_prefix_caching")
    enforce_eager: bool = _default("enforce_eager")
    tensor_parallel_size: int = _default("tensor_parallel_size")
    trust_remote_code: bool = _default("trust_remote_code")
    vllm_version: str | None = _default("vllm_version")
    speculative_config: str | None = _default("speculative_config")
    enable_lora: bool = _default("enable_lora")
    attention_backend: str | None = _default("attention_backend")
    compilation_config: str | None = _default("compilation_config")
    attention_config: str | None = _default("attention_config")
    load_format: str = _default("load_format")
    async_scheduling: bool | None = _default("async_scheduling")
    language_model_only: bool = _default("language_model_only")
    limit_mm_per_prompt: str | None = _default("limit_mm_per_prompt")
    mxfp4_layers: str | None = _default("mxfp4_layers")
    extra_args: list[str]

    # the fields, in the order they are validated (the first bad one is the error)
    FIELDS: ClassVar[tuple[str, ...]]
    __hash__ = None  # type: ignore[assignment]  # mutable, as a pydantic model was
    _fields_set: set[str]
    _speculation: Speculation | None

    def __init__(self, **data: Any) -> None:
        data = _flags_out_of_extra_args(data)
        values: dict[str, Any] = {}
        errors: list[str] = []
        for name in self.FIELDS:
            if name in data:
                values[name] = _validated(name, data[name])
            elif name == "model":
                errors.append("model: missing; give the model to serve (a Hugging Face repo id or a local folder)")
        for name in data:
            if name not in _FIELD_NAMES:
                hint = close_matches(str(name))
                errors.append(
                    f"{name}: not a setting sparktui knows" + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                )
        if values.get("attention_backend") and _config_backend(values.get("attention_config")):
            errors.append(
                "--attention-backend and --attention-config's backend: vLLM takes one of them (it stops: "
                "'attention_backend and attention_config.backend are mutually exclusive'); drop one"
            )
        if errors:
            raise UserError("; ".join(errors))
        speculation = parse_speculation(values.get("speculative_config"))
        state = self.__dict__
        for name in self.FIELDS:
            state[name] = values[name] if name in values else [] if name == "extra_args" else _default(name)
        state["_fields_set"] = set(values)
        state["_speculation"] = speculation

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELD_NAMES:
            raise UserError(f"{name}: not a setting sparktui knows")
        if name == "extra_args" and isinstance(value, list):
            # a modelled flag assigned in extra_args moves to its field, as at construction
            _refuse_token_in_argv(value)
            found, value = _lift_flags(value)
            for field_name, lifted in found.items():
                if not _BY_FIELD[field_name].secret or getattr(self, field_name) in (None, ""):
                    self._assign(field_name, lifted)
        self._assign(name, value)

    def _assign(self, name: str, value: Any) -> None:
        value = _validated(name, value)
        state = self.__dict__
        if name == "speculative_config":
            state["_speculation"] = parse_speculation(value)
        state[name] = value
        self._fields_set.add(name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.FIELDS)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS if n not in _SECRET_FIELDS)
        return f"ServeConfig({shown})"

    def model_dump(self, exclude: set[str] | None = None) -> dict[str, Any]:
        """Every field's value (lists copied), less `exclude`."""
        return {
            n: list(v) if isinstance(v := getattr(self, n), list) else v
            for n in self.FIELDS
            if not exclude or n not in exclude
        }

    @property
    def model_fields_set(self) -> set[str]:
        """The fields given at construction (a modelled flag lifted from extra_args counts) or assigned since."""
        return set(self._fields_set)

    def model_copy(self, update: dict[str, Any] | None = None) -> ServeConfig:
        """A shallow copy with `update` applied unvalidated (callers pass values already typed)."""
        new = object.__new__(ServeConfig)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(update or {})
        new.__dict__["_fields_set"] = self._fields_set | set(update or {})
        if update and "speculative_config" in update:
            new.__dict__["_speculation"] = parse_speculation(update["speculative_config"])
        return new

    def __copy__(self) -> ServeConfig:
        return self.model_copy()  # its own fields_set: an assignment to the copy leaves this one's alone

    @property
    def mxfp4_layer_names(self) -> tuple[str, ...]:
        """--mxfp4-layers as names (empty when unset)."""
        return tuple(self.mxfp4_layers.split(",")) if self.mxfp4_layers else ()

    @property
    def chosen_attention_backend(self) -> str | None:
        """The attention backend asked for: --attention-backend, or the backend in --attention-config
        (vLLM 0.32 EngineArgs.create_engine_config puts the flag into attention_config.backend)."""
        return self.attention_backend or _config_backend(self.attention_config)

    @property
    def speculation(self) -> Speculation | None:
        """--speculative-config, parsed (once, when it was set)."""
        return self._speculation

    def replace(self, **changes: Any) -> ServeConfig:
        """A validated copy with some fields changed (UserError naming the flag if one is bad)."""
        return ServeConfig(**{**self.model_dump(), **changes})

    def is_rendered(self, flag: Flag) -> bool:
        """Whether `flag` goes on the command line: set, and not what sparktui and vLLM both
        assume anyway (so sparktui's safer defaults, like --host 127.0.0.1, are always passed)."""
        value = getattr(self, flag.field)
        if flag.secret or flag.positional or flag.local or value is None:
            return False
        return bool(value != flag.default or value != flag.field_default)

    def to_argv(self) -> list[str]:
        """What follows `vllm serve`: the model, then the flags in table order, then extra_args."""
        argv = [self.model]
        for flag in FLAGS:
            if self.is_rendered(flag):
                argv += flag.to_argv(getattr(self, flag.field))
        return argv + list(self.extra_args)

    def to_env(self) -> dict[str, str]:
        """Secrets for the server's environment (VLLM_API_KEY), never its argv."""
        env: dict[str, str] = {}
        for flag in FLAGS:
            value = getattr(self, flag.field)
            if flag.secret and flag.env and value is not None:
                env[flag.env] = str(value)
        return env

    @property
    def unknown_flags(self) -> list[str]:
        """The flags in extra_args, which sparktui passes through without understanding them."""
        return [tok.split("=", 1)[0] for tok in self.extra_args if _is_flag_token(tok)]

    @property
    def unmodelled_flags(self) -> list[str]:
        """The flags the fit does not model: those in extra_args, and a --load-format other than the
        default or InstantTensor (the one loader whose memory vLLM logs have measured)."""
        loader = [] if self.load_format.lower() in ("auto", "instanttensor") else ["--load-format"]
        return [*self.unknown_flags, *loader]

    def to_toml_values(self) -> dict[str, Any]:
        """The [serve] table: TOML key → value, for every value that differs from the default."""
        out: dict[str, Any] = {}
        for flag in FLAGS:
            value = getattr(self, flag.field)
            if flag.positional or value != flag.field_default:
                out[flag.key] = value
        return out


ServeConfig.FIELDS = tuple(n for n in ServeConfig.__annotations__ if n[0] != "_" and n != "FIELDS")
_FIELD_NAMES = frozenset(ServeConfig.FIELDS)
_SECRET_FIELDS = frozenset(f.field for f in FLAGS if f.secret)  # never in a repr


def _config_backend(attention_config: str | None) -> str | None:
    backend = json.loads(attention_config).get("backend") if attention_config else None
    return str(backend) if backend not in (None, "auto") else None


def _flags_out_of_extra_args(data: dict[str, Any]) -> dict[str, Any]:
    """A modelled flag given in extra_args moves to its field, so the fit reads it like any other
    and it is parsed once. A later value wins, as on vLLM's command line (extra_args come last),
    except a secret (--api-key) already set: secrets travel by environment, never on the command
    line, where every user can read them."""
    if not isinstance(data.get("extra_args"), list):
        return data
    _refuse_token_in_argv(data["extra_args"])
    found, kept = _lift_flags(data["extra_args"])
    if not found:
        return data
    out = {**data, "extra_args": kept}
    for field_name, value in found.items():
        if not _BY_FIELD[field_name].secret or out.get(field_name) in (None, ""):
            out[field_name] = value
    return out


def _validated(name: str, value: Any) -> Any:
    """One field's typed value, or UserError naming its flag."""
    if name == "extra_args":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise UserError(f"extra_args: got {value!r}; expected a list of strings")
        return list(value)
    value = _BY_FIELD[name].coerce(value)
    if name == "mxfp4_layers" and value is not None:
        names = [n.strip() for n in value.split(",")]
        if not all(n in MXFP4_LAYER_NAMES for n in names):
            raise UserError(
                f"--mxfp4-layers: got {value}; expected a comma-separated list of {', '.join(MXFP4_LAYER_NAMES)} "
                "(e.g. moe,qkv,o,lm_head)"
            )
        return ",".join(names)
    return value


def parse_serve_command(text_or_argv: str | Sequence[str], base: ServeConfig | None = None) -> ServeConfig:
    """Read `vllm serve MODEL …` (or `python -m vllm.entrypoints.openai.api_server --model M …`,
    or just the argv after `vllm serve`) into a ServeConfig. Flags sparktui does not model are
    kept in extra_args, in order, with their values; `ServeConfig.unknown_flags` lists them.

    With `base` (e.g. a profile's config), the flags given override it and the model may be
    left out: `sparktui fit PROFILE --max-model-len 8k`."""
    tokens = split_command(text_or_argv) if isinstance(text_or_argv, str) else list(text_or_argv)
    env: dict[str, str] = {}
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        name, value = tokens.pop(0).split("=", 1)
        env[name] = value
    tokens = strip_launcher(tokens)
    tokens, _ = expand_config(tokens)  # `--config FILE.yaml`: the file's flags, placed as vLLM places them

    values: dict[str, Any] = {}
    extra: list[str] = []
    dotted: dict[str, tuple[Flag, dict[str, Any]]] = {}
    shorthands: dict[str, list[str]] = {}  # --spec-method & co.
    given_model = False
    for name, value in env.items():
        if name == "VLLM_API_KEY":
            values["api_key"] = value
        else:
            raise UserError(
                f"{name}={value}: environment settings are not part of the serve flags; "
                "put them in the profile's [env] section"
            )

    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag_token(token):
            if given_model:
                raise UserError(
                    f"unexpected argument {token!r}: the model is already {values['model']!r} "
                    "(a flag's value missing its flag?)"
                )
            values["model"] = token
            given_model = True
            continue
        name, eq, inline = token.partition("=")
        if _dotted(name):
            if not eq and i >= len(tokens):
                raise UserError(f"{name}: missing its value (vLLM reads the next word as this key's value)")
            value = inline if eq else tokens[i]
            i += 0 if eq else 1
            if not _add_dotted(dotted, name, value):
                extra += [token] if eq else [token, value]
            continue
        if (short := shorthand(name)) is not None:  # --spec-method mtp: a key of --speculative-config
            words, i = _shorthand_words(tokens, i, short, inline if eq else None)
            if not words:
                raise UserError(f"{name}: missing its value")
            shorthands[short] = words
            continue
        flag, negated = _flag_for(name)
        if flag is None:
            # Unknown: keep it and the values that follow it, verbatim.
            extra.append(token)
            while not eq and i < len(tokens) and not _is_flag_token(tokens[i]):
                extra.append(tokens[i])
                i += 1
            continue
        if flag.type == "bool":
            if eq:
                raise UserError(
                    f"{name}: takes no value (got {inline!r}); write {flag.name} or {flag.negative}"
                    if flag.negatable
                    else f"{name}: takes no value (got {inline!r}); write {flag.name}"
                )
            values[flag.field] = not negated
            continue
        if eq:
            raw: str = inline
        else:
            if i >= len(tokens) or _is_flag_token(tokens[i]):
                raise UserError(f"{name}: missing its value; expected {flag.expected()}")
            raw = tokens[i]
            i += 1
            if flag.secret and given_model and i < len(tokens) and not _is_flag_token(tokens[i]):
                raise UserError(  # vLLM takes every word up to the next flag as a key; never echo one
                    f"{name}: more than one value; sparktui passes one key to vLLM, by VLLM_API_KEY: give one"
                )
            if flag.multi:
                names = [raw]
                while i < len(tokens) and not _is_flag_token(tokens[i]):
                    names.append(tokens[i])
                    i += 1
                raw = " ".join(names)
        values[flag.field] = raw
        given_model = given_model or flag.field == "model"
    for flag, keys in dotted.values():  # vLLM appends them after everything: they win
        values[flag.field] = keys
    apply_shorthands(values, shorthands)
    if base is not None:
        values = {**base.model_dump(), **values}
        extra = [*base.extra_args, *extra]
    if "model" not in values:
        hint = ""
        if any(not _is_flag_token(tok) for tok in extra):
            hint = f" (if it follows {extra[0]}, which sparktui does not know, put the model first)"
        raise UserError(f"no model in the command: expected `vllm serve MODEL [flags…]`{hint}")
    values["extra_args"] = extra
    return ServeConfig(**values)


def utilization_left_to_vllm(config: ServeConfig, version: str | None = None) -> tuple[float, str] | None:
    """A pasted `vllm serve` command without --gpu-memory-utilization, run as it is: (the utilization the
    vLLM that will run takes, a line saying so); None when the command gives one. `config` must come
    straight from parse_serve_command (its fields_set is what the command gave); `version` (else the
    config's --vllm-version; neither: the newest rules) is the vLLM that will run. sparktui's own
    launches never leave the flag out: they pass `ours` (0.9)."""
    if "gpu_memory_utilization" in config.model_fields_set:
        return None
    version = version or config.vllm_version
    rules = rules_for(version)
    util = rules.default_utilization
    ours = _BY_FIELD["gpu_memory_utilization"].field_default
    which = f"vLLM {rules.version}" if version else f"vLLM {rules.version} (the newest known)"
    return util, (
        f"--gpu-memory-utilization not in the command: {which} takes {util:g} (0.9 before vLLM 0.20, 0.92 "
        f"from 0.20: vllm/config/cache.py CacheConfig); a launch by sparktui passes {ours:g}"
    )
