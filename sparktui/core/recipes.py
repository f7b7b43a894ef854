"""Recipes of the other Spark tools, read into a profile and written back.

Three YAML formats, told apart by their keys (`detect_format`):

  eugr         eugr/spark-vllm-docker's run-recipe.py: recipe_version, name, container, command (a
               `vllm serve` template; run-recipe.py fills it with `command.format(**defaults)`), env,
               mods, build_args, solo_only / cluster_only; the nodes come from its -n or .env.
  sparkrun     sparkrun's recipes: model, runtime, container, defaults, env, command (a template with
               {model} and the defaults, filled until nothing changes), min_nodes / max_nodes / mode,
               metadata; the hosts come from its -H or a saved cluster.
  vllm-config  `vllm serve --config FILE.yaml`: keys are vLLM flag names (core/vllm_config_file.py).

What is read is kept (`RecipeRead.read`), keys the fit does not model are listed
(`RecipeRead.not_modelled`), and a recipe's container and node count map to the profile's
[runner] and [cluster]. `export_recipe` writes a profile back in each format; reading the export
gives the same serve flags, environment, runner image and cluster.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sparktui.core.cluster import Backend, ClusterSettings
from sparktui.core.config import FLAGS, ServeConfig, flag_by_name, parse_serve_command
from sparktui.core.vllm_config_file import config_file_args, flag_name, read_yaml_mapping
from sparktui.errors import UserError

RecipeFormat = Literal["eugr", "sparkrun", "vllm-config"]
FORMATS: tuple[RecipeFormat, ...] = ("vllm-config", "eugr", "sparkrun")
RECIPE_SUFFIXES = (".yaml", ".yml")

# sparktui's own setting (which vLLM will run) has no slot in the other formats: a comment carries it.
_VERSION_COMMENT = re.compile(r"^#\s*sparktui vllm-version:\s*(\S+)\s*$", re.MULTILINE)

# Keys each format defines (run-recipe.py load_recipe; sparkrun core/recipe.py _KNOWN_KEYS) that say
# nothing about vLLM's memory or flags: shown as read, not listed as unmodelled.
_EUGR_INFO = {
    "recipe_version", "name", "description", "model", "container", "command", "defaults", "env", "solo_only",
    "cluster_only",
}  # fmt: skip
_SPARKRUN_INFO = {
    "sparkrun_version", "recipe_version", "name", "description", "model", "runtime", "container",
    "defaults", "env", "command", "mode", "min_nodes", "max_nodes", "solo_only", "cluster_only", "metadata",
}  # fmt: skip

# sparkrun builds a command from these defaults when a recipe has none (runtimes/vllm.py _VLLM_FLAG_MAP)
_SPARKRUN_FLAG_KEYS = {"tensor_parallel": "--tensor-parallel-size"}


def is_recipe_path(path_or_name: str | Path) -> bool:
    return str(path_or_name).endswith(RECIPE_SUFFIXES)


@dataclass
class RecipeRead:
    """One recipe as sparktui read it."""

    path: Path
    format: RecipeFormat
    name: str
    description: str
    serve: ServeConfig
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None  # the container the recipe runs vLLM in
    nodes_needed: int = 1  # Sparks the recipe runs on (one GPU each)
    backend: str | None = None  # "ray" or "mp" when it runs on several nodes
    command: list[str] = field(default_factory=list)  # the `vllm serve` argv it stands for (no secrets)
    not_modelled: list[str] = field(default_factory=list)  # recipe keys and flags the fit does not model
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What was read, for `sparktui fit` / `serve` to show."""
        out = [f"recipe     {self.path} ({self.format}): {self.name}"]
        if self.description and self.description != self.name:
            out.append(f"  {self.description}")
        out.append(f"  model    {self.serve.model}")
        out.append(f"  command  {shlex.join(self.command)}")
        if self.image:
            out.append(f"  runner   container {self.image}")
        if self.env:
            out.append(f"  env      {', '.join(sorted(self.env))}")
        if self.nodes_needed > 1:
            out.append(f"  nodes    {self.nodes_needed} ({self.backend or 'ray'})")
        if self.not_modelled:
            out.append("  not modelled (kept, not used by the fit):")
            out += [f"    - {item}" for item in self.not_modelled]
        out += [f"  note: {n}" for n in self.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "name": self.name,
            "model": self.serve.model,
            "command": self.command,
            "image": self.image,
            "env": sorted(self.env),
            "nodes": self.nodes_needed,
            "backend": self.backend,
            "not_modelled": self.not_modelled,
            "notes": self.notes,
        }


def detect_format(data: dict[str, Any]) -> RecipeFormat:
    if "command" not in data and "runtime" not in data and "recipe_version" not in data:
        return "vllm-config"
    if "runtime" in data or "sparkrun_version" in data or "min_nodes" in data or "max_nodes" in data:
        return "sparkrun"
    if "recipe_version" in data or "name" in data:
        return "eugr"
    return "sparkrun"


def read_recipe(path: Path, model: str | None = None, environ: Mapping[str, str] | None = None) -> RecipeRead:
    """Read a recipe or vLLM config file; `model` fills in a config file that names none; `environ`
    (default: this process's) fills the recipe's ${VAR} references."""
    data = read_yaml_mapping(path, "recipe")
    fmt = detect_format(data)
    if fmt == "vllm-config":
        read = _read_vllm_config(path, data, model)
    else:
        read = _read_template_recipe(path, data, fmt, os.environ if environ is None else environ)
    text = path.read_text(encoding="utf-8")
    version = _VERSION_COMMENT.search(text)
    if version:
        read.serve = read.serve.replace(vllm_version=version.group(1))
    return read


# ---- reading ------------------------------------------------------------------------------


def _fail(path: Path, key: str, problem: str) -> UserError:
    return UserError(f"{path}: {key}: {problem}")


def _unmodelled_flags(serve: ServeConfig) -> list[str]:
    return [f"{f} (vLLM flag)" for f in dict.fromkeys(serve.unmodelled_flags)]


def _read_vllm_config(path: Path, data: dict[str, Any], model: str | None) -> RecipeRead:
    args = config_file_args(path)
    if "--model" not in args:
        if model is None:
            raise _fail(
                path,
                "model",
                "missing; this vLLM config file leaves the model to the command line: give --model M, "
                "or use `-- vllm serve MODEL --config FILE`",
            )
        args = ["--model", model, *args]
    elif model is not None:  # the command line's model wins, as in vLLM
        at = args.index("--model")
        args[at + 1] = model
    try:
        serve = parse_serve_command(args)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return RecipeRead(
        path=path,
        format="vllm-config",
        name=path.stem,
        description="",
        serve=serve,
        command=["vllm", "serve", *serve.to_argv()],
        not_modelled=_unmodelled_flags(serve),
    )


def _text(path: Path, data: dict[str, Any], key: str, default: str = "") -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise _fail(path, key, f"got {value!r}; expected text")
    return str(value)


def _mapping(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, key, f"got {type(value).__name__} {value!r}; expected a mapping of name: value")
    return {str(k): v for k, v in value.items()}


def render_eugr(path: Path, template: str, params: dict[str, Any]) -> str:
    """run-recipe.py's generate_launch_script: `command.format(**params)`; {{ and }} are braces."""
    try:
        return template.format(**params)
    except KeyError as exc:
        raise _fail(
            path,
            "command",
            f"placeholder {{{exc.args[0]}}} has no value; add it to defaults (have: {', '.join(params) or 'none'})",
        ) from None
    except (IndexError, ValueError) as exc:
        raise _fail(path, "command", f"not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render_sparkrun(path: Path, template: str, params: dict[str, Any]) -> str:
    """sparkrun's render_template: {name} from the config chain, again until nothing changes; braces
    that are no placeholder (a JSON value) stay; {{ and }} are braces where the template uses them."""
    escaped = "{{" in template
    text = template.replace("{{", "\0").replace("}}", "\1") if escaped else template
    for _ in range(10):
        new = _PLACEHOLDER.sub(lambda m: _show(params[m.group(1)]) if m.group(1) in params else m.group(0), text)
        if new == text:
            break
        text = new
    missing = [m.group(1) for m in _PLACEHOLDER.finditer(text)]
    if missing:
        raise _fail(
            path,
            "command",
            f"placeholder {{{missing[0]}}} has no value; add it to defaults (have: {', '.join(params) or 'none'})",
        )
    return text.replace("\0", "{").replace("\1", "}") if escaped else text


def _show(value: Any) -> str:
    return str(value)


def _command_tokens(path: Path, command: str) -> list[str]:
    """The rendered command as argv; line continuations and comments as a shell reads them."""
    from sparktui.core.command_line import split_command

    try:
        return split_command(command)
    except UserError as exc:
        raise _fail(path, "command", str(exc)) from None


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(text: str, environ: Mapping[str, str]) -> str:
    """${VAR} and $VAR from the environment, as sparkrun expands a recipe's env at load (and eugr's
    `export NAME="value"` line in bash); a variable that is not set is left as it is."""
    return _REFERENCE.sub(lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), text)


def _read_template_recipe(
    path: Path, data: dict[str, Any], fmt: RecipeFormat, environ: Mapping[str, str]
) -> RecipeRead:
    defaults = _mapping(path, data, "defaults")
    env_raw = _mapping(path, data, "env")
    env: dict[str, str] = {}
    passed: list[str] = []  # NAME: ${NAME}, taken from the environment sparktui runs in
    for key, value in env_raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise _fail(path, f"env.{key}", "not a valid environment variable name")
        if value is None or isinstance(value, (dict, list)):
            raise _fail(path, f"env.{key}", f'got {value!r}; expected a value such as "1"')
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if text in (f"${{{key}}}", f"${key}"):  # the variable of the same name: vLLM inherits it as it is
            passed.append(key)
            continue
        env[key] = _expand(text, environ)
    model_key = _text(path, data, "model") or None
    runtime = _text(path, data, "runtime", "vllm")
    if fmt == "sparkrun" and runtime not in ("vllm", "eugr-vllm"):
        raise _fail(path, "runtime", f"{runtime!r}: sparktui runs vLLM only (runtime: vllm or eugr-vllm)")
    params = dict(defaults)
    if model_key is not None:
        params.setdefault("model", model_key)
    template = data.get("command")
    not_modelled: list[str] = []
    notes: list[str] = []
    if template is None:
        if fmt == "eugr":
            raise _fail(path, "command", "missing; an eugr recipe needs its `vllm serve …` command template")
        template = _sparkrun_command(defaults, not_modelled)
    if not isinstance(template, str) or not template.strip():
        raise _fail(path, "command", f"got {template!r}; expected the `vllm serve …` command as text")
    used = set(_PLACEHOLDER.findall(template.replace("{{", "").replace("}}", "")))
    rendered = render_eugr(path, template, params) if fmt == "eugr" else render_sparkrun(path, template, params)
    tokens = _command_tokens(path, rendered)
    try:
        serve = parse_serve_command(tokens)
    except UserError as exc:
        raise _fail(path, "command", str(exc)) from None
    if model_key is not None and model_key != serve.model:
        notes.append(
            f"the recipe downloads {model_key} but its command serves {serve.model}; the fit uses the command's"
        )
    for key in defaults:
        if key not in used and key != "model" and template is data.get("command"):
            not_modelled.append(f"defaults.{key} (not used by the command)")
    info = _EUGR_INFO if fmt == "eugr" else _SPARKRUN_INFO
    for key in data:
        if key not in info:
            not_modelled.append(f"{key} ({fmt} {'setting' if fmt == 'eugr' else 'recipe key'})")
    not_modelled += _unmodelled_flags(serve)
    if passed:
        notes.append(f"from the environment sparktui runs in, not stored: {', '.join(passed)}")
    tp = serve.tensor_parallel_size
    nodes = tp
    backend: str | None = None
    argv = serve.to_argv()
    if "--distributed-executor-backend" in argv:
        backend = argv[argv.index("--distributed-executor-backend") + 1]
    if fmt == "eugr":
        solo = bool(data.get("solo_only"))
        if data.get("cluster_only"):
            nodes = max(nodes, 2)
    else:
        mode = _text(path, data, "mode", "auto")
        min_nodes = data.get("min_nodes", 1)
        if isinstance(min_nodes, bool) or not isinstance(min_nodes, int) or min_nodes < 1:
            raise _fail(path, "min_nodes", f"got {min_nodes!r}; expected a whole number ≥ 1")
        solo = mode == "solo" or bool(data.get("solo_only")) or data.get("max_nodes") == 1
        if mode == "cluster" or data.get("cluster_only"):
            min_nodes = max(min_nodes, 2)
        nodes = max(nodes, min_nodes)
    if solo:
        nodes = 1
    if nodes > 1:
        backend = backend or "ray"  # both tools launch multi-node vLLM over Ray unless told otherwise
    name = _text(path, data, "name") or _text(path, _mapping(path, data, "metadata"), "name") or path.stem
    description = _text(path, data, "description") or _text(path, _mapping(path, data, "metadata"), "description")
    return RecipeRead(
        path=path,
        format=fmt,
        name=name,
        description=description,
        serve=serve,
        env=env,
        image=_text(path, data, "container") or None,
        nodes_needed=nodes,
        backend=backend if nodes > 1 else None,
        command=["vllm", "serve", *serve.to_argv()],
        not_modelled=not_modelled,
        notes=notes,
    )


def _sparkrun_command(defaults: dict[str, Any], not_modelled: list[str]) -> str:
    """A recipe without `command`: sparkrun's vLLM runtime builds one from the known defaults."""
    parts = ["vllm", "serve", "{model}"]
    for key, value in defaults.items():
        name = _SPARKRUN_FLAG_KEYS.get(key) or flag_name(key)
        flag = flag_by_name(name)
        if flag is None or flag.positional or key == "model":
            if key != "model":
                not_modelled.append(f"defaults.{key} (no command: sparkrun's runtime decides)")
            continue
        if flag.type == "bool":
            parts.append(flag.name if value else flag.negative)
        else:
            parts += [flag.name, "{" + key + "}"]
    return " ".join(parts)


# ---- to a profile -------------------------------------------------------------------------


def recipe_cluster(read: RecipeRead, nodes: list[str] | None) -> ClusterSettings | None:
    """[cluster] for a recipe that runs on several Sparks, once the hosts are known."""
    if not nodes:
        return None
    if len(nodes) < 2:
        raise UserError(f"--nodes: got {', '.join(nodes)}; expected two or more SSH hosts, the head first")
    backend: Backend
    if read.backend in (None, "ray"):
        backend = "ray"
    elif read.backend == "mp":
        backend = "mp"
    else:
        raise UserError(
            f"{read.path}: --distributed-executor-backend {read.backend}: sparktui runs clusters over ray or mp"
        )
    return ClusterSettings(tuple(nodes), backend, None, None, 29501, 6379, None, None, ())


# ---- writing ------------------------------------------------------------------------------


@dataclass
class ExportInput:
    """What a profile holds that the other formats can carry."""

    name: str
    description: str
    serve: ServeConfig
    env: dict[str, str]
    image: str | None
    cluster: ClusterSettings | None


def _flag_pairs(serve: ServeConfig) -> list[tuple[str, list[str]]]:
    """The argv after the model as (flag, values) pairs; a bare flag has no values."""
    argv = serve.to_argv()[1:]
    pairs: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", token):
            name, eq, inline = token.partition("=")
            pairs.append((name, [inline] if eq else []))
        elif pairs:
            pairs[-1][1].append(token)
        else:
            raise UserError(f"cannot export: the flags begin with a value {token!r}")
    return pairs


_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def _exported_env(env: dict[str, str]) -> dict[str, str]:
    """The environment as the recipe carries it: a secret's value never, its name as ${NAME} (eugr's
    launch script and sparkrun both expand it from the environment of whoever runs the recipe)."""
    return {k: f"${{{k}}}" if _SECRET_NAME.search(k) else v for k, v in env.items()}


def export_recipe(item: ExportInput, fmt: RecipeFormat) -> str:
    note = ""
    if item.serve.api_key:
        note += "# the API key is not written: give it as VLLM_API_KEY in the environment\n"
    secrets = sorted(k for k in item.env if _SECRET_NAME.search(k))
    if secrets and fmt != "vllm-config":
        note += f"# not written, read from the environment when the recipe runs: {', '.join(secrets)}\n"
    version = f"# sparktui vllm-version: {item.serve.vllm_version}\n" if item.serve.vllm_version else ""
    head = f"# {fmt} export of sparktui profile {item.name}\n{version}{note}"
    if fmt == "vllm-config":
        return head + _dump(_vllm_config(item))
    if fmt == "eugr":
        return head + _eugr(item)
    if fmt == "sparkrun":
        return head + _sparkrun(item)
    raise UserError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)


def _vllm_config(item: ExportInput) -> dict[str, Any]:
    out: dict[str, Any] = {"model": item.serve.model}
    seen: set[str] = set()
    for name, values in _flag_pairs(item.serve):
        flag = flag_by_name(name)
        if name in seen:
            raise UserError(f"cannot write {name} twice in a vLLM config file (a YAML key appears once)")
        seen.add(name)
        key = name[2:] if name.startswith("--") else name.lstrip("-")
        if flag is not None and flag.name != name:  # an alias such as -tp
            key = flag.key
        elif flag is None and not name.startswith("--"):
            raise UserError(f"cannot write {name} in a vLLM config file: its keys are long flag names (--name)")
        if not values:
            if name.startswith("--no-"):
                out[key[3:]] = False
            else:
                out[key] = True
        elif flag is not None and flag.type in ("int", "size", "float") and len(values) == 1:
            value = getattr(item.serve, flag.field)
            out[key] = value
        elif len(values) == 1:
            out[key] = values[0]
        else:
            out[key] = list(values)
    return out


def _eugr_defaults(item: ExportInput) -> dict[str, Any]:
    s = item.serve
    defaults: dict[str, Any] = {"port": s.port, "host": s.host}
    defaults["tensor_parallel"] = s.tensor_parallel_size
    defaults["gpu_memory_utilization"] = s.gpu_memory_utilization
    if s.max_model_len is not None:
        defaults["max_model_len"] = s.max_model_len
    return defaults


_TEMPLATED = {
    "--port": "port",
    "--host": "host",
    "--tensor-parallel-size": "tensor_parallel",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--max-model-len": "max_model_len",
}


def _command(item: ExportInput, model: str, escape: bool) -> str:
    """`vllm serve` over several lines: each flag on its own line, exactly as the argv has it, with
    the values the recipe's defaults carry as {placeholders}; `escape` doubles other braces."""
    defaults = _eugr_defaults(item)
    argv = item.serve.to_argv()[1:]
    groups: list[list[str]] = []
    for token in argv:
        if _is_flag(token) or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    given = {group[0] for group in groups}
    for flag, name in _TEMPLATED.items():
        if flag not in given and name in defaults:  # at vLLM's default: stated, so the defaults apply
            groups.append([flag, "{}"])
    if item.cluster is not None and "--distributed-executor-backend" not in given:
        groups.append(["--distributed-executor-backend", item.cluster.backend])
    lines = [f"vllm serve {model}"]
    for group in groups:
        key = _TEMPLATED.get(group[0])
        if key is not None and key in defaults and len(group) == 2:
            lines.append(f"{group[0]} {{{key}}}")
            continue
        text = shlex.join(group)
        lines.append(text.replace("{", "{{").replace("}", "}}") if escape else text)
    return " \\\n    ".join(lines) + "\n"


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", token) and token != "-"


class _Literal(str):
    """Text yaml writes as a | block."""


def _literal(dumper: yaml.SafeDumper, text: _Literal) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


yaml.SafeDumper.add_representer(_Literal, _literal)


def _eugr(item: ExportInput) -> str:
    data: dict[str, Any] = {
        "recipe_version": "1",
        "name": item.name,
        "description": item.description or f"sparktui profile {item.name}",
        "model": item.serve.model,
        "container": item.image or "vllm-node",  # eugr's own default build (build-and-copy.sh)
    }
    if item.cluster is None:
        data["solo_only"] = True
    else:
        data["cluster_only"] = True
    data["defaults"] = _eugr_defaults(item)
    data["env"] = _exported_env(item.env)
    data["command"] = _Literal(_command(item, shlex.quote(item.serve.model), escape=True))
    return _dump(data)


def _sparkrun(item: ExportInput) -> str:
    data: dict[str, Any] = {"model": item.serve.model, "runtime": "vllm"}
    if item.image:
        data["container"] = item.image
    if item.cluster is None:
        data["max_nodes"] = 1
    else:
        data["min_nodes"] = len(item.cluster.nodes)
    data["metadata"] = {"description": item.description or f"sparktui profile {item.name}"}
    data["defaults"] = _eugr_defaults(item)
    data["env"] = _exported_env(item.env)
    data["command"] = _Literal(_command(item, "{model}", escape=False))  # braces of a JSON value are no placeholder
    return _dump(data)


def modelled_keys() -> list[str]:
    return [f.key for f in FLAGS]
