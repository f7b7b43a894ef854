"""sparktui's readers of its own files and of a model folder never hang on a FIFO nor read a huge file
into memory: each names the file, what it expected and how to fix it (exit 2 in the CLI), or, where
a listing reads many, skips it with a warning. A huge file is made sparse: no disk is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui.errors import UserError
from sparktui.runtime.bench import vllm_driver
from sparktui.runtime.bench.results import BenchSettings
from sparktui.runtime.records import state as st
from tests.support import FIXTURES, REPO, free_port
from tests.support.faults import sparktui

TINY_CONFIG = FIXTURES / "vllm-cpu" / "tiny-llama-config.json"
HANG_S = 20  # far past what any of these reads takes: a case that runs this long waits on a FIFO
AS_CAP = 1 << 30  # address space of a reader run apart; BEYOND_CAP is a (sparse) file it cannot take whole
BEYOND_CAP = 2 << 30


def sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def lay(path: Path, what: str, size: int) -> None:
    """A FIFO, or a sparse file of `size` bytes, at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    else:
        sparse(path, size)


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_bytes(TINY_CONFIG.read_bytes())
    return folder


def refused(done: subprocess.CompletedProcess[str], path: Path, what: str) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done
    assert str(path) in done.stderr, done.stderr
    expected = "a FIFO (named pipe)" if what == "fifo" else "larger than"
    assert expected in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("config.json", 80 << 20),  # over 64 MiB: the old reader took it whole, then called it not JSON
        ("hf_quant_config.json", 80 << 20),
        ("safetensors-headers.json", 300 << 20),  # the Hub fetch's cache; was passed over, or read whole
        ("model.safetensors.index.json", 80 << 20),
    ],
)
def test_a_model_folders_json_that_is_a_fifo_or_huge_is_named(tmp_path, env, name, size, what):
    folder = model_folder(tmp_path)
    path = folder / name
    if path.exists():
        path.unlink()
    lay(path, what, size)
    done = sparktui("fit", "--offline", "--model", str(folder), env=env, timeout=HANG_S)
    refused(done, path, what)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_route_show_skips_a_route_record_that_is_a_fifo_or_huge_and_says_so(env, what):
    path = st.state_dir() / "route" / f"{free_port()}.json"
    lay(path, what, 20 << 20)
    done = sparktui("route", "--show", env=env, timeout=HANG_S)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert f"warning: {path}" in done.stderr and "skipped" in done.stderr, done.stderr
    assert "no route is running" in done.stdout


def in_a_process(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (a read that waits on a FIFO cannot hang the test run), with
    its address space capped at AS_CAP (a reader that takes a huge file whole fails, not the box)."""
    cap = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({AS_CAP}, {AS_CAP}))\n"
    return subprocess.run(
        [sys.executable, "-c", cap + code], cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_a_routes_leftovers_record_that_is_a_fifo_or_huge_is_named(env, what):
    port = free_port()
    path = st.state_dir() / "route" / f"{port}.json"
    lay(path, what, BEYOND_CAP)
    done = in_a_process(
        "from sparktui.errors import UserError\nfrom sparktui.runtime.route.record import leftovers\n"
        f"try:\n    leftovers({port})\nexcept UserError as exc:\n    print(exc)\n",
        env,
    )
    assert done.returncode == 0, done
    assert str(path) in done.stdout and "remove it" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_the_cluster_nodes_file_that_is_a_fifo_or_huge_reads_as_no_nodes(env, what):
    port = free_port()
    lay(st.state_dir() / "cluster" / f"{port}.json", what, BEYOND_CAP)
    done = in_a_process(f"from sparktui.runtime.cluster.link import read_nodes\nprint(read_nodes({port}))\n", env)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_node_watch_on_a_state_record_that_is_a_fifo_or_huge_is_refused(env, what):
    port = free_port()
    path = st.state_path(port)
    lay(path, what, 20 << 20)
    done = sparktui("node-watch", "--port", str(port), env=env, timeout=HANG_S, input="")
    refused(done, path, what)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_a_vllm_bench_result_that_is_a_fifo_or_huge_is_named(tmp_path: Path, what):
    exe = tmp_path / "vllm"
    make = "os.mkfifo(p)" if what == "fifo" else "open(p, 'wb').truncate(80 << 20)"
    exe.write_text(
        f"#!{sys.executable}\nimport os, sys\na = dict(zip(sys.argv, sys.argv[1:]))\n"
        f'p = a["--result-dir"] + "/" + a["--result-filename"]\n{make}\n'
    )
    os.chmod(exe, 0o700)
    plan = vllm_driver.VllmBenchPlan(str(exe), "m", "m", "0.32.0")
    served = vllm_driver.Target("http://127.0.0.1:9", 9, None, None, None)
    with pytest.raises(UserError) as caught:
        vllm_driver.run_level(plan, served, BenchSettings(users=[1], requests_per_user=1), 1)
    expected = "a FIFO (named pipe)" if what == "fifo" else "larger than"
    assert "result" in str(caught.value) and expected in str(caught.value), caught.value


def test_a_vllm_bench_result_that_is_not_an_object_is_named(tmp_path: Path):
    result = tmp_path / "users-1.json"
    result.write_text(json.dumps([1, 2]))
    with pytest.raises(UserError, match="not a JSON object"):
        vllm_driver.read_result(result)
