"""Benchmark a running vLLM through its OpenAI-compatible API: how fast, and for how many users.

Method. For each concurrency level, `users` clients each send `requests_per_user` streaming
requests back to back (a closed loop: one request in flight per user). Every figure comes from the
client's side, never from the server's counters: each stream is read by its own thread on its own
connection (runtime.wire), and each SSE chunk is stamped with the time the kernel received its
packet (time.perf_counter's timebase), so this process running late (its event loop, the GIL, a
core busy with the server) delays the reading, not the figures:
  TTFT          first chunk carrying a token − request sent
  ITL           gap between chunks carrying tokens, split evenly over the tokens a chunk carries
  decode tok/s  per user: tokens after each request's first chunk / the time from its first
                chunk to its last, both summed over the level's requests (a request whose
                chunks came in one burst weighs as little as the time it took)
  aggregate     every token received at that level / wall time (first send → last chunk)
Tokens per chunk: vLLM is asked for `stream_options.continuous_usage_stats`, so every chunk says
how many completion tokens it has produced so far (one chunk can carry several when vLLM batches
its stream); a server that ignores it is counted at one token per chunk with text. Requests use
`ignore_eos` and `max_tokens = output_tokens`, so each generates exactly that many tokens; prompts
are random words (no two share a prefix the prefix cache could reuse), sized to `prompt_tokens`
from the server's own count of a first, unmeasured warm-up request.

While a level runs, a watcher samples MemAvailable (runtime.memory, every 0.1 s), KV-cache usage
from /metrics (core.metrics, every 0.5 s; a fraction 0..1, as vLLM reports it), GPU power from
NVML where it reports power (every 0.5 s; joules = power integrated over the wall time), and, for
a server sparktui started, its state record: a server that exits, or whose guard trips or is
disarmed, ends the run. A run that ends early keeps what it measured, marked partial.

History: every run is appended to <state dir>/bench/history.jsonl, one `HistoryRecord` per line
(see that class: the format is versioned by `schema_version` and meant to be read by other tools,
e.g. a speed predictor calibrating against measured runs).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field, ValidationError

from sparktui.core.metrics import KV_USAGE, MetricsError, kv_cache_usage_pct, parse_metrics
from sparktui.core.units import GiB
from sparktui.errors import UserError
from sparktui.runtime import wire
from sparktui.runtime.host.memory import read_gpu, read_mem_available
from sparktui.runtime.records import state as st
from sparktui.runtime.records.endpoint import base_url

SCHEMA_VERSION = 1
MEM_EVERY_S = 0.1
KV_EVERY_S = 0.5
POWER_EVERY_S = 0.5
STATE_EVERY_S = 0.5
WARM_UP_WORDS = 32
# Not recorded in flags: a key is secret; where the server listens does not change its speed, and
# would keep two runs of one configuration on different ports from comparing as the same.
UNRECORDED_FLAGS = ("--api-key", "--host", "--port")

# Random words for prompts: common, short, so most tokenizers give about one token each.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend "
    "father power hour game line end member law car city community name president team "
    "minute idea kid body information back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher "
    "force education river stone green blue"
)
_WORDS = tuple(_WORD_TEXT.split())


# ---------------------------------------------------------------- typed results


class BenchSettings(BaseModel):
    """What to run. `users` are the concurrency levels, in order."""

    users: list[int] = Field(default_factory=lambda: [1, 5])
    prompt_tokens: int = 256
    output_tokens: int = 128
    requests_per_user: int = 2
    api: Literal["completions", "chat"] = "completions"
    model: str | None = None  # None: the model the server serves
    request_timeout_s: float = 600.0
    # Depth mode (llama-benchy's pp/tg at a context depth): one user, one level per depth, each
    # prompt `depth` + prompt_tokens tokens of fresh random words (nothing for the prefix cache)
    depths: list[int] | None = None


class SweepTargets(BaseModel):
    """A level meets the targets when it has no errors, its per-user decode speed is at least
    `tok_s` and its TTFT p95 is at most `ttft_s`."""

    tok_s: float
    ttft_s: float
    max_users: int = 64
    ladder: list[int] | None = None  # levels to climb; None: 1, 2, 4, … max_users


class BenchServer(BaseModel):
    url: str
    port: int
    managed: bool  # started by sparktui (it has a state record)
    profile: str | None = None
    model: str  # the name requests use (the served model name)
    model_path: str | None = None  # what the profile serves, when sparktui started it
    vllm_version: str | None = None
    flags: list[str] = Field(default_factory=list)  # `vllm serve` arguments after the model
    max_model_len: int | None = None
    guard_armed: bool | None = None  # None: not a server sparktui guards
    api_key_sent: bool = False  # whether a key was sent (the key itself is never recorded)


class VllmBenchFields(BaseModel):
    """One level's figures under the names and definitions of `vllm bench serve`'s result JSON
    (vllm/benchmarks/serve.py, calculate_metrics and benchmark's result dict, 0.32.0), from the
    same timestamps: duration is the level's wall time; TPOT per request is (last chunk − first
    chunk) / (tokens − 1); ITL is the gap between chunks (not split over the tokens a chunk
    carries); E2EL is send → last chunk; std is the population std; p99 interpolates linearly."""

    duration: float
    completed: int
    failed: int
    max_concurrency: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p99_itl_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    std_e2el_ms: float | None
    p99_e2el_ms: float | None


class LevelResult(BaseModel):
    """One concurrency level. Every figure that could not be had is None, never 0."""

    users: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    decode_tok_s_per_user: float | None
    aggregate_tok_s: float | None
    requests: int  # requests that finished (errors included)
    errors: int
    wall_s: float
    output_tokens: int  # tokens received, all requests
    prompt_tokens_mean: float | None  # as the server counted them
    min_mem_available_gib: float | None
    peak_kv_usage: float | None  # fraction 0..1 of the KV cache, from /metrics
    mean_power_w: float | None
    joules_per_token: float | None
    client_cpu_s_per_request: float | None  # this process's CPU time per request
    client_lag_max_s: float | None = None  # the most this client's event loop ran late (starved)
    depth: int | None = None  # depth mode: the context depth this level ran at
    pp_tok_s: float | None = None  # depth mode: prompt tokens / TTFT p50 (the whole prompt, uncached)
    tg_tok_s: float | None = None  # depth mode: generation tok/s (the per-user decode speed)
    partial: bool = False
    error_messages: list[str] = Field(default_factory=list)  # the first few distinct ones
    vllm_bench: VllmBenchFields | None = None  # the same level in `vllm bench serve`'s terms


class SweepResult(BaseModel):
    target_tok_s: float
    target_ttft_s: float
    best_users: int | None  # the most users that met both targets (None: not even the first)
    broke_at: int | None  # the fewest users that broke one (None: none broke up to max_users)
    broken_by: list[str]  # "tok_s", "ttft", "errors" at broke_at
    tried: list[int]
    max_users: int


class RunFigures(BaseModel):
    """What a run measured, as reported and as kept in the history."""

    server: BenchServer
    settings: BenchSettings
    runs: list[LevelResult]
    sweep: SweepResult | None = None
    partial: bool = False
    error: str | None = None


class BenchReport(RunFigures):
    started_at: float
    finished_at: float

    def public(self) -> dict[str, Any]:
        """The `--json` object: server, runs, sweep first; settings and status after."""
        data = self.model_dump(mode="json")
        for run in data["runs"]:  # vllm bench serve's names beside sparktui's own
            run.update(run.pop("vllm_bench", None) or {})
        return {key: data[key] for key in ("server", "runs", "sweep", "settings", "partial", "error")}


class HistoryKey(BaseModel):
    """What makes two runs comparable: the same profile, model, vLLM version and flags."""

    profile: str | None
    model: str
    vllm_version: str | None
    flags: list[str]


class HistoryRecord(RunFigures):
    """One line of <state dir>/bench/history.jsonl.

    schema_version 1 fields:
      recorded_at   unix time the run finished
      key           HistoryKey: profile, model (served name), vllm_version, flags
      server        BenchServer (url, port, model_path, max_model_len, guard_armed …)
      settings      BenchSettings (users, prompt_tokens, output_tokens, requests_per_user, api)
      runs          LevelResult per concurrency level (seconds, tokens/s, GiB, fraction, watts, joules)
      sweep         SweepResult or null
      partial, error  whether the run ended early, and why
    Readers should skip lines they cannot parse and records with a newer schema_version.
    """

    schema_version: int = SCHEMA_VERSION
    recorded_at: float
    key: HistoryKey


@dataclass(frozen=True)
class BenchProgress:
    """Sent to the progress callback after each request and level."""

    users: int
    done: int  # requests finished at this level
    total: int
    level: int  # 1-based index among the levels run so far
    message: str = ""
    result: LevelResult | None = None  # set when a level has just finished


ProgressFn = Callable[[BenchProgress], None]


class ServerGone(Exception):
    """The server stopped answering, exited, or its guard ended the run."""


class _Cancelled(Exception):
    pass


# ---------------------------------------------------------------- the target


@dataclass(frozen=True)
class Target:
    """The server to benchmark, resolved from sparktui's state (or a bare port)."""

    url: str
    port: int
    api_key: str | None = field(repr=False)
    state_path: Path | None  # the supervisor's state file, when sparktui started it
    state: dict[str, Any] | None


def resolve_target(port: int | None = None) -> Target:
    """The server sparktui started (the only live one, or the one on `port`); a port with no
    record is taken as a server on 127.0.0.1 that sparktui did not start."""
    state: dict[str, Any] | None
    if port is None:
        try:
            state = st.find_state(None).to_dict()
        except UserError as exc:
            raise UserError(
                f"{exc}; start one with `sparktui serve PROFILE --detach`, or name one with --port"
            ) from None
    else:
        state = next((s.to_dict() for s in st.list_states() if s.port == port), None)
    if state is None:
        assert port is not None
        key = os.environ.get("VLLM_API_KEY") or None
        return Target(base_url("127.0.0.1", port), port, key, None, None)
    if not state.get("alive"):
        raise UserError(
            f"the server on port {state.get('port')} is not running (status {state.get('status')}); "
            "start it again, or see `sparktui status --all`"
        )
    url = base_url(str(state.get("host") or "127.0.0.1"), int(state["port"]))
    return Target(url, int(state["port"]), _api_key_of(state), st.state_path(int(state["port"])), state)


def _api_key_of(state: dict[str, Any]) -> str | None:
    """The key the server was started with: its profile's, else VLLM_API_KEY from the environment."""
    from sparktui.core.profiles import load_profile

    path = state.get("profile_path")
    if path:
        try:
            profile = load_profile(path)
        except UserError:
            profile = None
        if profile is not None:
            key = profile.serve.api_key or profile.env.get("VLLM_API_KEY")
            if key:
                return str(key)
    return os.environ.get("VLLM_API_KEY") or None


def _flags(argv: Sequence[str] | None) -> list[str]:
    """`vllm serve` arguments after the model, less UNRECORDED_FLAGS (and an executable path)."""
    if not argv:
        return []
    args = list(argv)
    if "serve" in args:
        args = args[args.index("serve") + 2 :]
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in UNRECORDED_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


# ---------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class RequestRecord:
    """One request as the client saw it (perf_counter seconds)."""

    sent: float
    first: float | None = None
    last: float | None = None
    tokens: int = 0
    first_chunk_tokens: int = 0
    prompt_tokens: int | None = None
    gaps: list[float] = field(default_factory=list)  # inter-token latencies
    chunk_gaps: list[float] = field(default_factory=list)  # between chunks, as `vllm bench serve` counts ITL
    end: float | None = None
    error: str | None = None
    counted_by_server: bool = False  # chunks carry cumulative completion tokens
    status: int | None = None  # the HTTP status of the reply

    def arrive(self, now: float, tokens: int) -> None:
        if tokens <= 0:
            return
        if self.first is None:
            self.first, self.first_chunk_tokens = now, tokens
        elif self.last is not None:
            self.gaps.extend([(now - self.last) / tokens] * tokens)
            self.chunk_gaps.append(now - self.last)
        self.last = now
        self.tokens += tokens

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def decode_tok_s(self) -> float | None:
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        return (self.tokens - self.first_chunk_tokens) / (self.last - self.first)


@dataclass
class _Watch:
    """What the watcher saw during one level."""

    min_available: int | None = None
    peak_kv: float | None = None
    power: list[tuple[float, float]] = field(default_factory=list)  # (perf_counter, watts)
    lag_s: float = 0.0  # the most the client's event loop woke late


def _energy_j(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Power integrated over [start, end] (trapezoids; the edges hold the nearest sample)."""
    points = [(t, w) for t, w in samples if start <= t <= end]
    if not points or end <= start:
        return None
    points = [(start, points[0][1]), *points, (end, points[-1][1])]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))


def summarize(
    users: int,
    records: Sequence[RequestRecord],
    started: float,
    watch: _Watch,
    cpu_s: float | None,
    *,
    partial: bool = False,
) -> LevelResult:
    """The figures of one level from its requests' timestamps."""
    done = [r for r in records if r.end is not None]
    ok = [r for r in done if r.error is None]
    ends = [r.last or r.end for r in done if (r.last or r.end) is not None]
    end = max((e for e in ends if e is not None), default=started)
    wall = max(0.0, end - started)
    tokens = sum(r.tokens for r in done)
    ttfts = [t for r in ok if (t := r.ttft) is not None]
    gaps = [g for r in ok for g in r.gaps]
    decoding = [r for r in ok if r.decode_tok_s is not None]
    decode_s = sum((r.last or 0.0) - (r.first or 0.0) for r in decoding)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    energy = _energy_j(watch.power, started, end)
    errors = [r.error for r in done if r.error is not None]
    return LevelResult(
        users=users,
        ttft_p50_s=percentile(ttfts, 0.50),
        ttft_p95_s=percentile(ttfts, 0.95),
        itl_p50_s=percentile(gaps, 0.50),
        itl_p95_s=percentile(gaps, 0.95),
        decode_tok_s_per_user=sum(r.tokens - r.first_chunk_tokens for r in decoding) / decode_s if decoding else None,
        aggregate_tok_s=tokens / wall if tokens and wall > 0 else None,
        requests=len(done),
        errors=len(errors),
        wall_s=wall,
        output_tokens=tokens,
        prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
        min_mem_available_gib=None if watch.min_available is None else watch.min_available / GiB,
        peak_kv_usage=watch.peak_kv,
        mean_power_w=energy / wall if energy is not None and wall > 0 else None,
        joules_per_token=energy / tokens if energy is not None and tokens else None,
        client_cpu_s_per_request=cpu_s / len(done) if cpu_s is not None and done else None,
        client_lag_max_s=watch.lag_s,
        partial=partial,
        error_messages=list(dict.fromkeys(errors))[:5],
        vllm_bench=vllm_fields(users, records, wall),
    )


def _ms_stats(values: Sequence[float], name: str) -> dict[str, float | None]:
    if not values:
        return {f"{kind}_{name}_ms": None for kind in ("mean", "median", "std", "p99")}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    median, p99 = percentile(values, 0.5), percentile(values, 0.99)
    assert median is not None and p99 is not None
    return {
        f"mean_{name}_ms": mean * 1000,
        f"median_{name}_ms": median * 1000,
        f"std_{name}_ms": std * 1000,
        f"p99_{name}_ms": p99 * 1000,
    }


def vllm_fields(users: int, records: Sequence[RequestRecord], wall: float) -> VllmBenchFields:
    """The level as `vllm bench serve` would report it (see VllmBenchFields)."""
    done = [r for r in records if r.end is not None]
    ok = [r for r in done if r.error is None and r.first is not None]
    outputs = sum(r.tokens for r in ok)
    inputs = sum(r.prompt_tokens or 0 for r in ok)
    duration = wall if wall > 0 else math.inf
    tpots = [
        (r.last - r.first) / (r.tokens - 1) for r in ok if r.last is not None and r.first is not None and r.tokens > 1
    ]
    return VllmBenchFields.model_validate(
        {
            "duration": wall,
            "completed": len(ok),
            "failed": len(done) - len(ok),
            "max_concurrency": users,
            "total_input_tokens": inputs,
            "total_output_tokens": outputs,
            "request_throughput": len(ok) / duration,
            "output_throughput": outputs / duration,
            "total_token_throughput": (inputs + outputs) / duration,
            **_ms_stats([t for r in ok if (t := r.ttft) is not None], "ttft"),
            **_ms_stats(tpots, "tpot"),
            **_ms_stats([g for r in ok for g in r.chunk_gaps], "itl"),
            **_ms_stats([(r.last or r.end or r.sent) - r.sent for r in ok], "e2el"),
        }
    )


def meets(level: LevelResult, targets: SweepTargets) -> list[str]:
    """The targets a level broke ([] when it met both)."""
    broken = []
    if level.errors or level.partial:
        broken.append("errors")
    if level.decode_tok_s_per_user is None or level.decode_tok_s_per_user < targets.tok_s:
        broken.append("tok_s")
    if level.ttft_p95_s is None or level.ttft_p95_s > targets.ttft_s:
        broken.append("ttft")
    return broken


# ---------------------------------------------------------------- the client


class _Bench:
    def __init__(
        self,
        target: Target,
        settings: BenchSettings,
        client: httpx.AsyncClient,
        progress: ProgressFn | None,
        cancel: threading.Event | None,
        sweep_max: int | None = None,
    ) -> None:
        self.target, self.settings, self.client = target, settings, client
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.model = ""
        self.words = settings.prompt_tokens  # words per prompt, calibrated by the warm-up
        self.word_ratio = 1.0  # words per token of the server's tokenizer, from the warm-up
        self.rng = random.Random(0x5A7C)
        self.levels_run = 0
        self.power_ok = True
        self.generating = asyncio.Event()  # set at a level's first token
        self.wake = asyncio.Event()  # wakes the watcher: the first token, or the level's end
        self.loop = asyncio.get_running_loop()
        self.auth = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        where = urlsplit(target.url)
        if where.scheme != "http" or where.hostname is None or where.port is None:
            raise UserError(f"{target.url}: the benchmark speaks plain http to host:port only")
        self.host, self.port = where.hostname, where.port
        most = max([*settings.users, sweep_max]) if sweep_max else max(settings.users)
        self.readers = ThreadPoolExecutor(max_workers=most + 1, thread_name_prefix="bench-reader")
        self.idle: list[wire.Connection] = []
        self.idle_lock = threading.Lock()
        self.halt = threading.Event()  # the reader threads stop waiting (cancelled, or the level failed)

    def close(self) -> None:
        self.halt.set()
        self.readers.shutdown(wait=True, cancel_futures=True)
        with self.idle_lock:
            for conn in self.idle:
                conn.close()
            self.idle.clear()

    # -- preflight

    async def server_info(self) -> BenchServer:
        url = self.target.url
        try:
            reply = await self.client.get("/v1/models", timeout=10)
        except httpx.ConnectError:
            raise UserError(
                f"cannot connect to {url}: nothing is listening there (is the server running? see `sparktui status`)"
            ) from None
        except httpx.HTTPError as exc:
            raise UserError(f"{url}/v1/models did not answer: {type(exc).__name__}: {exc}") from None
        if reply.status_code == 401:
            raise UserError(
                f"{url} wants an API key and refused ours: set VLLM_API_KEY to the key the server was started with"
            )
        if reply.status_code != 200:
            raise UserError(f"{url}/v1/models answered HTTP {reply.status_code}: is this an OpenAI-compatible server?")
        try:
            cards = [c for c in reply.json().get("data", []) if isinstance(c, dict) and c.get("id")]
        except (ValueError, AttributeError):
            cards = []
        served = [str(c["id"]) for c in cards]
        if not served:
            raise UserError(f"{url}/v1/models lists no model: is the server still starting?")
        state = self.target.state or {}
        wanted = self.settings.model
        if wanted is not None and wanted not in served:
            raise UserError(f"--model {wanted}: the server does not serve it; it serves {', '.join(served)}")
        if wanted is None:
            wanted = state.get("model") if state.get("model") in served else served[0]
        assert wanted is not None
        self.model = wanted
        card = next(c for c in cards if c["id"] == wanted)
        max_len = card.get("max_model_len")
        max_len = int(max_len) if isinstance(max_len, int) else (state.get("summary") or {}).get("max_model_len")
        depth = max(self.settings.depths or [0])
        needed = depth + self.settings.prompt_tokens + self.settings.output_tokens
        if isinstance(max_len, int) and depth and needed > max_len:
            raise UserError(
                f"--depth {depth} + --prompt-tokens {self.settings.prompt_tokens} + --output-tokens "
                f"{self.settings.output_tokens} = {needed} tokens, more than the server's max model length "
                f"{max_len}: lower the depth"
            )
        if isinstance(max_len, int) and needed > max_len:
            raise UserError(
                f"--prompt-tokens {self.settings.prompt_tokens} + --output-tokens {self.settings.output_tokens} = "
                f"{needed} tokens, more than the server's max model length {max_len}: lower one of them"
            )
        version = (state.get("summary") or {}).get("version")
        if not version:
            try:
                answer = await self.client.get("/version", timeout=5)
                version = answer.json().get("version") if answer.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                version = None
        guard = state.get("guard") or {}
        return BenchServer(
            url=url,
            port=self.target.port,
            managed=self.target.state is not None,
            profile=state.get("profile"),
            model=wanted,
            model_path=state.get("model"),
            vllm_version=str(version) if version else None,
            flags=_flags(state.get("argv")),
            max_model_len=max_len if isinstance(max_len, int) else None,
            guard_armed=bool(guard.get("armed")) if self.target.state is not None else None,
            api_key_sent=bool(self.target.api_key),
        )

    async def warm_up(self) -> None:
        """One unmeasured request: surfaces a refusal early, warms the server, sizes the prompts.

        It sends a few words only: a tokenizer may cut each word into several tokens, and a
        prompt of `prompt_tokens` words could then exceed the model's length."""
        self.words = min(self.settings.prompt_tokens, WARM_UP_WORDS)
        record = await self.request(max_tokens=min(4, self.settings.output_tokens))
        if record.error is not None:
            raise UserError(f"the warm-up request failed: {record.error}")
        if record.prompt_tokens:
            self.word_ratio = self.words / record.prompt_tokens
            self.words = max(1, round(self.settings.prompt_tokens * self.word_ratio))

    # -- one request

    def prompt(self) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(self.words))

    def body(self, max_tokens: int) -> tuple[str, dict[str, Any]]:
        common: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "ignore_eos": True,  # vLLM: generate exactly max_tokens
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if self.settings.api == "chat":
            return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": self.prompt()}]}
        return "/v1/completions", {**common, "prompt": self.prompt()}

    async def request(self, max_tokens: int | None = None) -> RequestRecord:
        path, body = self.body(max_tokens or self.settings.output_tokens)
        record = RequestRecord(sent=time.perf_counter())
        # A reader thread per stream, stamping with the kernel's receive times (runtime.wire): this
        # loop may run late on a loaded box, the figures must not.
        loop = asyncio.get_running_loop()
        lost = await loop.run_in_executor(self.readers, self._stream, path, json.dumps(body).encode(), record)
        if record.error is not None and record.status in (401, 404):
            raise UserError(f"{self.target.url}{path}: {record.error}")
        if lost and not await self.alive():
            raise ServerGone(f"the server at {self.target.url} stopped answering mid-run ({record.error})")
        return record

    def _connection(self) -> wire.Connection:
        with self.idle_lock:
            if self.idle:
                return self.idle.pop()
        return wire.Connection(self.host, self.port)

    def _release(self, conn: wire.Connection) -> None:
        if conn.reusable:
            with self.idle_lock:
                self.idle.append(conn)
        else:
            conn.close()

    def _stream(self, path: str, body: bytes, record: RequestRecord) -> bool:
        """One request, in a reader thread; True when the connection failed (is the server gone?)."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self.auth}
        conn: wire.Connection | None = None
        try:
            conn = self._connection()
            response, pieces = conn.request(
                "POST",
                path,
                body,
                headers,
                timeout_s=self.settings.request_timeout_s,
                stop=self.halt,
                on_sent=lambda at: setattr(record, "sent", at),
            )
            record.status = response.status
            if response.status != 200:
                text = b"".join(data for _, data in pieces).decode(errors="replace")
                record.error = _http_error(response.status, text)
            else:
                for stamp, data in wire.sse_events(pieces):
                    if self._event(data, stamp, record):
                        break
                for _ in pieces:  # the rest of the body (its last chunk): the connection stays usable
                    pass
        except wire.Stopped:
            record.error = "cancelled"
        except (wire.WireError, OSError) as exc:
            record.error = str(exc) or type(exc).__name__
            if conn is not None:
                conn.close()
            return True
        finally:
            record.end = time.perf_counter()
            if conn is not None:
                self._release(conn)
        return False

    def _event(self, data: bytes, now: float, record: RequestRecord) -> bool:
        """One SSE `data:` payload; True when the stream is over (done or failed)."""
        if data == b"[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            record.error = f"not JSON in the stream: {data[:80]!r}"
            return True
        if "error" in chunk:
            error = chunk["error"]
            record.error = str(error.get("message") if isinstance(error, dict) else error)
            return True
        usage = chunk.get("usage") or {}
        choices = chunk.get("choices") or []
        if usage.get("prompt_tokens") is not None:
            record.prompt_tokens = int(usage["prompt_tokens"])
        if not choices:  # the final usage chunk: trust its total over a count of chunks
            total = usage.get("completion_tokens")
            if isinstance(total, int) and total > record.tokens and not record.counted_by_server:
                record.tokens = total
            return False
        if usage.get("completion_tokens") is not None:
            record.counted_by_server = True  # cumulative completion tokens on every chunk
            record.arrive(now, int(usage["completion_tokens"]) - record.tokens)
        elif _chunk_text(choices[0]):
            record.arrive(now, 1)
        if record.first is not None and not self.generating.is_set():
            self.loop.call_soon_threadsafe(self._first_token)
        return False

    def _first_token(self) -> None:
        self.generating.set()
        self.wake.set()

    async def alive(self) -> bool:
        try:
            reply = await self.client.get("/health", timeout=3)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    # -- one level

    async def level(self, users: int) -> LevelResult:
        self.levels_run += 1
        records: list[RequestRecord] = []
        total = users * self.settings.requests_per_user
        watch = _Watch()
        self.generating, self.wake, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        await self.connect(users)
        cpu0, started = time.process_time(), time.perf_counter()

        async def user() -> None:
            for _ in range(self.settings.requests_per_user):
                if self.cancel.is_set():
                    raise _Cancelled()
                record = await self.request()
                records.append(record)
                self._say(BenchProgress(users, len(records), total, self.levels_run))

        failure: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                watcher = group.create_task(self.watch(watch, done))
                users_done = [group.create_task(user()) for _ in range(users)]
                await asyncio.gather(*users_done)
                done.set()  # the watcher finishes the reading it is taking (a short level has only that one)
                self.wake.set()
                await watcher
        except* (ServerGone, _Cancelled, UserError) as caught:
            failure = caught.exceptions[0]
            self.halt.set()  # readers still waiting give up; their requests count as unfinished
        result = summarize(
            users,
            records,
            started,
            watch,
            time.process_time() - cpu0,
            partial=failure is not None or len(records) < total,
        )
        if failure is not None:
            raise _LevelAborted(result, failure)
        self._say(BenchProgress(users, len(records), total, self.levels_run, result=result))
        return result

    async def depth_level(self, depth: int) -> LevelResult:
        """One user at `depth` tokens of context: prompt processing over the whole prompt (depth +
        prompt_tokens, fresh words each request, so nothing comes from the prefix cache) and
        generation after it, as llama-benchy's pp and tg."""
        self.words = max(1, round((depth + self.settings.prompt_tokens) * self.word_ratio))
        level = await self.level(1)
        pp = None
        if level.prompt_tokens_mean and level.ttft_p50_s:
            pp = level.prompt_tokens_mean / level.ttft_p50_s
        return level.model_copy(update={"depth": depth, "pp_tok_s": pp, "tg_tok_s": level.decode_tok_s_per_user})

    async def connect(self, users: int) -> None:
        """Open one keep-alive connection per user first, as a client already talking to the server
        has: TTFT then measures the server, not this client's TCP handshakes."""
        with self.idle_lock:
            missing = users - len(self.idle)

        def open_one() -> None:
            try:
                conn = wire.Connection(self.host, self.port)
            except OSError:
                return  # the requests themselves will say what is wrong
            self._release(conn)

        await asyncio.gather(*(self.loop.run_in_executor(self.readers, open_one) for _ in range(max(0, missing))))

    def _say(self, progress: BenchProgress) -> None:
        if self.progress is not None:
            self.progress(progress)

    async def watch(self, into: _Watch, done: asyncio.Event) -> None:
        """Sample memory, KV usage, power and the server's state until `done`."""
        # the first KV reading once a token has come back: before that the cache may still be idle
        next_kv = next_power = next_state = 0.0
        while True:
            if self.cancel.is_set():
                self.halt.set()
                raise _Cancelled()
            now = time.perf_counter()
            try:
                available = read_mem_available()
                into.min_available = available if into.min_available is None else min(into.min_available, available)
            except OSError:
                pass
            if self.generating.is_set() and now >= next_kv:
                next_kv = now + KV_EVERY_S
                usage = await self.kv_usage()
                if usage is not None:
                    into.peak_kv = usage if into.peak_kv is None else max(into.peak_kv, usage)
            if self.power_ok and now >= next_power:
                next_power = now + POWER_EVERY_S
                watts = await asyncio.to_thread(_gpu_power_w)
                if watts is None:
                    self.power_ok = False  # no NVML or no power reading: joules stay None
                else:
                    into.power.append((time.perf_counter(), watts))
            if self.target.state_path is not None and now >= next_state:
                next_state = now + STATE_EVERY_S
                self.check_state()
            if done.is_set():
                return
            asleep = time.perf_counter()
            try:
                await asyncio.wait_for(self.wake.wait(), MEM_EVERY_S)
            except TimeoutError:
                # woken late: this process was starved, and token timestamps may be late as much
                into.lag_s = max(into.lag_s, time.perf_counter() - asleep - MEM_EVERY_S)
            self.wake.clear()

    async def kv_usage(self) -> float | None:
        try:
            reply = await self.client.get("/metrics", timeout=5)
            if reply.status_code != 200:
                return None
            pct = kv_cache_usage_pct(parse_metrics(_kv_lines(reply.text), time.monotonic()))
        except (httpx.HTTPError, MetricsError):
            return None
        return None if pct is None else pct / 100.0

    def check_state(self) -> None:
        """The supervisor's record: a server that exits or loses its guard ends the run."""
        assert self.target.state_path is not None
        try:
            record = st.read_state(self.target.state_path)
        except UserError:
            return  # a wrong-shaped file: the supervisor rewrites it on its next save
        if record is None:
            return
        state = record.to_dict()
        if state.get("status") in ("exited", "stopping"):
            exit_ = state.get("exit") or {}
            why = "its memory guard stopped it" if exit_.get("reason") == "guard" or state.get("trip") else "it exited"
            raise ServerGone(f"the server on port {self.target.port} stopped mid-run: {why}")
        guard = state.get("guard") or {}
        if guard.get("armed") is False:
            raise ServerGone(f"the memory guard of the server on port {self.target.port} was disarmed mid-run")


class _LevelAborted(Exception):
    def __init__(self, result: LevelResult, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.result, self.cause = result, cause


def _kv_lines(text: str) -> str:
    """Only the KV-usage gauge's lines: parsing all of vLLM's /metrics takes ~20 ms of this
    process's event loop, time in which token timestamps would be late."""
    return "\n".join(line for line in text.splitlines() if any(name in line[:64] for name in KV_USAGE)) + "\n"


def _chunk_text(choice: dict[str, Any]) -> str:
    if choice.get("text"):
        return str(choice["text"])
    delta = choice.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or "")


def _http_error(status: int, text: str) -> str:
    message = text.strip()
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            error = body.get("error", body.get("detail", body.get("message")))
            message = str(error.get("message") if isinstance(error, dict) else error or message)
    except ValueError:
        pass
    if status == 404:
        return f"HTTP 404: {message[:300]} (an unknown model? see --model)"
    if status == 401:
        return "HTTP 401: the server refused the API key; set VLLM_API_KEY to the key it was started with"
    return f"HTTP {status}: {message[:300]}"


def _gpu_power_w() -> float | None:
    report = read_gpu(processes=False)
    if not report.available:
        return None
    watts = [g.power_w for g in report.gpus if g.power_w is not None]
    return sum(watts) if watts else None


# ---------------------------------------------------------------- running it


def _sweep_ladder(targets: SweepTargets) -> list[int]:
    if targets.ladder:
        return sorted(set(targets.ladder))
    ladder, n = [], 1
    while n < targets.max_users:
        ladder.append(n)
        n *= 2
    return [*ladder, targets.max_users]


async def _run(
    target: Target,
    settings: BenchSettings,
    sweep: SweepTargets | None,
    progress: ProgressFn | None,
    cancel: threading.Event | None,
    on_server: Callable[[BenchServer], None] | None,
) -> BenchReport:
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    timeout = httpx.Timeout(settings.request_timeout_s, connect=5.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    started = time.time()
    # trust_env=False: loopback traffic never goes through a proxy from the environment
    async with httpx.AsyncClient(
        base_url=target.url, headers=headers, timeout=timeout, limits=limits, trust_env=False
    ) as client:
        bench = _Bench(target, settings, client, progress, cancel, sweep.max_users if sweep else None)
        try:
            return await _measure(bench, target, settings, sweep, on_server, started)
        finally:
            await asyncio.to_thread(bench.close)


async def _measure(
    bench: _Bench,
    target: Target,
    settings: BenchSettings,
    sweep: SweepTargets | None,
    on_server: Callable[[BenchServer], None] | None,
    started: float,
) -> BenchReport:
    server = await bench.server_info()
    if server.guard_armed is False:
        raise UserError(
            f"the memory guard of the server on port {target.port} is disarmed; a benchmark pushes memory "
            "hard, so arm it first (F9 in the panel)"
        )
    if on_server is not None:
        on_server(server)
    # NVML's first use (import, init) takes tens of ms: pay it now, not inside a measured level
    bench.power_ok = await asyncio.to_thread(_gpu_power_w) is not None
    try:
        await bench.warm_up()
    except ServerGone as exc:
        raise UserError(str(exc)) from None
    runs: list[LevelResult] = []
    sweep_result: SweepResult | None = None
    error: str | None = None
    # Ctrl-C (in a command's main thread) cancels like the panel's key: what was measured stays
    loop = asyncio.get_running_loop()
    on_interrupt = threading.current_thread() is threading.main_thread()
    if on_interrupt:
        loop.add_signal_handler(signal.SIGINT, bench.cancel.set)
    try:
        if settings.depths:
            for depth in settings.depths:
                runs.append(await bench.depth_level(depth))
        elif sweep is None:
            for users in settings.users:
                runs.append(await bench.level(users))
        else:
            sweep_result = await _sweep(bench, sweep, runs)
    except _LevelAborted as aborted:
        if aborted.result.requests:
            runs.append(aborted.result)
        error = "cancelled" if isinstance(aborted.cause, _Cancelled) else str(aborted.cause)
    finally:
        if on_interrupt:
            loop.remove_signal_handler(signal.SIGINT)
    return BenchReport(
        server=server,
        settings=settings,
        runs=runs,
        sweep=sweep_result,
        partial=error is not None,
        error=error,
        started_at=started,
        finished_at=time.time(),
    )


async def _sweep(bench: _Bench, targets: SweepTargets, runs: list[LevelResult]) -> SweepResult:
    """Raise concurrency up the ladder until a target breaks, then bisect the gap below it."""
    ladder = _sweep_ladder(targets)
    tried: dict[int, list[str]] = {}

    async def attempt(users: int) -> list[str]:
        level = await bench.level(users)
        runs.append(level)
        tried[users] = meets(level, targets)
        return tried[users]

    good: int | None = None
    bad: int | None = None
    for users in ladder:
        if await attempt(users):
            bad = users
            break
        good = users
    while good is not None and bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if await attempt(middle):
            bad = middle
        else:
            good = middle
    runs.sort(key=lambda r: r.users)
    return SweepResult(
        target_tok_s=targets.tok_s,
        target_ttft_s=targets.ttft_s,
        best_users=good,
        broke_at=bad,
        broken_by=tried.get(bad, []) if bad is not None else [],
        tried=sorted(tried),
        max_users=targets.max_users,
    )


def run_bench(
    target: Target,
    settings: BenchSettings,
    *,
    sweep: SweepTargets | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    on_server: Callable[[BenchServer], None] | None = None,
) -> BenchReport:
    """Benchmark `target` (blocking; runs its own event loop, so call it from a thread in a UI).

    UserError when it cannot start (no server, refused, unknown model, bad settings). A run that
    ends early (the server stops, the guard trips, `cancel` is set) returns a report with
    partial=True and `error` saying why.
    """
    validate(settings, sweep)
    return asyncio.run(_run(target, settings, sweep, progress, cancel, on_server))


# Upper bounds: each user is a task holding its prompt in this process, and on a Spark this
# process's memory is the server's pool; a mistyped 10**11 must be refused, not attempted.
MAX_USERS = 4096
MAX_PROMPT_TOKENS = 2_000_000
MAX_OUTPUT_TOKENS = 1_000_000
MAX_REQUESTS_PER_USER = 100_000


def validate(settings: BenchSettings, sweep: SweepTargets | None = None) -> None:
    if not settings.users or any(not 1 <= u <= MAX_USERS for u in settings.users):
        raise UserError(
            f"--users {','.join(map(str, settings.users))}: expected whole numbers from 1 to {MAX_USERS}, e.g. 1,5,10"
        )
    for flag, value, most in (
        ("--prompt-tokens", settings.prompt_tokens, MAX_PROMPT_TOKENS),
        ("--output-tokens", settings.output_tokens, MAX_OUTPUT_TOKENS),
        ("--requests-per-user", settings.requests_per_user, MAX_REQUESTS_PER_USER),
    ):
        if value < 1:
            raise UserError(f"{flag} {value}: expected a whole number of at least 1")
        if value > most:
            raise UserError(f"{flag} {value}: expected at most {most:,}")
    if settings.output_tokens < 2:
        raise UserError("--output-tokens 1: at least 2 are needed to measure decode speed")
    if settings.depths is not None:
        if sweep is not None:
            raise UserError("--depth runs one user per depth: drop --sweep, or run the sweep without --depth")
        if not settings.depths or any(not 0 <= d <= MAX_PROMPT_TOKENS for d in settings.depths):
            raise UserError(
                f"--depth {','.join(map(str, settings.depths))}: expected token counts from 0 to "
                f"{MAX_PROMPT_TOKENS:,}, e.g. 0,4096,32768"
            )
    if sweep is not None:
        if not (0 < sweep.tok_s < math.inf and 0 < sweep.ttft_s < math.inf):
            raise UserError("--target-tok-s and --target-ttft-s: expected finite positive numbers, e.g. 20 and 1.0")
        if not 1 <= sweep.max_users <= MAX_USERS:
            raise UserError(f"--max-users {sweep.max_users}: expected 1 to {MAX_USERS}")


# ---------------------------------------------------------------- history


def history_path() -> Path:
    from sparktui.paths import bench_history_path

    return bench_history_path()


def record_of(report: BenchReport) -> HistoryRecord:
    server = report.server
    return HistoryRecord(
        recorded_at=report.finished_at,
        key=HistoryKey(
            profile=server.profile, model=server.model, vllm_version=server.vllm_version, flags=server.flags
        ),
        server=server,
        settings=report.settings,
        runs=report.runs,
        sweep=report.sweep,
        partial=report.partial,
        error=report.error,
    )


def append_history(report: BenchReport, path: Path | None = None) -> HistoryRecord:
    """Append the run as one JSON line (one write, so concurrent runs never interleave lines)."""
    record = record_of(report)
    line = record.model_dump_json() + "\n"
    fd = os.open(path or history_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return record


def read_history(path: Path | None = None) -> list[HistoryRecord]:
    """Every readable record, oldest first; lines that do not parse (or a newer schema) are skipped."""
    try:
        lines = (path or history_path()).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = HistoryRecord.model_validate_json(line)
        except ValidationError:
            continue
        if record.schema_version <= SCHEMA_VERSION:
            out.append(record)
    return out


def previous_run(
    records: Sequence[HistoryRecord], profile: str | None, before: float | None = None
) -> HistoryRecord | None:
    """The latest complete run of the same profile (finished before `before`, when given)."""
    for record in reversed(records):
        if record.key.profile == profile and not record.partial and (before is None or record.recorded_at < before):
            return record
    return None
