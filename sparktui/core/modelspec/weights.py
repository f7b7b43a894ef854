"""Exact weight bytes from safetensors headers, or the checkpoint's index total_size."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from sparktui.core.modelspec.limits import check_total_size
from sparktui.errors import UserError
from sparktui.files import Untrusted, is_special, open_regular, read_regular, warn_untrusted

MAX_HEADER = 100 * 1024 * 1024  # safetensors caps its JSON header at 100 MB
INDEX = "model.safetensors.index.json"
INDEX_LIMIT = 64 << 20  # ~90 bytes a tensor: 100,000 tensors (a 1T-parameter MoE) are ~9 MiB
HEADERS_FILE = "safetensors-headers.json"  # shard → header, as sparktui.runtime.hub caches them
HEADERS_LIMIT = 256 << 20  # every shard's header (each at most MAX_HEADER; ~1 MiB in practice)
CACHE_SETTING = "SPARKTUI_CACHE_DIR"  # moves the Hub fetch's cache (the fix when another user owns it)
NOT_USED = "it is not used (fit with the network and the Hub fetch replaces it, where the folder is yours)"


def read_cached(path: Path, limit: int, what: str) -> bytes | None:
    """A file the Hub fetch cached (runtime.hub): its figures pass or fail a fit, so one another user
    owns or may write (or in a folder others may write in) is not used: None, with one warning
    naming it, what is wrong and the fix. Otherwise as files.read_regular."""
    try:
        return read_regular(path, limit, what, own=True, setting=CACHE_SETTING)
    except Untrusted as exc:
        warn_untrusted(exc, NOT_USED)
        return None


def _present(path: Path) -> bool:
    """A file to read: a regular one, or something else there (a FIFO, a folder, a loop) that the
    guarded read refuses, naming it, rather than reading past it as if it were missing."""
    return path.is_file() or is_special(path) is not None


def cached_headers(folder: Path) -> Any:
    """The headers the Hub fetch cached (HEADERS_FILE) as JSON, None when there are none or they are
    damaged (the fetch writes them anew); UserError naming the file when it is no regular file of
    sane size (a FIFO would hang the fit, a huge file fill memory). None, with one warning, when
    another user owns it or may write it (or in its folder): runtime.hub fetches such headers again."""
    cached = folder / HEADERS_FILE
    if not _present(cached):
        return None
    try:
        data = read_cached(cached, HEADERS_LIMIT, "cache of safetensors headers")
        return None if data is None else json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    except UserError as exc:
        raise UserError(f"{exc}; remove it (`sparktui download` fetches the headers again)") from None


def is_mtp_tensor(name: str) -> bool:
    return name.startswith("mtp.") or ".mtp." in name or name.startswith("mtp_")


def header_bytes(header: Mapping[str, Any], where: str) -> tuple[int, int]:
    """(total tensor bytes, bytes of MTP / next-n tensors) from one parsed safetensors header."""
    total = mtp = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            size = int(end) - int(start)
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{where}: tensor {name[:80]!r} has no valid data_offsets; the file is damaged") from None
        if size < 0 or end > 1 << 50:
            raise UserError(f"{where}: tensor {name[:80]!r} has data_offsets {info['data_offsets']!r}; damaged file")
        total += size
        if is_mtp_tensor(name):
            mtp += size
    return total, mtp


# A tensor's weight category (quant.CATEGORIES) from its name, first match wins: what decode reads of
# each kind is the bytes the checkpoint stores for it (dtype × shape), scales included.
_TENSOR_CATEGORIES = (
    ("mtp", r"(^|\.)mtp[._]"),
    ("vision", r"visual|vision|multi_modal_projector|mm_projector|audio"),
    ("lm_head", r"lm_head"),
    ("per_layer_embed", r"embed_tokens_per_layer"),
    ("embed", r"embed_tokens|\.wte\.|word_embeddings"),
    ("router", r"(mlp|block_sparse_moe|mixer)\.gate\.|\.router\.|shared_expert_gate"),
    ("shared", r"shared_expert"),
    ("latent", r"latent_proj"),
    ("experts", r"experts"),
    ("linear_attn", r"linear_attn"),
    ("conv", r"conv1d"),
    ("mamba", r"mixer\.(in_proj|out_proj)"),
    ("attn", r"self_attn|\.attn\.|mixer\.(q_proj|k_proj|v_proj|o_proj)"),
    ("mlp", r"\.mlp\.|mixer\.(up_proj|down_proj)|feed_forward"),
)


@cache
def _tensor_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Compiled when first needed: a spec from the catalog reads no safetensors header."""
    return tuple((cat, re.compile(pattern)) for cat, pattern in _TENSOR_CATEGORIES)


def tensor_category(name: str) -> str:
    return next((cat for cat, pattern in _tensor_patterns() if pattern.search(name)), "other")


def stored_by_category(headers: Iterable[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, set[str]]]:
    """(bytes, dtypes) per weight category as the checkpoint stores them, from its safetensors
    headers: packed 4-bit weights show as U8 with F8_E4M3 / U8 scales, a bf16 layer as BF16."""
    stored: dict[str, int] = {}
    dtypes: dict[str, set[str]] = {}
    for header in headers:
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, Mapping):
                continue
            try:
                start, end = info["data_offsets"]
                size = int(end) - int(start)
            except (KeyError, TypeError, ValueError):
                continue  # header_bytes has already refused a damaged header
            cat = tensor_category(name)
            stored[cat] = stored.get(cat, 0) + max(0, size)
            dtypes.setdefault(cat, set()).add(str(info.get("dtype", "?")))
    return stored, dtypes


def headers_of_folder(folder: Path) -> list[dict[str, Any]]:
    """The safetensors headers of a model folder: its shards', else the ones fetched from the Hub."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return [read_header(f) for f in files]
    headers = cached_headers(folder)
    if isinstance(headers, dict):
        return [h for h in headers.values() if isinstance(h, dict)]
    return []


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (its first 8 + N bytes only)."""
    try:
        with open_regular(path, "safetensors file") as handle:  # a FIFO there waited for a writer forever
            raw_len = handle.read(8)
            if len(raw_len) < 8:
                raise UserError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", raw_len)
            if length <= 0 or length > MAX_HEADER:
                raise UserError(f"{path}: not a safetensors file (header length {length})")
            raw = handle.read(length)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: [[[… thousands deep
        raise UserError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: not a safetensors file (its header is not a JSON object)")
    return header


def safetensors_bytes(path: Path) -> tuple[int, int]:
    """(total tensor bytes, bytes of MTP / next-n tensors) from one file's header only."""
    return header_bytes(read_header(path), str(path))


def index_total(index: Mapping[str, Any], where: str) -> tuple[int, int] | None:
    """(total bytes, MTP bytes unknown → 0) from a parsed model.safetensors.index.json."""
    meta = index.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("total_size") is None:
        return None
    return check_total_size(meta.get("total_size"), where), 0


def weights_from_folder(folder: Path, *, cached: bool = False) -> tuple[int, int, str] | None:
    """(weights without MTP, MTP weights, where from) for a model folder, or None. `cached`: the
    folder is the Hub fetch's cache, whose index is read as read_cached reads (a local folder is
    the user's own choice, read as it is)."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        total = mtp = 0
        for f in files:
            t, m = safetensors_bytes(f)
            total, mtp = total + t, mtp + m
        return total - mtp, mtp, f"safetensors headers ({len(files)} file{'s' if len(files) > 1 else ''})"
    headers = cached_headers(folder)
    if isinstance(headers, dict) and headers:
        total = mtp = 0
        for shard, header in headers.items():
            if isinstance(header, dict):
                t, m = header_bytes(header, f"{folder / HEADERS_FILE} ({shard})")
                total, mtp = total + t, mtp + m
        n = len(headers)
        return total - mtp, mtp, f"safetensors headers ({n} file{'s' if n > 1 else ''}, fetched from the Hub)"
    index = folder / INDEX
    if _present(index):
        try:
            raw = read_cached(index, INDEX_LIMIT, INDEX) if cached else read_regular(index, INDEX_LIMIT, INDEX)
            if raw is None:
                return None
            data = json.loads(raw.decode())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise UserError(f"{index}: not valid JSON; download the checkpoint's index again") from None
        if not isinstance(data, dict):
            raise UserError(f"{index}: expected a JSON object")
        found = index_total(data, str(index))
        if found:
            return found[0], found[1], f"{INDEX} total_size"
    return None
