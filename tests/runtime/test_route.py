"""`sparktui route` with the stub vLLM: one port for several profiles, each started on request and
swapped out when the next one would not fit beside it (the pool's reservations)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client
from tests.support import REPO, free_port, wait_for

pytestmark = pytest.mark.slow  # spawns the route, supervisors and stub servers

HALF = "gpu-memory-utilization = 0.5"  # each fits alone; two do not fit together in the pool


class RouteProc:
    def __init__(self, path: Path, env: dict[str, str], port: int) -> None:
        self.port, self.url, self.env, self.path = port, f"http://127.0.0.1:{port}", env, path
        self.proc = subprocess.Popen([sys.executable, "-m", "sparktui", "route", "--file", str(path)], env=env,
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        wait_for(self._up, 30, "the route to listen")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the route exited {self.proc.returncode}: {self.proc.stderr.read()}")
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def post(self, path: str, model: str, timeout: float = 60, **body: object) -> httpx.Response:
        payload = {"model": model, "prompt": "hello there", "max_tokens": 4, **body}
        return httpx.post(self.url + path, json=payload, timeout=timeout)

    def record(self) -> dict:
        return json.loads((st.state_dir() / "route" / f"{self.port}.json").read_text())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


@pytest.fixture
def route(isolated, env, tmp_path):
    routes: list[RouteProc] = []

    def start(models: dict[str, Path], options: str = "", groups: str = "") -> RouteProc:
        port = free_port()
        lines = [f'[route]\nlisten = "127.0.0.1:{port}"\n{options}\n']
        for name, profile in models.items():
            lines.append(f'[route.models.{name}]\nprofile = "{profile}"\n')
        path = tmp_path / f"route-{port}.toml"
        path.write_text("".join(lines) + groups)
        routes.append(RouteProc(path, env, port))
        return routes[-1]

    yield start
    for r in routes:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


def server_state(profile: Path) -> st.StateRecord | None:
    port = int(profile.stem.split("-")[-1])
    return st.read_state(st.state_path(port))


def gone(state: st.StateRecord) -> bool:
    """Every recorded member of its tree, and its supervisor, has ended."""
    members = state.tree.members if state.tree else []
    sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
    return not sup.is_alive() and not any(proc.ProcessIdentity(p, t).is_alive() for p, t in members)


def test_a_request_starts_its_model_and_one_for_another_swaps_it_out_after_its_memory_came_back(route, make_profile):
    a = make_profile(serve_extra=HALF, STUB_VLLM_EMBED="1")
    b = make_profile(serve_extra=HALF)
    r = route({"alpha": a, "beta": b})
    models = httpx.get(r.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["alpha", "beta"] and models["object"] == "list"
    assert server_state(a) is None and server_state(b) is None  # nothing starts before it is asked for

    first = r.post("/v1/completions", "alpha")
    assert first.status_code == 200, first.text
    assert first.json()["model"] == "alpha"  # the server answers to the route's name
    state_a = server_state(a)
    assert state_a is not None and state_a.status == "running"
    emb = httpx.post(r.url + "/v1/embeddings", json={"model": "alpha", "input": ["a b", "c"]}, timeout=30)
    assert emb.status_code == 200 and len(emb.json()["data"]) == 2

    second = r.post("/v1/chat/completions", "beta", messages=[{"role": "user", "content": "hi"}])
    assert second.status_code == 200, second.text
    assert second.json()["model"] == "beta"
    stopped = server_state(a)
    assert stopped is not None and stopped.status == "exited" and stopped.exit is not None
    assert stopped.exit.reason == "stopped" and gone(stopped)
    # the record is rewritten at most every 0.5 s
    swap = wait_for(lambda: (h := r.record()["history"]) and h[-1]["model"] == "beta" and h[-1], 10, "beta's swap")
    assert swap["model"] == "beta" and swap["stopped"] == ["alpha"] and swap["ok"]
    assert "stop alpha" in swap["reason"]

    unknown = r.post("/v1/completions", "gamma")
    assert unknown.status_code == 404
    assert unknown.json() == {"error": {"message": "The model `gamma` does not exist. Valid aliases: alpha, beta.",
                                        "type": "NotFoundError", "param": "model", "code": 404}}  # fmt: skip
    assert r.stop() == 0


def test_streaming_passes_through_chunk_by_chunk(route, make_profile):
    a = make_profile(STUB_VLLM_TOKENS_PER_S="20")
    r = route({"alpha": a})
    arrivals: list[float] = []
    with httpx.stream("POST", r.url + "/v1/completions", timeout=60,
                      json={"model": "alpha", "prompt": "x", "max_tokens": 10, "stream": True}) as resp:  # fmt: skip
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = []
        for line in resp.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
                events.append(line[6:])
    assert events[-1] == "[DONE]" and len(events) == 11
    # at 20 tokens/s the ten tokens arrive over ~0.45 s: relayed as they come, not at the end
    assert arrivals[9] - arrivals[0] > 0.25
    r.stop()


def test_concurrent_requests_for_two_models_that_do_not_fit_together_both_end_200(route, make_profile):
    a, b = make_profile(serve_extra=HALF), make_profile(serve_extra=HALF)
    r = route({"alpha": a, "beta": b}, "queue-timeout-s = 120")
    results: dict[str, int] = {}

    def ask(name: str) -> None:
        results[name] = r.post("/v1/completions", name, timeout=150).status_code

    threads = [threading.Thread(target=ask, args=(n,)) for n in ("alpha", "beta", "alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(160)
    assert results == {"alpha": 200, "beta": 200}
    history = wait_for(lambda: (h := r.record()["history"]) and len(h) >= 2 and h, 10, "two swaps in the record")
    assert all(h["ok"] for h in history) and len(history) >= 2
    r.stop()


def test_a_full_queue_answers_503_with_retry_after(route, make_profile):
    slow = make_profile(STUB_VLLM_TIME_SCALE="0.3")  # a few seconds to start
    r = route({"alpha": slow}, "queue = 1")
    waiting = threading.Thread(target=r.post, args=("/v1/completions", "alpha"))
    waiting.start()
    wait_for(lambda: r.record()["queued"] == 1, 20, "the first request to wait")
    full = r.post("/v1/completions", "alpha")
    assert full.status_code == 503 and full.headers["retry-after"].isdigit()
    assert (
        full.json()["error"]["type"] == "ServiceUnavailableError" and "queue is full" in full.json()["error"]["message"]
    )
    waiting.join(60)
    r.stop()


def test_ttl_stops_an_idle_model(route, make_profile):
    a = make_profile()
    r = route({"alpha": a}, "ttl-s = 1")
    assert r.post("/v1/completions", "alpha").status_code == 200
    final = wait_for(lambda: (s := server_state(a)) is not None and s.status == "exited" and gone(s) and s, 30,
                     "the TTL stop")  # fmt: skip
    assert final.exit is not None and final.exit.reason == "stopped"
    wait_for(lambda: "ttl-s" in r.record()["history"][-1]["reason"], 10, "the TTL stop in the route's history")
    assert r.post("/v1/completions", "alpha").status_code == 200  # and it comes back on request
    r.stop()


def test_sigterm_stops_every_server_the_route_started_leaving_no_process(route, make_profile):
    small = "gpu-memory-utilization = 0.2"
    a, b = make_profile(serve_extra=small), make_profile(serve_extra=small)
    r = route({"alpha": a, "beta": b})
    assert r.post("/v1/completions", "alpha").status_code == 200
    assert r.post("/v1/completions", "beta").status_code == 200
    both = [server_state(a), server_state(b)]
    assert all(s is not None and s.status == "running" for s in both)  # they fit together: no swap

    def show(*flags: str) -> str:
        out = subprocess.run([sys.executable, "-m", "sparktui", "route", "--show", *flags], env=r.env, cwd=REPO,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout

    def both_up() -> str:
        text = show()
        return text if text.count(": up,") == 2 else ""

    shown = wait_for(both_up, 10, "`route --show` to list both up")
    assert f"route 127.0.0.1:{r.port}" in shown and f"alpha on port {both[0].port}: up" in shown
    assert [m["status"] for m in json.loads(show("--json"))[0]["models"]] == ["up", "up"]
    assert r.stop() == 0
    assert show().strip() == "no route is running"
    for profile in (a, b):
        final = server_state(profile)
        assert final is not None and final.status == "exited" and gone(final)
    assert r.record()["status"] == "stopped"


def test_the_next_server_starts_only_once_the_stopped_servers_memory_came_back(route, make_profile):
    """The leak gate between the stop and the start: A's engine leaves 4 GiB of /dev/shm behind
    (as NCCL's or a killed library's files stay); B does not start until it is removed."""
    leak = Path("/dev/shm") / f"sparktui-route-test-{os.getpid()}-{free_port()}"
    a = make_profile(serve_extra=HALF, STUB_VLLM_LEAK_SHM=f"{leak}:4096")
    b = make_profile(serve_extra=HALF)
    r = route({"alpha": a, "beta": b}, "queue-timeout-s = 120")
    try:
        assert r.post("/v1/completions", "alpha").status_code == 200
        assert leak.exists()
        answer: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: answer.append(r.post("/v1/completions", "beta", timeout=150)))
        asking.start()

        def tree_gone() -> bool:
            s = server_state(a)
            members = s.tree.members if s is not None and s.tree else []
            return bool(members) and not any(proc.ProcessIdentity(p, t).is_alive() for p, t in members)

        # the wait is the supervisor's own leak gate (in its stop) or the route's (its memory step)
        waiting = ("stop", "memory")
        wait_for(lambda: tree_gone() and (r.record()["swapping"] or {}).get("step") in waiting, 60, "A gone, B waiting")
        time.sleep(1)  # the gate re-measures every 0.25 s: B must still wait
        assert server_state(b) is None and r.record()["swapping"]["step"] in waiting
        removed_at = time.time()
    finally:
        leak.unlink(missing_ok=True)
    asking.join(150)
    assert answer and answer[0].status_code == 200, answer and answer[0].text
    started = server_state(b)
    assert started is not None and started.started_at is not None and started.started_at > removed_at
    wait_for(lambda: (h := r.record()["history"]) and h[-1]["stopped"] == ["alpha"], 10, "the swap in the record")
    r.stop()


def test_the_front_key_is_asked_of_clients_and_passed_to_the_servers_and_preload_starts_at_once(
    isolated, tmp_path, make_profile
):
    a = make_profile()
    port = free_port()
    path = tmp_path / "route.toml"
    path.write_text(f'[route]\nlisten = "127.0.0.1:{port}"\n[route.models.alpha]\nprofile = "{a}"\npreload = true\n')
    env = {**os.environ, "SPARKTUI_ROUTE_API_KEY": "s3cret-route-key"}
    r = RouteProc(path, env, port)
    try:
        up = wait_for(lambda: (s := server_state(a)) is not None and s.status == "running" and s, 30, "the preload")
        assert httpx.get(r.url + "/v1/models").status_code == 401
        assert r.post("/v1/completions", "alpha").status_code == 401
        auth = {"Authorization": "Bearer s3cret-route-key"}
        assert httpx.get(r.url + "/v1/models", headers=auth).status_code == 200
        ok = httpx.post(r.url + "/v1/completions", headers=auth, json={"model": "alpha", "prompt": "x"}, timeout=30)
        assert ok.status_code == 200, ok.text
        direct = httpx.post(f"http://127.0.0.1:{up.port}/v1/completions", json={"model": "alpha", "prompt": "x"})
        assert direct.status_code == 401  # the server got the key (by environment) and wants it too
        assert "s3cret-route-key" not in " ".join(up.argv or [])  # never on a command line
    finally:
        assert r.stop() == 0


def test_a_server_that_ended_outside_the_route_is_started_again_by_the_next_request(route, make_profile):
    a = make_profile()
    r = route({"alpha": a})
    assert r.post("/v1/completions", "alpha").status_code == 200
    port = int(a.stem.split("-")[-1])
    client.stop(port)  # as `sparktui stop --port` would, behind the route's back
    again = r.post("/v1/completions", "alpha")
    assert again.status_code == 200, again.text
    state = server_state(a)
    assert state is not None and state.status == "running"
    wait_for(lambda: any(h["reason"] == "it ended outside the route" for h in r.record()["history"]), 10,
             "the end in the route's history")  # fmt: skip
    r.stop()


def test_servers_left_by_a_route_that_was_killed_are_stopped_by_the_next_route_on_its_port(route, make_profile, env):
    a = make_profile()
    first = route({"alpha": a})
    assert first.post("/v1/completions", "alpha").status_code == 200
    wait_for(lambda: first.record()["models"][0]["launch_id"], 10, "the launch id in the record")
    first.proc.kill()  # SIGKILL: no chance to stop its servers
    first.proc.wait(10)
    left = server_state(a)
    assert left is not None and left.status == "running"  # a detached supervisor outlives it
    second = RouteProc(first.path, env, first.port)
    try:
        final = wait_for(lambda: (s := server_state(a)) is not None and s.status == "exited" and gone(s) and s, 30,
                         "the leftover server to be stopped")  # fmt: skip
        assert final.exit is not None and final.exit.reason == "stopped"
    finally:
        assert second.stop() == 0
    assert "left running by a route that ended unstopped" in second.proc.stderr.read()


def test_models_of_other_groups_stop_even_when_both_would_fit_and_one_group_runs_together(route, make_profile):
    small = "gpu-memory-utilization = 0.2"
    a, b, c = (make_profile(serve_extra=small) for _ in range(3))
    groups = '[route.groups]\none = ["alpha", "beta"]\ntwo = ["gamma"]\n'
    r = route({"alpha": a, "beta": b, "gamma": c}, groups=groups)
    assert r.post("/v1/completions", "alpha").status_code == 200
    assert r.post("/v1/completions", "beta").status_code == 200
    assert [server_state(p).status for p in (a, b)] == ["running", "running"]  # one group, room for both
    assert r.post("/v1/completions", "gamma").status_code == 200
    assert [server_state(p).status for p in (a, b, c)] == ["exited", "exited", "running"]
    swap = wait_for(lambda: (h := r.record()["history"]) and h[-1]["model"] == "gamma" and h[-1], 10, "gamma's swap")
    assert sorted(swap["stopped"]) == ["alpha", "beta"]
    r.stop()
