"""Talk to a running vLLM over HTTP: is it ready (/health 200), and what does /metrics say.

For the supervisor's and the TUI's polling loops, so nothing here raises for a server that is
down, slow or odd: every call returns a value that says what happened. Blocking: callers poll
from their own threads (the supervisor's loop, the TUI's thread workers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sparktui.core.metrics import MetricsError, MetricsSnapshot, parse_metrics


@dataclass(frozen=True)
class Health:
    ok: bool  # /health answered 200
    status: int | None  # HTTP status, None when no answer
    error: str | None  # why not ok, for people
    elapsed_s: float = 0.0  # time spent (waiting included, for wait_healthy)
    cancelled: bool = False


@dataclass(frozen=True)
class MetricsFetch:
    snapshot: MetricsSnapshot | None
    error: str | None


def base_url(host: str, port: int) -> str:
    """URL to reach a server bound to host:port from this machine (0.0.0.0 → loopback)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _describe(exc: Exception, url: str, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {url} within {timeout:g} s"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {url} (not listening yet?)"
    return f"{url}: {type(exc).__name__}: {exc}"


def _health_from(response: httpx.Response | None, error: str | None, started: float) -> Health:
    elapsed = time.monotonic() - started
    if response is None:
        return Health(False, None, error, elapsed)
    if response.status_code == 200:
        return Health(True, 200, None, elapsed)
    return Health(False, response.status_code, f"/health answered HTTP {response.status_code}", elapsed)


def _metrics_from(response: httpx.Response | None, error: str | None, when: float) -> MetricsFetch:
    if response is None:
        return MetricsFetch(None, error)
    if response.status_code != 200:
        return MetricsFetch(None, f"/metrics answered HTTP {response.status_code}")
    try:
        return MetricsFetch(parse_metrics(response.text, time=when), None)
    except MetricsError as exc:
        return MetricsFetch(None, f"/metrics: {exc}")


class Endpoint:
    """Blocking client; one connection pool reused across polls. Use as a context manager."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 2.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        # trust_env=False: never send loopback traffic through a proxy from the environment
        self._client = httpx.Client(timeout=timeout, headers=_headers(api_key), trust_env=False)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str) -> tuple[httpx.Response | None, str | None]:
        url = self.url + path
        try:
            return self._client.get(url), None
        except httpx.HTTPError as exc:
            return None, _describe(exc, url, self.timeout)

    def health(self) -> Health:
        started = time.monotonic()
        response, error = self._get("/health")
        return _health_from(response, error, started)

    def wait_healthy(
        self,
        timeout_s: float,
        *,
        interval_s: float = 0.25,
        cancel: threading.Event | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Health:
        """Poll /health until 200, `timeout_s` passes, `cancel` is set or `alive()` says the server died."""
        started = time.monotonic()
        cancel = cancel or threading.Event()
        last = Health(False, None, "not polled yet")
        while True:
            if cancel.is_set():
                return Health(False, last.status, "cancelled", time.monotonic() - started, cancelled=True)
            if alive is not None and not alive():
                return Health(False, last.status, "the server process exited", time.monotonic() - started)
            last = self.health()
            waited = time.monotonic() - started
            if last.ok:
                return Health(True, 200, None, waited)
            if waited >= timeout_s:
                return Health(False, last.status, f"not ready after {timeout_s:g} s: {last.error}", waited)
            cancel.wait(min(interval_s, max(0.0, timeout_s - waited)))

    def metrics(self) -> MetricsFetch:
        response, error = self._get("/metrics")
        return _metrics_from(response, error, time.monotonic())
