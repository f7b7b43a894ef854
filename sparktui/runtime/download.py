"""Model downloads into the Hugging Face cache, and copies to a cluster node.

huggingface_hub asks the Hub (the repo's commit and file list, each file's metadata, tokens,
HF_ENDPOINT) and moves the bytes (`http_get`, with its progress bar); the files land in its cache
layout (blobs/<etag>, snapshots/<commit>/<path> linking to them, refs/<branch>). It does not resume
across runs (2.x downloads each file to a process-unique temporary file and deletes it on failure),
so each file's bytes go to blobs/<etag>.incomplete, kept when a run is interrupted, and the next run
asks only for the rest with a Range request. Before a byte moves, the download is refused when the
cache's filesystem lacks the room (less what partial files already hold, plus a reserve). `--to NODE` copies the repo's cache folder with rsync over SSH (BatchMode, the user's SSH
config or SPARKTUI_SSH_CONFIG), symlinks and partial files kept, to the same cache path there.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from sparktui.core.record import record
from sparktui.errors import UserError

GiB = 1 << 30
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_HOST = re.compile(r"[A-Za-z0-9_.@%\[\]][A-Za-z0-9_.@%\[\]-]{0,254}")


def hub_cache(env: Mapping[str, str] | None = None) -> Path:
    """Where huggingface_hub keeps repos: HF_HUB_CACHE, HF_HOME/hub, or ~/.cache/huggingface/hub."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path(env.get("HOME", "~")).expanduser() / ".cache" / "huggingface" / "hub"


def repo_folder(repo_id: str, cache: Path) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.fullmatch(repo_id):
        raise UserError(f"{repo_id!r}: expected a Hugging Face repo id such as Qwen/Qwen3-32B")
    return repo_id


@record
class RepoFileEntry:
    path: str
    size: int
    etag: str  # the blob's name in the cache: the LFS sha256, else the git blob id


@record(frozen=False)
class DownloadPlan:
    repo_id: str
    revision: str
    commit: str
    cache: Path
    to_fetch: list[RepoFileEntry] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    skipped: list[tuple[str, int]] = field(default_factory=list)  # weights vLLM would not load
    partial_bytes: int = 0  # what interrupted downloads already hold (resumed, not fetched again)
    free_bytes: int = 0
    reserve_bytes: int = 0

    @property
    def need_bytes(self) -> int:
        return max(0, sum(f.size for f in self.to_fetch) - self.partial_bytes)

    @property
    def fits(self) -> bool:
        return self.need_bytes + self.reserve_bytes <= self.free_bytes

    def describe(self) -> str:
        parts = [
            f"{self.repo_id}@{self.revision} ({self.commit[:12]}): {len(self.to_fetch)} files to fetch, "
            f"{self.need_bytes / GiB:.2f} GiB",
        ]
        if self.partial_bytes:
            parts.append(f"{self.partial_bytes / GiB:.2f} GiB resumed from an interrupted download")
        if self.cached:
            parts.append(f"{len(self.cached)} files already in the cache")
        if self.skipped:
            size = sum(n for _, n in self.skipped)
            shown = ", ".join(name for name, _ in self.skipped[:3]) + (" …" if len(self.skipped) > 3 else "")
            parts.append(
                f"{len(self.skipped)} files ({size / GiB:.2f} GiB) vLLM would not load are left out ({shown}; "
                "--include '*' fetches everything)"
            )
        parts.append(f"{self.free_bytes / GiB:.2f} GiB free in {self.cache}")
        return "; ".join(parts)


def _free(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the filesystem `path` is or will be on."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    return usage.free, usage.total


def hub_endpoint() -> str:
    """HF_ENDPOINT as it is now: huggingface_hub reads it once, when first imported, and a later
    change (a test's fake Hub, a second command in one process) would otherwise go unseen."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _hub_error(exc: BaseException, repo_id: str, revision: str) -> UserError:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = hub_endpoint()
    if isinstance(exc, GatedRepoError):
        return UserError(
            f"{repo_id}: gated; accept its terms on the Hub and give a token (HF_TOKEN, or `hf auth login`)"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return UserError(f"{repo_id}: no such repository on {endpoint} (or it is private: give HF_TOKEN)")
    if isinstance(exc, RevisionNotFoundError):
        return UserError(f"{repo_id}: no revision {revision!r}; give a branch, tag or commit that exists")
    if isinstance(exc, EntryNotFoundError):
        return UserError(f"{repo_id}@{revision}: a file listed by the Hub is gone: {exc}")
    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 404:  # a server that says no more than that
            return UserError(f"{repo_id}@{revision}: not found on {endpoint} (no such repository or revision)")
        return UserError(f"{repo_id}: the Hub at {endpoint} answered {str(exc).splitlines()[0]}")
    return UserError(f"{repo_id}: cannot reach the Hub at {endpoint}: {exc}")


# Weights in formats vLLM may load, and ones it never does; everything else (configs, tokenizer,
# chat template, code) is small and always fetched.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx", ".ckpt", ".ot")
SAFETENSORS_INDEX = "model.safetensors.index.json"
# An index holds ~90 bytes a tensor (100,000 tensors, a 1T-parameter MoE: ~9 MiB); a larger file is none
INDEX_LIMIT = 64 << 20


def vllm_files(paths: list[str], index_shards: set[str] | None) -> set[str]:
    """The files of a repo vLLM loads, as vLLM 0.32 picks its weights (model_loader/default_loader.py
    DefaultModelLoader._prepare_weights, weight_utils.download_weights_from_hf): Mistral's
    consolidated*.safetensors when the repo has them (load format auto), else the shards the
    safetensors index names (which leaves out e.g. original/), else the first of *.safetensors,
    *.bin, *.pt the repo's top level has; plus every file that is not weights."""
    top = [p for p in paths if "/" not in p]
    weights: set[str]
    consolidated = {p for p in top if fnmatch.fnmatch(p, "consolidated*.safetensors")}
    if consolidated:
        weights = consolidated
    elif index_shards:
        weights = set(index_shards)
    else:
        weights = set()
        for pattern in ("*.safetensors", "*.bin", "*.pt"):
            found = {p for p in top if fnmatch.fnmatch(p, pattern)}
            if found:
                weights = found
                break
    rest = {p for p in paths if not p.endswith(WEIGHT_SUFFIXES) and not p.startswith("original/")}
    return weights | rest


def index_shards(path: str | os.PathLike[str]) -> set[str] | None:
    """The shard names a model.safetensors.index.json lists (None: it lists none, or is not shaped
    as one). UserError naming the file when it is no regular file (a FIFO there would hang the
    read), is larger than INDEX_LIMIT, or is not JSON, with how to get a good copy."""
    from sparktui.files import read_json

    try:
        data = read_json(path, INDEX_LIMIT, "safetensors index")
    except UserError as exc:
        raise UserError(f"{exc}; remove it and the download fetches it again") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        return None
    return {str(v) for v in weight_map.values()} or None


def _safetensors_index(repo_id: str, commit: str, cache: Path, paths: list[str]) -> set[str] | None:
    """The shard names model.safetensors.index.json lists (fetched into the cache: it is small)."""
    from huggingface_hub import hf_hub_download

    if SAFETENSORS_INDEX not in paths:
        return None
    try:
        path = hf_hub_download(repo_id, SAFETENSORS_INDEX, revision=commit, cache_dir=cache, endpoint=hub_endpoint())
    except OSError:
        return None
    except Exception as exc:
        raise _hub_error(exc, repo_id, commit) from None
    return index_shards(path)


def _partial(cache: Path, repo_id: str, etag: str) -> Path:
    return repo_folder(repo_id, cache) / "blobs" / f"{etag}.incomplete"


def plan(repo_id: str, revision: str = "main", include: list[str] | None = None) -> DownloadPlan:
    """What a download would fetch, and whether the cache's disk has the room (asks the Hub, moves no file)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    check_repo_id(repo_id)
    cache = hub_cache()
    api = HfApi(endpoint=hub_endpoint())
    try:
        commit = api.model_info(repo_id, revision=revision).sha or revision
        tree = [f for f in api.list_repo_tree(repo_id, revision=commit, recursive=True) if isinstance(f, RepoFile)]
    except Exception as exc:  # huggingface_hub's and httpx's many errors: each said in words
        raise _hub_error(exc, repo_id, revision) from None
    skipped: list[tuple[str, int]] = []
    if include:
        files = list(filter_repo_objects(tree, allow_patterns=include, key=lambda f: f.path))
    else:
        index = _safetensors_index(repo_id, commit, cache, [f.path for f in tree])
        keep = vllm_files([f.path for f in tree], index)
        files = [f for f in tree if f.path in keep]
        skipped = [(f.path, int(f.size)) for f in tree if f.path not in keep]
    if not files:
        wanted = f" matching --include {' '.join(include)}" if include else ""
        raise UserError(f"{repo_id}@{revision}: no files{wanted}")
    out = DownloadPlan(repo_id, revision, commit, cache, skipped=skipped)
    snapshot = repo_folder(repo_id, cache) / "snapshots" / commit
    for f in files:
        if (snapshot / f.path).is_file():
            out.cached.append(f.path)
            continue
        etag = f.lfs.sha256 if f.lfs is not None else f.blob_id
        out.to_fetch.append(RepoFileEntry(f.path, int(f.size), etag))
        part = _partial(cache, repo_id, etag)
        if part.is_file():
            out.partial_bytes += min(part.stat().st_size, int(f.size))
    out.free_bytes, total = _free(repo_folder(repo_id, cache))
    out.reserve_bytes = min(GiB, total // 20)  # never fill the disk the OS and the logs live on
    return out


Progress = Callable[[str, int, int], None]  # (file, bytes so far, its size)


def _reporter(on_progress: Progress) -> type:
    """tqdm's interface as huggingface_hub's http_get uses it, reporting to a callback (the panel)
    instead of drawing on a terminal."""

    class Reporter:
        def __init__(self, *args: Any, total: int | None = None, initial: int = 0, desc: str = "", **kw: Any):
            self.total, self.n, self.desc = int(total or 0), int(initial or 0), desc
            on_progress(self.desc, self.n, self.total)

        def __enter__(self) -> Reporter:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: int | float | None = 1) -> None:
            self.n += int(n or 0)
            on_progress(self.desc, self.n, self.total)

        def close(self) -> None:
            return None

    return Reporter


def fetch(p: DownloadPlan, on_progress: Progress | None = None) -> Path:
    """Fetch what the plan lists into the cache; returns the snapshot folder. Progress: huggingface_hub's
    bar for each file on the terminal, or `on_progress` calls. A file's bytes go to
    blobs/<etag>.incomplete first, kept when the download is interrupted: the next run asks the Hub
    only for the rest (HTTP Range)."""
    snapshot = repo_folder(p.repo_id, p.cache) / "snapshots" / p.commit
    bar = _reporter(on_progress) if on_progress is not None else None
    try:
        for entry in p.to_fetch:
            _fetch_one(p, entry, snapshot, bar)
    except UserError:
        raise
    except OSError as exc:
        raise UserError(f"{p.repo_id}: cannot write the cache {p.cache}: {exc}") from None
    except Exception as exc:
        raise _hub_error(exc, p.repo_id, p.revision) from None
    if p.revision != p.commit:  # the branch or tag now points at what was fetched, as huggingface_hub records it
        ref = repo_folder(p.repo_id, p.cache) / "refs" / p.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(p.commit)
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def _fetch_one(p: DownloadPlan, entry: RepoFileEntry, snapshot: Path, bar: type | None) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    headers = build_hf_headers()
    url = hf_hub_url(p.repo_id, entry.path, revision=p.commit, endpoint=hub_endpoint())
    meta = get_hf_file_metadata(url, headers=headers)
    etag = meta.etag or entry.etag
    size = meta.size if meta.size is not None else entry.size
    blobs = repo_folder(p.repo_id, p.cache) / "blobs"
    blob = blobs / etag
    locks = p.cache / ".locks" / repo_folder(p.repo_id, p.cache).name
    locks.mkdir(parents=True, exist_ok=True)
    blobs.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(locks / f"{etag}.lock"):  # the lock huggingface_hub itself takes for this blob
        if not blob.is_file():
            part = _partial(p.cache, p.repo_id, etag)
            with part.open("ab") as fh:
                have = fh.tell()
                if have > size:  # not this file's bytes: start again
                    fh.truncate(0)
                    have = 0
                if have < size:
                    http_get(meta.location, fh, resume_size=have, headers=headers, expected_size=size,
                             displayed_filename=entry.path, tqdm_class=bar)  # fmt: skip
            got = part.stat().st_size
            if got != size:
                raise UserError(
                    f"{p.repo_id}: {entry.path} came with {got} of {size} bytes; run the download again to resume"
                )
            os.replace(part, blob)
    link = snapshot / entry.path
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(blob, link.parent))  # as huggingface_hub lays out its cache


def is_downloaded(repo_id: str, cache: Path | None = None) -> bool:
    """Whether the cache holds a snapshot with the model's weights: every shard its safetensors
    index names, or a single model.safetensors / consolidated.safetensors (a config alone is not).
    An index that cannot be read (a FIFO, a file far too large, not JSON) counts as not downloaded:
    the download names it."""
    repo = repo_folder(repo_id, cache or hub_cache())
    for snap in (repo / "snapshots").glob("*") if (repo / "snapshots").is_dir() else []:
        index = snap / SAFETENSORS_INDEX
        if index.is_file():
            try:
                shards = index_shards(index) or set()
            except (UserError, OSError):
                continue
            if shards and all((snap / shard).is_file() for shard in shards):
                return True
        elif any((snap / name).is_file() for name in ("model.safetensors", "consolidated.safetensors")):
            return True
    return False


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot of `revision` (a branch's ref or a commit), or None."""
    repo = repo_folder(check_repo_id(repo_id), hub_cache())
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snap = repo / "snapshots" / commit
    return snap if snap.is_dir() else None


def parse_target(text: str) -> tuple[str, str | None]:
    """NODE or NODE:PATH (PATH: the hub cache there; default the same path as here, below the home)."""
    host, colon, path = text.partition(":")
    if not _HOST.fullmatch(host):
        raise UserError(
            f"--to {text!r}: expected an SSH host name or alias (not starting with '-'), optionally :PATH, "
            "e.g. spark-b or spark-b:/data/hf/hub"
        )
    if colon and not path.startswith("/"):
        raise UserError(f"--to {text!r}: the path after ':' is the hub cache there, absolute (e.g. /data/hf/hub)")
    return host, path or None


def copy_argv(repo_id: str, target: str, env: Mapping[str, str] | None = None) -> list[str]:
    """rsync of the repo's cache folder to the same place on `target` over SSH."""
    env = os.environ if env is None else env
    host, remote_cache = parse_target(target)
    cache = hub_cache(env)
    if remote_cache is None:
        home = Path(env.get("HOME", "~")).expanduser()
        try:
            remote_cache = str(cache.relative_to(home))  # rsync reads a relative path from the remote home
        except ValueError:
            remote_cache = str(cache)
    rsync = shutil.which("rsync")
    if rsync is None:
        raise UserError("--to: rsync is not installed here (apt-get install rsync); it must be on the node too")
    ssh = "ssh -o BatchMode=yes -o ConnectTimeout=10"
    if config := env.get("SPARKTUI_SSH_CONFIG"):
        if re.search(r"\s", config):
            raise UserError(f"SPARKTUI_SSH_CONFIG={config!r}: a path without spaces, please (rsync splits -e on them)")
        ssh += f" -F {config}"
    source = repo_folder(repo_id, cache)
    # -a keeps the snapshot symlinks (relative, into blobs/); --partial resumes an interrupted copy;
    # --mkpath makes the cache folder there; --protect-args keeps the path one word on the remote side
    return [
        rsync,
        "-a",
        "--partial",
        "--mkpath",
        "--protect-args",
        "--info=progress2",
        "-e",
        ssh,
        f"{source}/",
        f"{host}:{remote_cache}/{source.name}/",
    ]


def copy_to(repo_id: str, target: str) -> None:
    argv = copy_argv(repo_id, target)
    if not Path(argv[-2]).is_dir():
        raise UserError(f"{repo_id}: nothing in the cache to copy ({argv[-2]})")
    done = subprocess.run(argv, check=False)  # rsync's own progress on the terminal
    if done.returncode != 0:
        raise UserError(f"--to {target}: rsync over SSH failed (exit {done.returncode}); the copy can be resumed")
