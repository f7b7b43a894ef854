"""`sparktui route` swapping between two real vLLM servers (CPU build 0.32.0) on the tiny model.

Two groups, so that a request for one stops the other (on the CPU build both would fit in the pool:
--kv-cache-memory-bytes keeps each small; the fit-driven swap is tested with the stub). The swap
stops the first tree whole, waits on the leak gate, starts the second, and answers; SIGTERM then
leaves no process of either. Needs SPARKTUI_TEST_VLLM, like test_real_vllm.py; ~3 minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from tests.e2e.test_real_vllm import tiny_model, vllm, workdir  # noqa: F401  (fixtures)
from tests.support import REPO, free_port, sweep_recorded_servers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# float32: on this CPU the bf16 path's worker dies with SIGILL on the first request (vLLM 0.32 CPU build)
SERVE = (
    'enforce-eager = true\nkv-cache-memory-bytes = "64M"\nmax-model-len = 512\ngpu-memory-utilization = 0.5\n'
    'dtype = "float32"\n'
)
TIMEOUT_S = 300


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path / "state"
    sweep_recorded_servers()


def profile(folder, name: str, model, vllm_path) -> tuple[str, int]:
    port = free_port()
    path = folder / f"{name}.toml"
    path.write_text(f'[serve]\nmodel = "{model}"\nport = {port}\n{SERVE}\n[machine]\nname = "auto"\n\n'
                    f'[runner]\nexecutable = "{vllm_path}"\n')  # fmt: skip
    return str(path), port


def gone(port: int) -> bool:
    s = st.read_state(st.state_path(port))
    assert s is not None and s.tree is not None
    sup = proc.ProcessIdentity(s.supervisor.pid, s.supervisor.start_time or 0)
    return (
        s.status == "exited"
        and not sup.is_alive()
        and not any(proc.ProcessIdentity(p, t).is_alive() for p, t in s.tree.members)
    )


def test_route_swaps_between_two_real_vllm_servers_and_sigterm_leaves_nothing(vllm, tiny_model, tmp_path, state_dir):  # noqa: F811
    a, port_a = profile(tmp_path, "alpha", tiny_model, vllm)
    b, port_b = profile(tmp_path, "beta", tiny_model, vllm)
    listen = free_port()
    route = tmp_path / "route.toml"
    route.write_text(f'[route]\nlisten = "127.0.0.1:{listen}"\nqueue-timeout-s = {TIMEOUT_S}\n'
                     f'[route.models.alpha]\nprofile = "{a}"\n[route.models.beta]\nprofile = "{b}"\n'
                     '[route.groups]\none = ["alpha"]\ntwo = ["beta"]\n')  # fmt: skip
    env = {**os.environ, "SPARKTUI_STATE_DIR": str(state_dir)}
    front = subprocess.Popen([sys.executable, "-m", "sparktui", "route", "--file", str(route)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{listen}"
    try:

        def up() -> bool:
            assert front.poll() is None, front.stderr.read() if front.stderr else ""
            try:
                return httpx.get(url + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "the route to listen")
        ask = {"prompt": "Hello world", "max_tokens": 4, "temperature": 0}
        first = httpx.post(url + "/v1/completions", json={"model": "alpha", **ask}, timeout=TIMEOUT_S)
        assert first.status_code == 200, first.text
        assert first.json()["model"] == "alpha" and first.json()["usage"]["completion_tokens"] == 4
        chat = {"model": "beta", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=chat, timeout=TIMEOUT_S) as second:
            assert second.status_code == 200, second.read()
            events = [line[6:] for line in second.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and json.loads(events[0])["model"] == "beta"
        assert gone(port_a)  # alpha's whole tree was stopped before beta started
        record = json.loads((state_dir / "route" / f"{listen}.json").read_text())
        swap = record["history"][-1]
        assert swap["model"] == "beta" and swap["stopped"] == ["alpha"] and swap["ok"], swap
    finally:
        if front.poll() is None:
            front.send_signal(signal.SIGTERM)
        assert front.wait(120) == 0
    assert gone(port_b)
