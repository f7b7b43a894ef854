"""`sparktui download` against a local fake Hub (tests/support/fake_hub, HF_ENDPOINT on loopback),
never the network: progress on a terminal, the Hugging Face cache filled, a download interrupted
and resumed from where it stopped, a refusal when the disk lacks the room (a real 4 MiB tmpfs), and
`--to NODE` copying the cached model over SSH with rsync (two network-namespace nodes)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, wait_for
from tests.support.fake_hub import FakeHub, serve_fake_hub

pytestmark = pytest.mark.slow  # runs sparktui downloads as processes

REPO_ID = "acme/tiny-model"
# 24 MiB of "weights": huggingface_hub's http_get writes in 10 MiB pieces, so an interruption keeps 10 or 20
WEIGHTS = os.urandom(24 << 20)
CONFIG = b'{"architectures": ["LlamaForCausalLM"]}'


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with serve_fake_hub() as server:
        server.add(REPO_ID, "config.json", CONFIG)
        server.add(REPO_ID, "model.safetensors", WEIGHTS)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield server


def argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "sparktui", "download", *args]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv(*args), capture_output=True, text=True, cwd=REPO, timeout=120)


def snapshot(cache: Path, hub: FakeHub) -> Path:
    return cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / hub.sha


def on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal, as a person at a terminal would see it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120×24 terminal
    proc = subprocess.Popen(args, stdout=slave, stderr=slave, cwd=REPO)
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed: the process is done
            break
        if not data:
            break
        out += data
    os.close(master)
    return proc.wait(timeout=60), out.decode(errors="replace")


def test_download_shows_progress_and_fills_the_cache(hub: FakeHub, tmp_path: Path) -> None:
    hub.chunk_delay_s = 0.002  # long enough for the bar to move on the terminal
    code, out = on_a_terminal(argv(REPO_ID))
    assert code == 0, out
    assert "2 files to fetch" in out and "free in" in out  # the plan, disk checked, before any byte
    # huggingface_hub's byte progress bar for the file, as it moves on the terminal
    assert "10.5M/25.2M" in out and "model.safetensors: 100%" in out and "25.2M/25.2M" in out
    snap = snapshot(tmp_path / "hub", hub)
    assert (snap / "model.safetensors").read_bytes() == WEIGHTS and (snap / "config.json").read_bytes() == CONFIG
    assert (snap.parent.parent / "refs" / "main").read_text() == hub.sha
    # a second run fetches nothing: every file is cached
    again = run(REPO_ID)
    assert (
        again.returncode == 0 and "0 files to fetch" in again.stderr and "2 files already in the cache" in again.stderr
    )


def test_a_download_interrupted_resumes_where_it_stopped(hub: FakeHub, tmp_path: Path) -> None:
    hub.chunk_delay_s = 0.02  # ~3 MB/s: several seconds for the weights
    blobs = tmp_path / "hub" / f"models--{REPO_ID.replace('/', '--')}" / "blobs"
    proc = subprocess.Popen(argv(REPO_ID), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def partial() -> int | None:
        parts = list(blobs.glob("*.incomplete")) if blobs.is_dir() else []
        size = max((p.stat().st_size for p in parts), default=0)
        return size if size >= (10 << 20) else None

    wait_for(partial, 60, what="a partial download of 10 MiB")
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    assert proc.wait(timeout=30) != 0
    held = max(p.stat().st_size for p in blobs.glob("*.incomplete"))
    assert 0 < held < len(WEIGHTS)
    hub.chunk_delay_s = 0.0
    before = len(hub.requests)
    done = run(REPO_ID)
    assert done.returncode == 0, done.stderr
    assert "resumed from an interrupted download" in done.stderr
    ranges = [r for method, path, r in hub.requests[before:] if method == "GET" and path.endswith("model.safetensors")]
    assert ranges and ranges[-1] is not None and int(ranges[-1].removeprefix("bytes=").split("-")[0]) >= held
    weights = snapshot(tmp_path / "hub", hub) / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).digest() == hashlib.sha256(WEIGHTS).digest()
    assert not list(blobs.glob("*.incomplete"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB filesystem (tmpfs), removed after the test."""
    mount = tmp_path / f"small-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: cannot mount a tmpfs: {done.stderr}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_download_is_refused_when_the_disk_lacks_room(
    hub: FakeHub, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(small_disk / "hub"))
    done = run(REPO_ID)
    assert done.returncode == 2, done.stderr
    assert "not enough disk" in done.stderr and str(small_disk / "hub") in done.stderr
    assert "--include" in done.stderr  # says how to fit it
    assert not any(m == "GET" and p.endswith("model.safetensors") for m, p, _ in hub.requests)  # not a byte moved
    # what fits still comes: the config alone
    assert run(REPO_ID, "--include", "*.json").returncode == 0


def test_bad_requests_exit_2(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    for args, said in (
        (["not a repo"], "expected a Hugging Face repo id"),
        (["acme/missing"], "no such repository"),
        ([REPO_ID, "--include", "*.gguf"], "no files matching --include"),
        ([REPO_ID, "--to=-oProxyCommand=x"], "expected an SSH host"),
    ):
        done = run(*args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = run(REPO_ID)
    assert done.returncode == 2 and "offline" in done.stderr


def test_to_node_copies_the_cached_model_over_ssh(hub: FakeHub, tmp_path: Path, netns_cluster) -> None:
    assert run(REPO_ID).returncode == 0
    head = netns_cluster.nodes[0]
    remote = tmp_path / "node1-hub"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",  # the fake Hub listens here, not in the node's namespace: copy what is cached
        "SPARKTUI_SSH_CONFIG": str(netns_cluster.ssh_config),
    }
    done = subprocess.run(
        netns_cluster.exec_argv(head, argv(REPO_ID, "--to", f"node1:{remote}")),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    copied = remote / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / hub.sha / "model.safetensors"
    assert copied.is_symlink() and copied.read_bytes() == WEIGHTS  # the snapshot's link into blobs/, kept


def test_by_default_only_what_vllm_loads_is_fetched(hub: FakeHub, tmp_path: Path) -> None:
    import json

    repo = "acme/llama-with-originals"
    shards = {"model-00001-of-00002.safetensors": os.urandom(1 << 20), "model-00002-of-00002.safetensors": b"w" * 1000}
    index = {
        "metadata": {},
        "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"},
    }
    hub.add(repo, "config.json", CONFIG)
    hub.add(repo, "tokenizer.json", b"{}")
    hub.add(repo, "model.safetensors.index.json", json.dumps(index).encode())
    for name, data in shards.items():
        hub.add(repo, name, data)
    hub.add(repo, "original/consolidated.00.pth", os.urandom(2 << 20))  # Meta's own checkpoint beside it
    hub.add(repo, "original/params.json", b"{}")
    hub.add(repo, "pytorch_model.bin", os.urandom(2 << 20))
    done = run(repo)
    assert done.returncode == 0, done.stderr
    assert "3 files (" in done.stderr and "vLLM would not load are left out" in done.stderr
    snap = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / hub.sha
    got = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file())
    assert got == sorted(["config.json", "tokenizer.json", "model.safetensors.index.json", *shards])
    fetched = {p for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p}
    assert not any(p.endswith((".pth", ".bin")) for p in fetched)
    # everything, when asked for
    assert run(repo, "--include", "*").returncode == 0
    assert (snap / "original" / "consolidated.00.pth").is_file() and (snap / "pytorch_model.bin").is_file()
