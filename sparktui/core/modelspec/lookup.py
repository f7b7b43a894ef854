"""Finding a model's files: a local folder, the local Hugging Face cache by repo id, the built-in
catalog (real configs of models people run on a DGX Spark, model_catalog.json), or, when a
fetcher is given, the Hub itself (only the small files; see sparktui/runtime/hub.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparktui.core.modelspec.build import spec_from_config, spec_from_folder
from sparktui.core.modelspec.limits import check_model_name
from sparktui.core.modelspec.spec import ModelSpec
from sparktui.errors import UserError

CATALOG_FILE = Path(__file__).resolve().parent.parent / "model_catalog.json"

# Fetches a repo's small files into a folder and returns it (or None when the Hub has no such
# repo); raises UserError for anything a person must fix (offline, gated, no network).
Fetcher = Callable[[str], Path | None]


def hub_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the Hugging Face cache may be, in the order huggingface_hub uses."""
    env = os.environ if env is None else env
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(Path(env["HF_HUB_CACHE"]).expanduser())
    if env.get("HF_HOME"):
        dirs.append(Path(env["HF_HOME"]).expanduser() / "hub")
    dirs.append(Path(env.get("HOME", "~")).expanduser() / ".cache" / "huggingface" / "hub")
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _has_config(folder: Path) -> bool:
    return (folder / "config.json").is_file() or (folder / "params.json").is_file()


def hub_snapshot(repo_id: str, dirs: list[Path]) -> Path | None:
    folder_name = "models--" + repo_id.replace("/", "--")
    for hub in dirs:
        repo = hub / folder_name
        if not repo.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            snap = repo / "snapshots" / ref.read_text().strip()
            if _has_config(snap):
                return snap
        snaps = [s for s in (repo / "snapshots").glob("*") if _has_config(s)]
        if snaps:
            return max(snaps, key=lambda s: s.stat().st_mtime)
    return None


@lru_cache(maxsize=1)
def catalog() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CATALOG_FILE.read_text())
    return data


def catalog_names() -> list[str]:
    return sorted(catalog()["models"])


def _catalog_entry(model: str) -> tuple[str, dict[str, Any]] | None:
    wanted = model.strip().lower()
    for repo_id, entry in catalog()["models"].items():
        names = [repo_id, repo_id.split("/")[-1], *entry.get("aliases", [])]
        if wanted in (n.lower() for n in names):
            return repo_id, entry
    return None


def spec_from_catalog(model: str) -> ModelSpec | None:
    found = _catalog_entry(model)
    if not found:
        return None
    repo_id, entry = found
    weights = None
    if entry.get("weights_bytes"):
        weights = (int(entry["weights_bytes"]), 0, entry.get("weights_source", "published total_size"))
    spec = spec_from_config(
        entry["config"], name=repo_id, source="built-in catalog", hf_quant=entry.get("hf_quant_config"), weights=weights
    )
    if entry.get("note"):
        spec = replace(spec, notes=(*spec.notes, entry["note"]))
    return spec


def local_folder(model: str) -> Path | None:
    """The model's local folder (resolved), None when `model` names none; a UserError when it cannot be a path."""
    try:
        path = Path(model).expanduser()
        return path.resolve() if path.is_dir() else None
    except OSError as exc:  # a name too long for a path, a loop of links …
        raise UserError(
            f"model {model[:40]!r}{'…' if len(model) > 40 else ''}: not usable as a folder path "
            f"({exc.strerror}); give a folder that holds config.json, a Hugging Face repo id or a catalog name"
        ) from None


@lru_cache(maxsize=64)
def _load_cached(model: str, dirs: tuple[Path, ...], fetcher: Fetcher | None) -> ModelSpec:
    folder = local_folder(model)
    if folder is not None:
        return spec_from_folder(folder, name=model)
    if model.startswith(("/", "./", "../", "~")):
        raise UserError(f"model folder {model} does not exist; give the path of a folder that holds config.json")
    is_repo_id = model.count("/") == 1
    if is_repo_id:
        snap = hub_snapshot(model, list(dirs))
        if snap is not None:
            spec = spec_from_folder(snap, name=model)
            return replace(spec, source=f"Hugging Face cache {snap}")
    from_catalog = spec_from_catalog(model)
    if from_catalog is not None:
        return from_catalog
    tried = [f"a local folder named {model!r}"]
    where = ", ".join(str(d) for d in dirs)
    tried.append(f"the Hugging Face cache ({where})")
    tried.append("sparktui's built-in catalog")
    if is_repo_id and fetcher is not None:
        fetched = fetcher(model)
        if fetched is not None:
            spec = spec_from_folder(fetched, name=model, cached=True)  # files others may write are not used
            return replace(spec, source=f"Hugging Face Hub (config and headers only, cached in {fetched})")
        miss = getattr(fetcher, "describe_miss", None)
        tried.append(str(miss(model)) if callable(miss) else "the Hugging Face Hub (no such repository)")
    if model.startswith("$"):  # `vllm serve $MODEL_HANDLE` pasted from a playbook
        raise UserError(
            f"unknown model {model!r}: that is a shell variable, which sparktui does not expand; write the "
            "model's repo id or folder instead"
        )
    raise UserError(
        f"unknown model {model!r}: tried {', '.join(tried)}. Fix: pass the path of a local model "
        f"folder that has config.json, download it first (huggingface-cli download {model}), check the "
        f"repo id's spelling, or use a catalog name such as {', '.join(catalog_names()[:4])} "
        "(`sparktui fit --list-models` lists all)"
    )


def load_model_spec(model: str, env: Mapping[str, str] | None = None, fetcher: Fetcher | None = None) -> ModelSpec:
    """The spec of `model`: a folder path, a repo id in the local HF cache, a catalog name, or
    (with a fetcher) a repo id on the Hub whose small files are fetched once and cached."""
    if not model or not model.strip():
        raise UserError("no model given: pass --model with a folder path, a Hugging Face repo id or a catalog name")
    model = model.strip()
    check_model_name(model)
    return _load_cached(model, tuple(hub_dirs(env)), fetcher)
