"""What a benchmark run reports: typed results (pydantic), one level's figures also under the
names of `vllm bench serve`'s result JSON, and the progress a run sends as it goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field


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
