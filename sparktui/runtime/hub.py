"""Fetch the small files of a Hugging Face model that is not downloaded: config.json,
hf_quant_config.json, params.json, the safetensors index, and each shard's header (by HTTP range
request: its first 8 + N bytes, never the weights). They are cached under sparktui's cache, so a
second fit needs no network, and HF_HUB_OFFLINE=1 (or `sparktui fit --offline`) uses only that.

URLs and credentials come from huggingface_hub (HF_ENDPOINT, HF_TOKEN, the saved login).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.errors import UserError
from sparktui.files import Untrusted, open_regular, own_folder_refusal, warn_untrusted

if TYPE_CHECKING:  # httpx is imported where the Hub is asked (a quarter second `fit` of a local model never pays)
    import httpx

SMALL_FILES = ("config.json", "params.json", "hf_quant_config.json", "model.safetensors.index.json")
SINGLE_SHARDS = ("model.safetensors", "consolidated.safetensors")
HEADERS_FILE = "safetensors-headers.json"  # {shard: header}, read by modelspec.weights
CACHED = (*SMALL_FILES, HEADERS_FILE)  # every file the fetch keeps in a repo's folder
CACHE_SETTING = "SPARKTUI_CACHE_DIR"
MAX_HEADER = 100 * 1024 * 1024
MAX_SMALL = 20 * 1024 * 1024  # a config or an index larger than this is not one
MAX_SHARDS = 2_000
TIMEOUT_S, CONNECT_TIMEOUT_S = 15.0, 5.0
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_TRUE = ("1", "true", "yes", "on")


def is_offline(env: Mapping[str, str]) -> bool:
    return env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def cache_root(env: Mapping[str, str]) -> Path:
    if env.get("SPARKTUI_CACHE_DIR"):
        return Path(env["SPARKTUI_CACHE_DIR"]).expanduser() / "hub"
    from sparktui import paths

    return paths.cache_dir() / "hub"


def _endpoint(env: Mapping[str, str]) -> str:
    if env.get("HF_ENDPOINT"):
        return env["HF_ENDPOINT"].rstrip("/")
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


_MISSING: set[tuple[str, str]] = set()  # (endpoint, repo id) the Hub said it has no config for


class HubFetcher:
    """modelspec.Fetcher: `fetcher(repo_id)` → a folder of the repo's small files, or None when
    the Hub has no such repository. Raises UserError for what a person must fix. A repo the Hub
    lacks is not asked for again in this process (the TUI looks a model up as its name is typed)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, offline: bool = False) -> None:
        self.env = dict(os.environ if env is None else env)
        self.offline = offline or is_offline(self.env)
        self.root = cache_root(self.env)

    def __call__(self, repo_id: str) -> Path | None:
        folder = self.root / repo_id.replace("/", "--")
        if (folder / "config.json").is_file() or (folder / "params.json").is_file():
            untrusted = _untrusted(folder)
            if not untrusted or self.offline or not _ours(folder):
                return folder  # modelspec does not use an untrusted file of it, and says so
            for exc in untrusted:
                warn_untrusted(exc, "the model's small files are fetched again from the Hub")
            return self._download(repo_id, folder) or folder
        if self.offline:
            return None
        if not _REPO_ID.match(repo_id):
            return None
        key = (_endpoint(self.env), repo_id)
        if key in _MISSING:
            return None
        found = self._download(repo_id, folder)
        if found is None:
            _MISSING.add(key)
        return found

    def describe_miss(self, repo_id: str) -> str:
        """What was tried, for the error when `self(repo_id)` found nothing."""
        if self.offline:
            return f"sparktui's Hub cache ({self.root}; offline, so the Hub itself was not asked)"
        return f"the Hugging Face Hub at {_endpoint(self.env)} (no such repository, or no config.json in it)"

    # ----------------------------------------------------------------- network

    def _url(self, repo_id: str, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        return str(hf_hub_url(repo_id, filename, endpoint=_endpoint(self.env)))

    def _headers(self) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers

        token = self.env.get("HF_TOKEN") or None
        headers: dict[str, str] = build_hf_headers(token=token)
        return headers

    def _get(
        self, client: httpx.Client, url: str, what: str, byte_range: tuple[int, int] | None = None
    ) -> bytes | None:
        import httpx

        headers = self._headers()
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.status_code == 404:
                    return None
                if response.status_code in (401, 403):
                    raise UserError(
                        f"the Hugging Face Hub refused {what} ({response.status_code}): the model is gated or "
                        "private. Accept its licence on huggingface.co and set HF_TOKEN (or `hf auth login`)"
                    )
                if response.status_code >= 400:
                    raise UserError(f"the Hugging Face Hub answered {response.status_code} for {what} ({url})")
                limit = MAX_SMALL if byte_range is None else byte_range[1] - byte_range[0] + 1
                data = b""
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        if byte_range is not None:  # a server that ignored Range: keep what we asked for
                            return data[:limit]
                        raise UserError(f"{what} from the Hugging Face Hub is over {limit:,} bytes; not a config")
                return data
        except httpx.HTTPError as exc:
            raise UserError(
                f"could not reach the Hugging Face Hub at {_endpoint(self.env)} for {what}: {exc}. "
                "Check the network, or use --offline (HF_HUB_OFFLINE=1) with a downloaded model"
            ) from None

    def _header(self, client: httpx.Client, repo_id: str, shard: str) -> dict[str, Any] | None:
        url = self._url(repo_id, shard)
        first = self._get(client, url, f"{repo_id}/{shard}", (0, 7))
        if first is None:
            return None
        if len(first) < 8:
            raise UserError(f"{repo_id}/{shard}: not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", first[:8])
        if not 0 < length <= MAX_HEADER:
            raise UserError(f"{repo_id}/{shard}: not a safetensors file (header length {length})")
        raw = self._get(client, url, f"{repo_id}/{shard} header", (8, 8 + length - 1))
        try:
            header = json.loads(raw or b"")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{repo_id}/{shard}: not a safetensors file (its header is not JSON)") from None
        return header if isinstance(header, dict) else None

    def _download(self, repo_id: str, folder: Path) -> Path | None:
        import httpx

        files: dict[str, bytes] = {}
        with httpx.Client(timeout=httpx.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S), follow_redirects=True) as client:
            for name in SMALL_FILES:
                data = self._get(client, self._url(repo_id, name), f"{repo_id}/{name}")
                if data is not None:
                    files[name] = data
            if "config.json" not in files and "params.json" not in files:
                return None
            shards = self._shards(files.get("model.safetensors.index.json"))
            headers: dict[str, Any] = {}
            for shard in shards or SINGLE_SHARDS:
                header = self._header(client, repo_id, shard)
                if header is not None:
                    headers[shard] = header
                    if not shards:
                        break
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if (info := folder.stat()).st_uid == os.getuid() and info.st_mode & 0o077:
            folder.chmod(0o700)  # its headers pass or fail a fit: sparktui's alone (modelspec.weights checks)
        for name, data in files.items():
            _write(folder / name, data)
        if headers:
            _write(folder / HEADERS_FILE, json.dumps(headers).encode())
        for name in CACHED:  # one the Hub no longer serves (or someone put there) is not the repo's
            if name not in files and not (name == HEADERS_FILE and headers):
                try:
                    (folder / name).unlink(missing_ok=True)
                except OSError:
                    pass  # a folder there: modelspec names it
        return folder

    @staticmethod
    def _shards(index: bytes | None) -> list[str]:
        if not index:
            return []
        try:
            data = json.loads(index)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return []
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            return []
        shards = sorted({str(v) for v in weight_map.values() if str(v).endswith(".safetensors")})
        return shards[:MAX_SHARDS]


def _untrusted(folder: Path) -> list[Untrusted]:
    """Why the cached files are not sparktui's alone (files.open_regular's `own` check): the
    folder's refusal (one for all its files), else each file's. Empty: all are trusted."""
    if (refusal := own_folder_refusal(folder, "file cached from the Hub", CACHE_SETTING)) is not None:
        return [Untrusted(refusal)]
    found = []
    for name in CACHED:
        try:
            open_regular(folder / name, f"{name} cached from the Hub", own=True, setting=CACHE_SETTING).close()
        except Untrusted as exc:
            found.append(exc)
        except (OSError, UserError):
            pass  # none, or no regular file: modelspec says so
    return found


def _ours(folder: Path) -> bool:
    """The fetch may rewrite the folder's files (and make it 0700): it is ours and we may write in it."""
    try:
        return folder.stat().st_uid == os.getuid() and os.access(folder, os.W_OK)
    except OSError:
        return False


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.replace(path)
