"""runtime.download reads model.safetensors.index.json through sparktui.files' guarded reader: a
FIFO there hangs nothing and a file far larger than an index is refused naming it (`sparktui
download` exits 2), and is_downloaded never reads such a file whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.fake_hub import FakeHub, serve_fake_hub

REPO_ID = "acme/indexed-model"
INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with serve_fake_hub() as server:
        server.add(REPO_ID, "config.json", b'{"architectures": ["LlamaForCausalLM"]}')
        server.add(REPO_ID, INDEX, json.dumps({"metadata": {}, "weight_map": {"a.weight": SHARD}}).encode())
        server.add(REPO_ID, SHARD, b"w" * 1000)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield server


def snapshot(tmp_path: Path, sha: str) -> Path:
    snap = tmp_path / "hub" / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / sha
    snap.mkdir(parents=True)
    return snap


def download(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sparktui", "download", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)


@pytest.mark.slow  # a sparktui process; before the fix it hung on the FIFO until this timeout
def test_a_fifo_as_the_cached_index_is_named_not_a_hang(hub: FakeHub, tmp_path: Path) -> None:
    index = snapshot(tmp_path, hub.sha) / INDEX
    os.mkfifo(index)
    done = download(REPO_ID)
    assert done.returncode == 2, done.stderr
    assert str(index) in done.stderr and "FIFO" in done.stderr and "Traceback" not in done.stderr
    assert not any(m == "GET" and p.endswith(SHARD) for m, p, _ in hub.requests)  # nothing fetched on a guess


@pytest.mark.slow  # a sparktui process
def test_an_index_far_larger_than_one_is_refused_naming_it(hub: FakeHub, tmp_path: Path) -> None:
    from sparktui.runtime.download import INDEX_LIMIT

    index = snapshot(tmp_path, hub.sha) / INDEX
    with index.open("wb") as f:
        f.truncate(INDEX_LIMIT + 1)  # sparse: no disk used
    done = download(REPO_ID)
    assert done.returncode == 2, done.stderr
    assert str(index) in done.stderr and f"{INDEX_LIMIT:,}" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow  # a process with its address space capped
def test_is_downloaded_never_reads_a_huge_index_whole(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, "0" * 40)
    with (snap / INDEX).open("wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse: read whole it is 8 GiB of memory (and a MemoryError here)
    (snap / SHARD).write_bytes(b"w")
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from pathlib import Path\n"
        "from sparktui.runtime.download import is_downloaded\n"
        f"print(is_downloaded({REPO_ID!r}, Path(sys.argv[1])))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "hub")], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
