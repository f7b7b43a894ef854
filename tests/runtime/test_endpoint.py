"""Readiness and /metrics against a real HTTP server on 127.0.0.1 (http.server in a thread)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparktui.runtime.records.endpoint import Endpoint, base_url


class FakeVllm:
    """Answers /health 503 for the first `unready` polls, then 200; serves a fixture's /metrics."""

    def __init__(self, metrics_text: str, unready: int = 0, metrics_status: int = 200):
        self.metrics_text = metrics_text
        self.unready = unready
        self.metrics_status = metrics_status
        self.health_polls = 0
        self.auth_headers: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake.auth_headers.append(self.headers.get("Authorization"))
                if self.path == "/health":
                    fake.health_polls += 1
                    status = 503 if fake.health_polls <= fake.unready else 200
                    body = b""
                elif self.path == "/metrics":
                    status, body = fake.metrics_status, fake.metrics_text.encode()
                else:
                    status, body = 404, b""
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def metrics_text(fixtures):
    return (fixtures / "vllm-cpu" / "metrics_after_requests.txt").read_text()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


def test_base_url_reaches_wildcard_binds_over_loopback():
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url("127.0.0.1", 8011) == "http://127.0.0.1:8011"
    assert base_url("::", 8000) == "http://[::1]:8000"


def test_wait_healthy_polls_until_200(metrics_text):
    with FakeVllm(metrics_text, unready=3) as fake, Endpoint(fake.url, api_key="k") as ep:
        assert ep.health().status == 503
        health = ep.wait_healthy(timeout_s=5, interval_s=0.01)
        assert health.ok and health.status == 200 and health.error is None
        assert fake.health_polls == 4
        assert set(fake.auth_headers) == {"Bearer k"}


def test_wait_healthy_times_out_as_a_value(metrics_text):
    with FakeVllm(metrics_text, unready=10**6) as fake, Endpoint(fake.url) as ep:
        health = ep.wait_healthy(timeout_s=0.3, interval_s=0.05)
        assert not health.ok and health.status == 503
        assert "not ready after 0.3 s" in health.error and "HTTP 503" in health.error
        assert 0.3 <= health.elapsed_s < 3


def test_wait_healthy_is_cancellable(metrics_text):
    with FakeVllm(metrics_text, unready=10**6) as fake, Endpoint(fake.url) as ep:
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        started = time.monotonic()
        health = ep.wait_healthy(timeout_s=30, interval_s=5, cancel=cancel)
        assert health.cancelled and not health.ok
        assert time.monotonic() - started < 3  # did not sleep out the 5 s interval


def test_wait_healthy_stops_when_the_server_died():
    with Endpoint(closed_port_url(), timeout=0.5) as ep:
        health = ep.wait_healthy(timeout_s=30, alive=lambda: False)
        assert not health.ok and health.error == "the server process exited"


def test_nothing_listening_is_an_error_value():
    with Endpoint(closed_port_url(), timeout=0.5) as ep:
        health = ep.health()
        assert not health.ok and health.status is None and "cannot connect" in health.error
        fetch = ep.metrics()
        assert fetch.snapshot is None and "cannot connect" in fetch.error


def test_metrics_snapshot(metrics_text):
    with FakeVllm(metrics_text) as fake, Endpoint(fake.url) as ep:
        fetch = ep.metrics()
        assert fetch.error is None
        assert fetch.snapshot.total("vllm:prompt_tokens_total") == 15.0
        assert fetch.snapshot.time <= time.monotonic()


def test_metrics_http_error_and_garbage_are_values(metrics_text):
    with FakeVllm(metrics_text, metrics_status=500) as fake, Endpoint(fake.url) as ep:
        assert ep.metrics().error == "/metrics answered HTTP 500"
    with FakeVllm("vllm:num_requests_running{engine=0 oops\n") as fake, Endpoint(fake.url) as ep:
        fetch = ep.metrics()
        assert fetch.snapshot is None and fetch.error.startswith("/metrics: not Prometheus text format")
