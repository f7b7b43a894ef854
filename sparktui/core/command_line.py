"""A pasted command line: its shell words, its NAME=value prefix, and the launcher before the words
`vllm serve` itself reads (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`, a path to
vllm, `docker run … IMAGE`)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import PurePath
from typing import NamedTuple

from sparktui.errors import UserError

# How pasted command lines may start; what follows is `vllm serve`'s own argv.
_MODULE_ENTRYPOINTS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
# Words that run the next command (`nohup vllm serve …`, eugr's `./launch-cluster.sh … exec vllm serve …`)
_CONTROL = ("&&", "||", ";", "|", "&")  # shell control operators: the line holds several commands
_REDIRECT = re.compile(r"\d*(>>?|<|>&|&>>?)(.*)")  # `> vllm.log`, `2>&1`, `>log`, `&> log`
_SHELLS = ("bash", "sh", "zsh", "dash")


def strip_launcher(tokens: list[str]) -> list[str]:
    """The words `vllm serve` itself reads, from a pasted command: after `vllm serve`, the `python -m`
    entrypoint, a wrapper (`nohup`, `exec`, `uv run` …), or a `docker run` image whose entrypoint is vLLM's;
    shell redirections dropped and, where the line holds several commands, the vLLM one. Words that
    are already `vllm serve`'s own (`MODEL --flag …`) are returned as they are."""
    tokens = _vllm_command(tokens)
    if not tokens:
        return tokens
    head = PurePath(tokens[0]).name
    if head in ("docker", "podman"):
        return _container_args(tokens)
    if head == "vllm":
        if len(tokens) > 1 and tokens[1] == "serve":
            return tokens[2:]
        raise UserError(f"expected `vllm serve …`, got `vllm {tokens[1] if len(tokens) > 1 else ''}`".rstrip())
    if head.startswith("python") and len(tokens) > 2 and tokens[1] == "-m":
        if tokens[2] in _MODULE_ENTRYPOINTS:
            return tokens[3:]
        if tokens[2] in ("vllm.entrypoints.cli.main", "vllm") and tokens[3:4] == ["serve"]:
            return tokens[4:]
        raise UserError(f"expected a vLLM server command, got `python -m {tokens[2]}`")
    if head == "serve":
        return tokens[1:]
    start = _launch_at(tokens)
    return strip_launcher(tokens[start:]) if start else tokens


def container_image(tokens: list[str]) -> str | None:
    """The image a pasted `docker run … IMAGE …` starts vLLM in (None: not a docker run line)."""
    tokens = _vllm_command(tokens)
    if tokens[:1] and PurePath(tokens[0]).name in ("docker", "podman") and "exec" not in tokens[1:3]:
        from sparktui.core.container import split_docker_run

        return split_docker_run([w for w in tokens if w != "container"])[1]
    return None


def container_env(tokens: list[str]) -> dict[str, str]:
    """The `-e NAME=value` / `--env NAME=value` a pasted `docker run` gives vLLM (`-e NAME` alone passes
    the caller's own value, which the line does not hold)."""
    tokens = _vllm_command(tokens)
    if not (tokens[:1] and PurePath(tokens[0]).name in ("docker", "podman")):
        return {}
    from sparktui.core.container import split_docker_run

    options = split_docker_run([w for w in tokens if w != "container"])[0] if "exec" not in tokens[1:3] else []
    env: dict[str, str] = {}
    for i, word in enumerate(options):
        name, eq, value = word.partition("=")
        given = value if eq and name in ("-e", "--env") else options[i + 1] if word in ("-e", "--env") else ""
        if "=" in given:
            key, _, val = given.partition("=")
            env[key] = val
    return env


def _launch_at(tokens: list[str]) -> int | None:
    """Where `vllm serve`, `python -m vllm…` or `docker run` starts in `tokens` (None: nowhere)."""
    for i, word in enumerate(tokens):
        name, following = PurePath(word).name, tokens[i + 1 : i + 3]
        if name == "vllm" and following[:1] == ["serve"]:
            return i
        if name.startswith("python") and following[:1] == ["-m"] and following[1:2] and "vllm" in following[1]:
            return i
        if name in ("docker", "podman") and following[:1] in (["run"], ["exec"], ["container"]):
            return i
    return None


def _vllm_command(tokens: list[str]) -> list[str]:
    """The one command of a shell line that starts vLLM, without its redirections."""
    commands: list[list[str]] = [[]]
    i = 0
    while i < len(tokens):
        word = tokens[i]
        redirect = None if word.startswith("<") and word.endswith(">") else _REDIRECT.fullmatch(word)  # <MODEL>
        if word in _CONTROL:
            commands.append([])
        elif redirect:
            i += 0 if redirect.group(2) else 1  # `> file`: the file is the next word
        else:
            commands[-1].append(word)
        i += 1
    commands = [c for c in commands if c]
    if len(commands) <= 1:
        return commands[0] if commands else []
    found = [c for c in commands if _launch_at(c) is not None]
    if len(found) != 1:
        raise UserError(
            f"the pasted line holds {len(commands)} commands"
            + (" and none starts vLLM" if not found else f", {len(found)} of them start vLLM")
            + ": paste the one `vllm serve …` command"
        )
    return found[0]


def _container_args(tokens: list[str]) -> list[str]:
    """`docker run [OPTIONS] IMAGE [ARGS]`: vLLM's words in ARGS (`vllm serve …`, a shell's `-c` script
    that runs it), or ARGS themselves for an image whose entrypoint is `vllm serve` (vllm/vllm-openai,
    its -rocm / -cpu / -xpu builds). `docker exec [OPTIONS] CONTAINER COMMAND` (NVIDIA's two-Spark
    playbook) the same, with the container for the image."""
    from sparktui.core.container import split_docker_run

    options: list[str] = []
    if tokens[1:2] == ["exec"] or tokens[1:3] == ["container", "exec"]:  # `docker exec [-it] NAME COMMAND`
        at = tokens.index("exec") + 1
        while at < len(tokens) and tokens[at].startswith("-"):
            at += 2 if tokens[at] in ("-e", "--env", "-u", "--user", "-w", "--workdir", "--env-file") else 1
        image, rest = tokens[at] if at < len(tokens) else None, tokens[at + 1 :]
    else:
        options, image, rest = split_docker_run([w for w in tokens if w != "container"])
    if image is None:
        if "exec" in tokens[1:3]:
            raise UserError(
                "docker exec: no container in the pasted line; expected `docker exec [OPTIONS] CONTAINER vllm serve …`"
            )
        raise UserError("docker run: no image in the pasted line; expected `docker run [OPTIONS] IMAGE [vLLM flags]`")
    entrypoint = next((w.split("=", 1)[1] for w in options if w.startswith("--entrypoint=")), None)
    if "--entrypoint" in options:
        entrypoint = options[options.index("--entrypoint") + 1]
    if entrypoint is not None:
        rest = [*split_command(entrypoint), *rest]
    if rest and PurePath(rest[0]).name in _SHELLS:  # `bash -c "… vllm serve …"`, `bash -lc`, `bash -c -i`
        shell_options = list(itertools.takewhile(lambda w: w.startswith("-"), rest[1:]))
        script = rest[1 + len(shell_options) : 2 + len(shell_options)]
        if any("c" in o for o in shell_options) and script:
            return strip_launcher(split_command(script[0]))
    if _launch_at(rest) is not None:
        return strip_launcher(rest)
    repository = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    if entrypoint is None and repository.split("/")[-1].startswith("vllm-openai"):
        return rest
    raise UserError(
        f"docker run {image}: expected the container to run `vllm serve …` (after the image, or an image "
        f"whose entrypoint is vLLM's, such as vllm/vllm-openai); it runs `{' '.join(rest[:3]) or 'its entrypoint'}`"
    )


def split_env(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading NAME=value words of a pasted command (`VLLM_X=1 vllm serve …`): (the environment vLLM
    would run with, the rest). VLLM_API_KEY stays in the command: the serve config reads it as --api-key."""
    env: dict[str, str] = {}
    rest, kept = list(tokens), []
    while rest and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[0]):
        name, value = rest.pop(0).split("=", 1)
        if name == "VLLM_API_KEY":
            kept.append(f"{name}={value}")
        else:
            env[name] = value
    return env, [*kept, *rest]


def split_command(text: str) -> list[str]:
    """Split a pasted shell line into argv like a POSIX shell would, without running one."""
    joined = re.sub(r"\\\r?\n", " ", text)  # backslash-newline continuations
    try:
        return shlex.split(joined, comments=True)
    except ValueError as exc:
        raise UserError(f"cannot read the pasted command: {exc} (check the quotes)") from None


class PastedLine(NamedTuple):
    """A pasted command line as `sparktui fit -- …` and the panel's F4 both read it: the environment
    vLLM would get (a `docker run`'s -e, and a NAME=value prefix, which wins), the words
    parse_serve_command reads, and the image a `docker run` starts vLLM in (None: no docker run)."""

    env: dict[str, str]
    words: list[str]
    image: str | None


def read_pasted(tokens: list[str]) -> PastedLine:
    prefix, words = split_env(tokens)
    return PastedLine({**container_env(words), **prefix}, words, container_image(words))
