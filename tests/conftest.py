"""Fixtures every test folder shares. Data lives in tests/fixtures (see its SOURCES.md files);
helpers in tests/support."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import FIXTURES, free_port, quiet, sweep_recorded_servers
from tests.support.stub_vllm import install_stub

# The stub replays its log 100× faster, and dies on its own if a test forgets it.
FAST_STUB = {"STUB_VLLM_TIME_SCALE": "0.01", "STUB_VLLM_MAX_LIFE_S": "120"}


# ---- app tests: the pilot waits until the app has nothing pending, not for a quiet CPU
quiet.install()


# ---- the quick loop: a test not marked slow starts no process

_spawned: list[str] = []  # what the running quick test started, from the main thread
_quick_call = threading.Event()  # set while a test that is not marked slow runs its body
_popen_init = subprocess.Popen.__init__
_fork = os.fork


def _popen_watched(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    # Only the main thread: a thread a previous test left behind cannot be blamed on this one.
    if _quick_call.is_set() and threading.current_thread() is threading.main_thread():
        _spawned.append(str(args)[:120])
    _popen_init(self, args, *rest, **kwargs)


def _fork_watched() -> int:
    if _quick_call.is_set() and threading.current_thread() is threading.main_thread():
        _spawned.append("os.fork()")
    return _fork()


subprocess.Popen.__init__ = _popen_watched  # type: ignore[method-assign]
os.fork = _fork_watched


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """`pytest -m "not slow"` is the quick loop: a test there that starts a process (sparktui
    itself, a shell, a tool) fails, naming it, so the loop stays quick; mark such a test slow."""
    quick = item.get_closest_marker("slow") is None
    _spawned.clear()
    if quick:
        _quick_call.set()
    try:
        result = yield
    finally:
        _quick_call.clear()
    if quick and _spawned:
        pytest.fail(f"this test is not marked slow but started a process: {_spawned[0]}; mark it @pytest.mark.slow")
    return result


@pytest.fixture(autouse=True)
def not_the_users_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's own sparktui folders: a test that does not ask for
    `isolated` still gets config and state folders of its own (a command made the real state
    dir's sub-folders, and a bench test appended to the real history, before this)."""
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "own-config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "own-state"))


@pytest.fixture(autouse=True)
def no_hugging_face_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach the real Hub: offline by default, sparktui's Hub cache in the test's
    folder. Tests of fetching serve tests/support/fake_hub on loopback and lift the offline mode."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("SPARKTUI_CACHE_DIR", str(tmp_path / "sparktui-cache"))


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no warning said (files.WARNINGS: once a process), so one test's
    warnings are neither kept from another nor shown as notices in a later test's panel."""
    from sparktui import files

    monkeypatch.setattr(files, "WARNINGS", files.Warnings())


@pytest.fixture(autouse=True)
def the_users_umask(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test that runs cli.main() in-process makes this process's files private and records the
    user's umask in SPARKTUI_USER_UMASK (paths.make_files_private): each test starts without that
    record and gets the umask back, so the commands later tests start see the umask they set."""
    monkeypatch.delenv("SPARKTUI_USER_UMASK", raising=False)
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)


@pytest.fixture(autouse=True)
def no_shm_leftovers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A test that starts processes removes what they left in /dev/shm (RAM on a Spark): what is
    still there after its own clean-up, held by nobody, is removed here and fails the test.
    Only files its own processes held count (tests/support/shm_watch.py). Its value: the watch."""
    if request.node.get_closest_marker("slow") is None:
        yield None  # the quick loop starts no process
        return
    from tests.support.shm_watch import OWNER_ENV, ShmWatch

    watch = ShmWatch()
    monkeypatch.setenv(OWNER_ENV, watch.token)
    watch.start()
    yield watch
    left = watch.stop()
    if left:
        pytest.fail(f"left in /dev/shm, held by nothing (removed now): {', '.join(left)}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def no_stale_cgroups() -> Iterator[None]:
    """Remove the empty cgroups (runtime.containment) that trees started by the tests leave."""
    yield
    from sparktui.runtime.host.containment import remove_stale_scopes

    remove_stale_scopes()


@pytest.fixture
def speed_estimates(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The context of each decode-speed estimate core.speed makes from now on (a fit's figure is one)."""
    from sparktui.core import speed as sp

    calls: list[int | None] = []
    real = sp.estimate_for_config

    def counted(*args: Any, **kwargs: Any) -> Any:
        estimate = real(*args, **kwargs)
        calls.append(getattr(estimate, "context", None))
        return estimate

    monkeypatch.setattr(sp, "estimate_for_config", counted)
    return calls


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Config and state in this test's own folders; whatever it leaves running is swept by identity."""
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path
    sweep_recorded_servers()


@pytest.fixture
def env(isolated: Path) -> dict[str, str]:
    """The environment for a sparktui subprocess that shares this test's state dir."""
    return dict(os.environ)


@pytest.fixture
def make_profile(tmp_path: Path) -> Callable[..., Path]:
    """Write a profile that serves the stub vLLM on a free port; stub knobs go in as keywords."""
    stub = install_stub(tmp_path / "bin")

    def make(
        *,
        port: int | None = None,
        serve_extra: str = "",
        guard: str = "",
        watch: str = "",
        model: str = "/models/tiny",
        **stub_env: str,
    ) -> Path:
        port = port or free_port()
        env_lines = "\n".join(f'{k} = "{v}"' for k, v in {**FAST_STUB, **stub_env}.items())
        path = tmp_path / f"tiny-{port}.toml"
        path.write_text(
            f'[serve]\nmodel = "{model}"\nport = {port}\nmax-model-len = 512\nenforce-eager = true\n'
            f"{serve_extra}\n[guard]\n{guard}\n[watch]\n{watch}\n"
            f'[runner]\nexecutable = "{stub}"\n[env]\n{env_lines}\n'
        )
        return path

    return make


@pytest.fixture
def netns_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """Two "nodes" on this machine (tests/support/netns_cluster.py): network namespaces on a private
    subnet, each with its own sshd and state dir; removed with everything in them after the test,
    pass or fail. Skipped where sshd is missing, except under CI=true (.ci/run installs it).
    Parametrized indirectly with a function of tmp_path, it gives nodes their own login environment
    (build's node_env)."""
    from tests.support import netns_cluster as nc

    why = nc.missing_tools()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the netns cluster tests must run, but {why}")
        pytest.skip(why)
    node_env = request.param(tmp_path) if hasattr(request, "param") else None
    cluster = nc.build(tmp_path / "cluster", node_env=node_env)
    try:
        yield cluster
    finally:
        cluster.close()
