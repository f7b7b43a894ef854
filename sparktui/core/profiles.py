"""Profiles: a `vllm serve` configuration plus the machine, guard, runner and environment, in TOML.

    [serve]    keys are vLLM flag names without the dashes (gpu-memory-utilization = 0.85),
               plus `model` and `extra-args = ["--flag", "value"]` for flags sparktui does not model
    [machine]  name = "dgx-spark" | "auto" | a size in GiB
    [guard]    warn-below-gib, term-below-gib, kill-below-gib, grace-s, armed, priority,
               fall-rate-gib-s, fall-lookahead-s, psi-full-pct (0 turns a trigger off),
               kernel = "stop" | "warn" | "off" (the NVIDIA driver's out-of-memory lines),
               leak-wait-s (how long a server's memory may take to come back after it ends)
    [watch]    wedge-after-s, probe-timeout-s, restart-on = ["wedge", "crash"], max-failures,
               failure-window-s, flight-recorder, evict-page-cache
    [runner]   kind = "native" | "container", executable, venv, image, container-args
    [metrics]  listen = "127.0.0.1:9464": the supervisor serves sparktui's figures to Prometheus
    [env]      NAME = "value" for the server's environment

Saving edits the loaded tomlkit document in place, so comments, ordering and keys sparktui does not
know survive; the write is atomic (temp file in the same folder, fsync, os.replace).
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sparktui.atomic import atomic_write_text
from sparktui.core.config import FLAGS, ServeConfig, flag_by_key
from sparktui.core.guard_lines import GUARD_FIELDS, LINE_NAMES, GuardField, GuardLines, LineName
from sparktui.core.profile_toml import TomlText, first_comment, read_toml
from sparktui.core.record import record
from sparktui.errors import UserError
from sparktui.files import is_special, read_regular
from sparktui.paths import user_profiles_dir

if TYPE_CHECKING:
    import tomlkit
    from tomlkit.items import Table

    from sparktui.core.cluster import ClusterSettings
    from sparktui.core.recipes import RecipeRead

MACHINE_NAMES = ("dgx-spark", "auto")
RunnerKind = Literal["native", "container"]
EXTRA_ARGS_KEY = "extra-args"


@record(frozen=False)
class GuardSettings:
    """[guard]: what the profile sets of the guard's lines and triggers (`lines`, by GuardLines' own
    field names; the guard's default for each one left out), and how the guard runs this server.
    None means the guard's own default."""

    lines: dict[GuardField, float] = field(default_factory=dict)
    armed: bool | None = None
    priority: int | None = None  # with several servers, the lowest is stopped first (then the largest)
    kernel: str | None = None  # the kernel tripwire: "stop" (default), "warn" or "off"
    leak_wait_s: float | None = None  # after the server ends, how long memory may take to come back (30 s)

    def guard_lines(self) -> GuardLines:
        """The lines the guard watches: ours, with the profile's (UserError when out of order)."""
        return self.guard_lines_with_notes()[0]

    def guard_lines_with_notes(self) -> tuple[GuardLines, list[str]]:
        """The profile's lines win; a default line in their way is turned off, and a note says so."""
        return GuardLines.from_given(self.lines)

    def changed(self, *, armed: bool | None = None, lines: Mapping[LineName, float] | None = None) -> GuardSettings:
        """A copy with `armed` and the `lines` given set (the panel's edits); UserError when the
        lines would be out of order."""
        merged = dict(self.lines)
        for name, value in (lines or {}).items():
            merged[name] = value
        new = replace(self, lines=merged, armed=self.armed if armed is None else armed)
        new.guard_lines()
        return new


RESTART_REASONS = ("wedge", "crash")


@record(frozen=False)
class WatchSettings:
    """The wedge detector, automatic restarts and their breaker, the flight recorder, page cache."""

    wedge_after_s: float = 30.0
    probe_timeout_s: float = 5.0
    restart_on: list[str] = field(default_factory=list)  # "wedge", "crash"
    max_failures: int = 3
    failure_window_s: float = 600.0
    flight_recorder: bool = True
    evict_page_cache: bool = True


@record(frozen=False)
class RunnerSettings:
    """How vLLM is started: a native executable (optionally from a venv) or a container."""

    kind: RunnerKind = "native"
    executable: str = "vllm"
    venv: str | None = None
    image: str | None = None
    container_args: list[str] = field(default_factory=list)


@record(frozen=False)
class Profile:
    name: str
    path: Path | None
    serve: ServeConfig
    machine: str = "dgx-spark"
    guard: GuardSettings = field(default_factory=GuardSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    metrics_listen: str | None = None  # [metrics] listen = "127.0.0.1:9464": the supervisor serves /metrics
    env: dict[str, str] = field(default_factory=dict)
    cluster: ClusterSettings | None = None  # several Sparks serving one model
    description: str = ""  # the file's first comment line
    warnings: list[str] = field(default_factory=list)  # unknown keys outside [serve], kept as they are
    toml: TomlText | None = field(default=None, repr=False, compare=False)  # the file's text, for saving

    @property
    def document(self) -> tomlkit.TOMLDocument | None:  # made when first asked for (saving)
        return self.toml.document() if self.toml is not None else None

    recipe: RecipeRead | None = field(default=None, repr=False, compare=False)  # read from another tool's YAML


@record
class ProfileRef:
    """A profile on disk, found without loading it (a broken file still lists)."""

    name: str
    path: Path
    source: Literal["shipped", "user"]
    description: str


# TOML key → attribute, per section (kebab-case keys like the serve flags).
_GUARD_KEYS = {
    "warn-below-gib": "warn_below_gib",
    "term-below-gib": "term_below_gib",
    "kill-below-gib": "kill_below_gib",
    "grace-s": "grace_s",
    "armed": "armed",
    "priority": "priority",
    "fall-rate-gib-s": "fall_rate_gib_s",
    "fall-lookahead-s": "fall_lookahead_s",
    "psi-full-pct": "psi_full_pct",
    "kernel": "kernel",
    "leak-wait-s": "leak_wait_s",
}
# The keys of [guard] that are GuardLines' fields (the rest are GuardSettings' own)
_GUARD_LINE_FIELDS: dict[str, GuardField] = {f: f for f in GUARD_FIELDS}
_WATCH_KEYS = {
    "wedge-after-s": "wedge_after_s",
    "probe-timeout-s": "probe_timeout_s",
    "restart-on": "restart_on",
    "max-failures": "max_failures",
    "failure-window-s": "failure_window_s",
    "flight-recorder": "flight_recorder",
    "evict-page-cache": "evict_page_cache",
}
_RUNNER_KEYS = {
    "kind": "kind",
    "executable": "executable",
    "venv": "venv",
    "image": "image",
    "container-args": "container_args",
}
_SECTIONS = ("serve", "machine", "guard", "runner", "watch", "cluster", "metrics", "env")
_LISTEN = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})")


def user_profile_path(name: str) -> Path:
    """Where a user profile called `name` is saved (shipped profiles are never overwritten)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name.endswith(".toml"):
        raise UserError(f"profile name {name!r}: use letters, digits, '.', '_' and '-' (no .toml, no slashes)")
    return user_profiles_dir() / f"{name}.toml"


def shipped_profiles_dir() -> Path:
    from sparktui.resources import data_dir

    return data_dir("profiles")


def _description(path: Path) -> str:
    try:
        return first_comment(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return ""


def list_profiles() -> list[ProfileRef]:
    """Shipped profiles and the user's, sorted by name; a user profile hides a shipped one of
    the same name."""
    found: dict[str, ProfileRef] = {}
    sources: list[tuple[Literal["shipped", "user"], Path]] = [("shipped", shipped_profiles_dir())]
    sources.append(("user", user_profiles_dir()))
    for source, folder in sources:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            found[path.stem] = ProfileRef(path.stem, path, source, _description(path))
        if source == "user":  # recipes of other tools dropped among yours (eugr, sparkrun, vLLM --config)
            for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
                found.setdefault(path.stem, ProfileRef(path.stem, path, source, "recipe " + path.name))
    return sorted(found.values(), key=lambda ref: ref.name)


MAX_PROFILE_BYTES = 1 << 20  # a profile is a few KiB; a 10 MB one is a mistake (tomlkit takes a minute)


def resolve_profile(path_or_name: str | os.PathLike[str]) -> Path:
    """A path as given, or a profile name looked up among the user's and the shipped ones."""
    text = os.fspath(path_or_name)
    candidate = Path(text).expanduser()
    if candidate.is_file():
        return candidate
    looks_like_path = os.sep in text or text.endswith((".toml", ".yaml", ".yml"))
    if not looks_like_path:
        refs = {ref.name: ref for ref in list_profiles()}
        if text in refs:
            return refs[text].path
        names = sorted(refs)
        close = difflib.get_close_matches(text, names, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"no profile named {text!r}{hint}; available: {', '.join(names) or 'none'}")
    if candidate.is_dir():
        raise UserError(f"{text}: a folder, not a profile; give a profile's .toml file")
    if (kind := is_special(candidate)) is not None:  # a FIFO, a device, a symlink loop: never read
        raise UserError(f"{text}: {kind}, not a profile file; give a profile's .toml file")
    raise UserError(f"{text}: no such profile file")


def load_profile(path_or_name: str | os.PathLike[str], model: str | None = None) -> Profile:
    """A TOML profile, or a recipe of another tool (eugr, sparkrun, a vLLM --config file) read into
    one; `model` fills in a vLLM config file that names none."""
    path = resolve_profile(path_or_name)
    if path.suffix in (".yaml", ".yml"):
        return profile_from_recipe(path, model=model)
    try:
        text = read_regular(path, MAX_PROFILE_BYTES, "profile").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the profile: {exc}") from None
    return parse_profile(text, path)


def parse_profile(text: str, path: Path | None = None, name: str | None = None) -> Profile:
    """Build a Profile from TOML text; errors name the file, the key and (where known) the line."""
    where = str(path) if path is not None else "<profile>"
    doc = read_toml(text, where)

    def fail(section: str, key: str | None, problem: str) -> UserError:
        line = _line_of(text, section, key)
        loc = f"{where}:{line}" if line else where
        return UserError(f"{loc}: [{section}]{' ' + key if key else ''}: {problem}")

    warnings: list[str] = []
    for key in doc:
        if key not in _SECTIONS:
            warnings.append(f"{where}: unknown section [{key}] kept as is (sections: {', '.join(_SECTIONS)})")

    serve_table = doc.get("serve")
    if not isinstance(serve_table, dict):
        raise fail("serve", None, 'missing; a profile needs a [serve] section with at least model = "…"')
    serve = _read_serve(serve_table, fail)

    machine = "dgx-spark"
    machine_table = _table(doc, "machine", fail)
    for key, value in machine_table.items():
        if key == "name":
            machine = _machine_name(value, lambda p: fail("machine", "name", p))
        else:
            warnings.append(_unknown_warning(where, "machine", key, ["name"]))

    def read_keys(
        section: str,
        target: RunnerSettings | WatchSettings,
        keys: dict[str, str],
        read: Callable[..., Any],
    ) -> None:
        """[section]'s known keys, each checked by `read`, onto `target`; unknown ones warned of."""
        for key, value in _table(doc, section, fail).items():
            attr = keys.get(key)
            if attr is None:
                warnings.append(_unknown_warning(where, section, key, list(keys)))
                continue
            setattr(target, attr, read(attr, value, lambda p, k=key: fail(section, k, p)))

    guard = GuardSettings()
    for key, value in _table(doc, "guard", fail).items():
        attr = _GUARD_KEYS.get(key)
        if attr is None:
            warnings.append(_unknown_warning(where, "guard", key, list(_GUARD_KEYS)))
            continue
        checked = _guard_value(attr, value, lambda p, k=key: fail("guard", k, p))
        if attr in _GUARD_LINE_FIELDS:
            guard.lines[_GUARD_LINE_FIELDS[attr]] = checked
        else:
            setattr(guard, attr, checked)
    given = [
        (k, v)
        for k, a in _GUARD_KEYS.items()
        if a in LINE_NAMES and (v := guard.lines.get(_GUARD_LINE_FIELDS[a])) is not None
    ]
    for (hi_key, hi), (lo_key, lo) in itertools.pairwise(given):
        if lo > hi:
            raise fail("guard", lo_key, f"{lo} GiB is above {hi_key} = {hi}; expected warn ≥ term ≥ kill")

    runner = RunnerSettings()
    read_keys("runner", runner, _RUNNER_KEYS, _runner_value)
    if runner.kind == "container" and not runner.image:
        raise fail("runner", "image", 'missing; kind = "container" needs image = "…" (e.g. "vllm/vllm-openai:latest")')

    watch = WatchSettings()
    read_keys("watch", watch, _WATCH_KEYS, _watch_value)

    cluster = _cluster(_table(doc, "cluster", fail), lambda k, p: fail("cluster", k, p))

    metrics_listen = None
    for key, value in _table(doc, "metrics", fail).items():
        if key != "listen":
            warnings.append(_unknown_warning(where, "metrics", key, ["listen"]))
            continue
        match = _LISTEN.fullmatch(value) if isinstance(value, str) else None
        if match is None or not 1 <= int(match.group(1)) <= 65535:
            raise fail("metrics", "listen", f'got {_show(value)}; expected "HOST:PORT", e.g. "127.0.0.1:9464"')
        metrics_listen = value

    env: dict[str, str] = {}
    for key, value in _table(doc, "env", fail).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise fail("env", key, "not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise fail("env", key, f'got {_show(value)}; expected a string, e.g. {key} = "1"')
        if isinstance(value, str) and "\0" in value:
            raise fail("env", key, "contains a NUL character, which no environment variable can hold; remove it")
        env[key] = str(value) if not isinstance(value, str) else value

    return Profile(
        name=name or (path.stem if path is not None else "profile"),
        path=path,
        serve=serve,
        machine=machine,
        guard=guard,
        runner=runner,
        watch=watch,
        cluster=cluster,
        metrics_listen=metrics_listen,
        env=env,
        description=first_comment(text),
        warnings=warnings,
        toml=TomlText(text),
    )


def profile_from_recipe(path: Path, model: str | None = None, nodes: list[str] | None = None) -> Profile:
    """A recipe as a profile: its flags in [serve], its container in [runner], its environment in
    [env], and [cluster] when it runs on several Sparks and `nodes` names them."""
    from sparktui.core.recipes import read_recipe, recipe_cluster

    read = read_recipe(path, model=model)
    runner = RunnerSettings(kind="container", image=read.image) if read.image else RunnerSettings()
    cluster = recipe_cluster(read, nodes)
    serve = read.serve
    warnings: list[str] = []
    if read.nodes_needed > 1 and cluster is None:
        warnings.append(
            f"{path}: the recipe runs on {read.nodes_needed} Sparks ({read.backend}) but names no hosts; "
            f"`sparktui profile import {path.name} --nodes HEAD,WORKER` writes a profile with [cluster]"
        )
    if cluster is not None and cluster.backend == "mp" and "--distributed-executor-backend" in serve.extra_args:
        serve = serve.replace(extra_args=_without_flag(serve.extra_args, "--distributed-executor-backend"))
    read.notes += warnings
    return Profile(
        name=path.stem,
        path=path,
        serve=serve,
        runner=runner,
        env=dict(read.env),
        cluster=cluster,
        description=read.description or read.name,
        warnings=warnings,
        recipe=read,
    )


def _without_flag(extra: list[str], name: str) -> list[str]:
    out, i = [], 0
    while i < len(extra):
        if extra[i] == name:
            i += 2
            continue
        if extra[i].startswith(name + "="):
            i += 1
            continue
        out.append(extra[i])
        i += 1
    return out


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """1-based line of `key` in [section] (or of the section header), for error messages."""
    current = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"\s*\[\s*([^\]\s]+)\s*\]", line)
        if header:
            current = header.group(1)
            if key is None and current == section:
                return number
            continue
        if current == section and key is not None and re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
            return number
    return None


def _table(doc: dict[str, Any], section: str, fail: Any) -> dict[str, Any]:
    table = doc.get(section)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise fail(section, None, f"expected a table [{section}], got a {type(table).__name__}")
    return {str(k): _plain(v) for k, v in table.items()}


def _plain(value: Any) -> Any:
    """tomlkit items (a file only tomlkit reads) → plain Python values."""
    return value.unwrap() if hasattr(value, "unwrap") else value


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _unknown_warning(where: str, section: str, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known keys: {', '.join(known)}"
    return f"{where}: [{section}] {key}: unknown key, kept as is but ignored{hint}"


def _read_serve(table: dict[str, Any], fail: Any) -> ServeConfig:
    values: dict[str, Any] = {}
    for raw_key, raw_value in table.items():
        key = str(raw_key)
        value = _plain(raw_value)
        if key == EXTRA_ARGS_KEY:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail("serve", key, f'got {_show(value)}; expected a list of strings, e.g. ["--seed", "0"]')
            values["extra_args"] = value
            continue
        flag = flag_by_key(key)
        if flag is None:
            known = [f.key for f in FLAGS] + [EXTRA_ARGS_KEY]
            close = difflib.get_close_matches(key.lstrip("-").replace("_", "-"), known, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise fail(
                "serve",
                key,
                f"unknown key; {hint}Keys are vLLM flag names without the dashes; flags sparktui "
                f'does not model go in {EXTRA_ARGS_KEY} = ["--flag", "value"]',
            )
        try:
            values[flag.field] = flag.coerce(value)
        except UserError as exc:
            raise fail("serve", key, str(exc).removeprefix(f"{flag.name}: ")) from None
    if "model" not in values:
        raise fail("serve", "model", 'missing; give the model to serve, e.g. model = "Qwen/Qwen3-30B-A3B"')
    try:
        return ServeConfig(**values)
    except UserError as exc:
        raise fail("serve", None, str(exc)) from None


def _machine_name(value: Any, fail: Any) -> str:
    expected = 'expected "dgx-spark", "auto" or a memory size in GiB from 1 to 100000, such as 128'
    if isinstance(value, bool):
        raise fail(f"got {_show(value)}; {expected}")
    if isinstance(value, (int, float)):
        if 1 <= value <= 100_000:  # the range fit's machine_from_name takes; NaN and inf fail it too
            return str(value)
    elif isinstance(value, str):
        text = value.strip()
        if text in MACHINE_NAMES:
            return text
        number = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(?:GiB)?", text)
        if number and 1 <= float(number.group(1)) <= 100_000:
            return number.group(1)
    raise fail(f"got {_show(value)}; {expected}")


_CLUSTER_KEYS = (
    "nodes",
    "backend",
    "interface",
    "interfaces",
    "master-addr",
    "master-port",
    "ray-port",
    "node-rank",
    "ray-temp-dir",
)


def _cluster(table: dict[str, Any], fail: Any) -> ClusterSettings | None:
    """[cluster]: nodes = ["spark-a", "spark-b"] (SSH hosts, the head first), backend = "ray" | "mp",
    interface or master-addr for the ranks' traffic."""
    if not table:
        return None
    from sparktui.core.cluster import BACKENDS, ClusterSettings  # a cluster's profile only (it loads the fit)

    for key in table:
        if key not in _CLUSTER_KEYS:
            close = difflib.get_close_matches(key, _CLUSTER_KEYS, n=1)
            raise fail(
                key,
                f"unknown key; expected {', '.join(_CLUSTER_KEYS)}" + (f" (did you mean {close[0]}?)" if close else ""),
            )
    nodes = table.get("nodes")
    if not isinstance(nodes, list) or len(nodes) < 2 or not all(isinstance(n, str) and n.strip() for n in nodes):
        raise fail(
            "nodes",
            f'got {_show(nodes)}; expected two or more SSH host names, the head first, e.g. ["spark-a", "spark-b"]',
        )
    for node in nodes:
        # ssh reads a leading "-" as an option (-oProxyCommand runs a local shell): names only
        if len(node) > 255 or not re.fullmatch(r"[A-Za-z0-9_.@%\[\]:][A-Za-z0-9_.@%\[\]:-]*", node):
            shown = node if len(node) <= 60 else node[:60] + "…"
            raise fail(
                "nodes",
                f"got {shown!r}; expected an SSH host name or alias (letters, digits, '.', '-', '_', user@host; "
                "not starting with '-', at most 255 characters), as in ~/.ssh/config",
            )
    if len(set(nodes)) != len(nodes):
        raise fail("nodes", f"got {_show(nodes)}; each node once")
    backend = table.get("backend", "ray")
    if backend not in BACKENDS:
        raise fail("backend", f'got {_show(backend)}; expected "ray" (Ray) or "mp" (vLLM\'s --nnodes)')
    texts = {}
    for key in ("interface", "master-addr"):
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", value)):
            raise fail(key, f"got {_show(value)}; expected an interface name or an address")
        texts[key] = value
    interfaces = _cluster_interfaces(table.get("interfaces"), nodes, texts["interface"] is not None, fail)
    ports = {}
    for key, default in (("master-port", 29501), ("ray-port", 6379)):
        port = table.get(key, default)
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise fail(key, f"got {_show(port)}; expected a port from 1 to 65535")
        ports[key] = port
    if 10002 <= ports["ray-port"] <= 19999:
        raise fail(
            "ray-port",
            f"got {ports['ray-port']}; Ray gives ports 10002-19999 to its workers, so its head cannot take one of "
            "them; use Ray's default 6379 or another port outside that range",
        )
    rank = table.get("node-rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(nodes)):
        raise fail("node-rank", f"got {_show(rank)}; expected 0 to {len(nodes) - 1} (the head sets it on each node)")
    head_temp = table.get("ray-temp-dir")
    if head_temp is not None and (not isinstance(head_temp, str) or not head_temp.startswith("/")):
        raise fail("ray-temp-dir", f"got {_show(head_temp)}; expected an absolute path (the head sets it on each node)")
    return ClusterSettings(
        tuple(nodes),
        backend,
        texts["interface"],
        texts["master-addr"],
        ports["master-port"],
        ports["ray-port"],
        rank,
        head_temp,
        interfaces,
    )


def _cluster_interfaces(value: Any, nodes: list[str], one_name: bool, fail: Any) -> tuple[tuple[str, str], ...]:
    """[cluster.interfaces]: every node's own name for its end of the link, e.g. node0 = "enP2p1s0f1np1"."""
    if value is None:
        return ()
    example = ", ".join(f'{n} = "enp1s0f0np0"' for n in nodes[:2])
    if one_name:
        raise fail(
            "interfaces",
            "give either interface (one name on every node) or [cluster.interfaces] (each node's own), not both",
        )
    if not isinstance(value, dict):
        raise fail("interfaces", f"got {_show(value)}; expected a table of node = interface name ({example})")
    missing = [n for n in nodes if n not in value]
    unknown = [k for k in value if k not in nodes]
    if unknown:
        raise fail("interfaces", f"{', '.join(map(repr, unknown))} is not one of the nodes ({', '.join(nodes)})")
    if missing:
        raise fail("interfaces", f"no interface for {', '.join(missing)}; name every node's ({example})")
    for node in nodes:
        name = value[node]
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", name):
            raise fail(
                f"interfaces.{node}",
                f"got {_show(name)}; expected an interface name (up to 15 letters, digits, '.', '-', '_' or ':'; "
                "`ip -brief link` there lists them)",
            )
    return tuple((node, str(value[node])) for node in nodes)


def _cluster_table(cluster: ClusterSettings) -> dict[str, Any]:
    """[cluster] as TOML keys: what the file said, and the node's rank once the head set it."""
    table: dict[str, Any] = {"nodes": list(cluster.nodes), "backend": cluster.backend}
    if cluster.interface is not None:
        table["interface"] = cluster.interface
    if cluster.interfaces:
        table["interfaces"] = dict(cluster.interfaces)
    if cluster.master_addr is not None:
        table["master-addr"] = cluster.master_addr
    table["master-port"] = cluster.master_port
    table["ray-port"] = cluster.ray_port
    if cluster.rank is not None:
        table["node-rank"] = cluster.rank
    if cluster.head_ray_temp_dir is not None:
        table["ray-temp-dir"] = cluster.head_ray_temp_dir
    return table


def _guard_table(settings: GuardSettings) -> dict[str, Any]:
    """[guard] as TOML keys (None: not set)."""
    return {
        key: settings.lines.get(_GUARD_LINE_FIELDS[attr]) if attr in _GUARD_LINE_FIELDS else getattr(settings, attr)
        for key, attr in _GUARD_KEYS.items()
    }


def _guard_value(attr: str, value: Any, fail: Any) -> Any:
    if attr == "armed":
        if not isinstance(value, bool):
            raise fail(f"got {_show(value)}; expected true or false")
        return value
    if attr == "kernel":
        from sparktui.core.kernel_log import KERNEL_MODES  # here: few profiles set it

        if value not in KERNEL_MODES:
            raise fail(
                f"got {_show(value)}; expected one of {', '.join(map(repr, KERNEL_MODES))} (what the guard does "
                "when the NVIDIA driver logs NV_ERR_NO_MEMORY)"
            )
        return value
    if attr == "priority":
        if isinstance(value, bool) or not isinstance(value, int) or not -1000 <= value <= 1000:
            raise fail(f"got {_show(value)}; expected a whole number from -1000 to 1000 (lowest is stopped first)")
        return value
    units = {
        "grace_s": "seconds",
        "fall_lookahead_s": "seconds",
        "fall_rate_gib_s": "GiB/s",
        "psi_full_pct": "%",
        "leak_wait_s": "seconds",
    }
    unit = units.get(attr, "GiB")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise fail(f"got {_show(value)}; expected a finite number of {unit} ≥ 0")
    if unit == "GiB" and value > 100_000:  # a line above any machine's memory would trip at once
        raise fail(
            f"got {_show(value)}; expected GiB from 0 to 100000 (a line above the machine's memory trips at once)"
        )
    return float(value)


def _watch_value(attr: str, value: Any, fail: Any) -> Any:
    if attr in ("flight_recorder", "evict_page_cache"):
        if not isinstance(value, bool):
            raise fail(f"got {_show(value)}; expected true or false")
        return value
    if attr == "restart_on":
        if not isinstance(value, list) or not all(v in RESTART_REASONS for v in value):
            raise fail(f'got {_show(value)}; expected a list of "wedge" and "crash", e.g. ["wedge", "crash"] or []')
        return list(value)
    if attr == "max_failures":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail(f"got {_show(value)}; expected a whole number of failures ≥ 1, e.g. 3")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise fail(f"got {_show(value)}; expected a finite number of seconds > 0")
    return float(value)


def _runner_value(attr: str, value: Any, fail: Any) -> Any:
    if attr == "kind":
        if value not in ("native", "container"):
            raise fail(f'got {_show(value)}; expected "native" or "container"')
        return value
    if attr == "container_args":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(f'got {_show(value)}; expected a list of strings, e.g. ["--gpus", "all"]')
        return value
    if not isinstance(value, str) or not value.strip():
        raise fail(f"got {_show(value)}; expected a non-empty string")
    return value


# ---- saving -------------------------------------------------------------------------------


def _sync(table: Table | tomlkit.TOMLDocument, wanted: dict[str, Any], known: set[str], same: Any) -> None:
    """Make the known keys of `table` say `wanted`, touching only what changed: keys whose value
    is unchanged keep their text and comments; keys outside `known` are left alone."""
    for key in list(table.keys()):
        if key not in known:
            continue
        if key not in wanted:
            del table[key]
        elif not same(key, _plain(table[key]), wanted[key]):
            table[key] = wanted[key]
    for key, value in wanted.items():
        if key not in table:
            table[key] = value


def _section(doc: tomlkit.TOMLDocument, name: str) -> Table:
    if name not in doc:
        import tomlkit

        doc.add(name, tomlkit.table())
    table: Table = doc[name]
    return table


def to_document(profile: Profile) -> tomlkit.TOMLDocument:
    """The profile as a tomlkit document: the loaded one, edited in place, or a fresh one."""
    import tomlkit

    doc = profile.document if profile.document is not None else tomlkit.document()

    serve = profile.serve
    wanted: dict[str, Any] = {}
    existing = doc.get("serve") or {}
    for flag in FLAGS:
        value = getattr(serve, flag.field)
        # keep a key the file states even at its default; add only values that differ from it
        if value is not None and (flag.key in existing or value != flag.field_default or flag.positional):
            wanted[flag.key] = value
    if serve.extra_args:
        wanted[EXTRA_ARGS_KEY] = list(serve.extra_args)

    def same_serve(key: str, old: Any, new: Any) -> bool:
        if key == EXTRA_ARGS_KEY:
            return bool(old == new)
        flag = flag_by_key(key)
        try:
            return flag is not None and bool(flag.coerce(old) == new)
        except UserError:
            return False

    serve_keys = {f.key for f in FLAGS} | {EXTRA_ARGS_KEY}
    _sync(_section(doc, "serve"), wanted, serve_keys, same_serve)

    machine_value: Any = profile.machine
    if re.fullmatch(r"\d+(\.\d+)?", profile.machine):
        machine_value = float(profile.machine) if "." in profile.machine else int(profile.machine)
    _sync(_section(doc, "machine"), {"name": machine_value}, {"name"}, lambda k, a, b: str(a) == str(b))

    def same(_key: str, old: Any, new: Any) -> bool:
        # 5 and 5.0 are the same threshold; true and 1 are not the same setting
        return old == new and isinstance(old, bool) == isinstance(new, bool)

    guard = {k: v for k, v in _guard_table(profile.guard).items() if v is not None}
    if guard or "guard" in doc:
        _sync(_section(doc, "guard"), guard, set(_GUARD_KEYS), same)

    defaults = RunnerSettings()
    runner = {
        k: getattr(profile.runner, a)
        for k, a in _RUNNER_KEYS.items()
        if getattr(profile.runner, a) not in (None, [])
        and (getattr(profile.runner, a) != getattr(defaults, a) or k in (doc.get("runner") or {}))
    }
    if runner or "runner" in doc:
        _sync(_section(doc, "runner"), runner, set(_RUNNER_KEYS), same)

    defaults_w = WatchSettings()
    watch = {
        k: getattr(profile.watch, a)
        for k, a in _WATCH_KEYS.items()
        if getattr(profile.watch, a) != getattr(defaults_w, a) or k in (doc.get("watch") or {})
    }
    if watch or "watch" in doc:
        _sync(_section(doc, "watch"), watch, set(_WATCH_KEYS), same)

    if profile.cluster is not None or "cluster" in doc:
        wanted_cluster = {} if profile.cluster is None else _cluster_table(profile.cluster)
        table = _section(doc, "cluster")
        defaults_c = {"master-port": 29501, "ray-port": 6379}  # written only when stated or changed
        for key, value in defaults_c.items():
            if wanted_cluster.get(key) == value and key not in table:
                del wanted_cluster[key]
        _sync(table, wanted_cluster, set(_CLUSTER_KEYS), same)

    if profile.metrics_listen is not None or "metrics" in doc:
        wanted_metrics = {} if profile.metrics_listen is None else {"listen": profile.metrics_listen}
        _sync(_section(doc, "metrics"), wanted_metrics, {"listen"}, same)

    if profile.env or "env" in doc:
        env_table = _section(doc, "env")
        _sync(env_table, dict(profile.env), set(env_table.keys()) | set(profile.env), same)
    return doc


def dumps_profile(profile: Profile) -> str:
    import tomlkit

    return tomlkit.dumps(to_document(profile))


def save_profile(profile: Profile, path: str | os.PathLike[str] | None = None) -> Path:
    """Write the profile atomically: the old file stays whole if anything fails mid-way."""
    target = Path(path) if path is not None else profile.path
    if target is None:
        raise UserError(f"profile {profile.name!r}: nowhere to save it; give a path")
    if target.suffix in (".yaml", ".yml"):  # never TOML over another tool's recipe
        raise UserError(
            f"{target}: a recipe, not a sparktui profile; save as a name or a .toml path, or write the "
            "recipe with `sparktui profile export PROFILE --format eugr|sparkrun|vllm-config`"
        )
    text = dumps_profile(profile)
    parse_profile(text, target)  # never write a file that would not load back
    has_secret = bool(profile.serve.api_key) or any("KEY" in k or "TOKEN" in k for k in profile.env)
    atomic_write_text(target, text, private=has_secret)
    profile.path = target
    return target


def is_shipped(path: Path | None) -> bool:
    """Whether `path` is one of the profiles installed with sparktui (read-only: saving one writes
    a copy among the user's profiles)."""
    if path is None:
        return False
    try:
        return path.resolve().parent == shipped_profiles_dir().resolve()
    except OSError:
        return False


def save_target(profile: Profile) -> Path | None:
    """Where Ctrl+S writes `profile`: its own file, or, for a shipped one, the user's profiles
    folder under the same name (None: it has no file yet, Save as names one)."""
    if profile.path is None:
        return None
    return user_profile_path(profile.name) if is_shipped(profile.path) else profile.path


def copied_as(profile: Profile, name: str, path: Path) -> Profile:
    """`profile` to be saved as `name` at `path`: the header comments of the file it came from
    describe that profile's settings, so the copy gets its own header line instead (the body's
    comments and unknown keys stay)."""
    if profile.document is None or profile.path == path:
        return replace(profile, name=name, path=path)
    import tomlkit

    lines = tomlkit.dumps(profile.document).splitlines()
    while lines and (lines[0].startswith("#") or not lines[0].strip()):
        lines.pop(0)
    origin = profile.path if profile.path is not None else profile.name
    header = [f"# {name}: saved by sparktui from {origin} (its notes stayed there)", ""]
    return replace(profile, name=name, path=path, toml=TomlText("\n".join([*header, *lines, ""])))


def new_profile(name: str, serve: ServeConfig, **kwargs: Any) -> Profile:
    """A profile not yet on disk (save_profile writes a fresh document)."""
    return Profile(name=name, path=None, serve=serve, **kwargs)


__all__ = [
    "GuardSettings",
    "Profile",
    "ProfileRef",
    "RunnerSettings",
    "WatchSettings",
    "copied_as",
    "dumps_profile",
    "is_shipped",
    "list_profiles",
    "load_profile",
    "new_profile",
    "parse_profile",
    "profile_from_recipe",
    "resolve_profile",
    "save_profile",
    "save_target",
    "shipped_profiles_dir",
    "to_document",
    "user_profile_path",
    "user_profiles_dir",
]
