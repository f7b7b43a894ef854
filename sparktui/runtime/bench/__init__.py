"""Benchmark a running vLLM through its OpenAI-compatible API: how fast, and for how many users.

Method. For each concurrency level, `users` clients each send `requests_per_user` streaming
requests back to back (a closed loop: one request in flight per user). Every figure comes from the
client's side, never from the server's counters: each stream is read by its own thread on its own
connection (wire), and each SSE chunk is stamped with the time the kernel received its packet
(time.perf_counter's timebase), so this process running late (its event loop, the GIL, a core
busy with the server) delays the reading, not the figures:
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

While a level runs, a watcher samples MemAvailable, KV-cache usage from /metrics, GPU power and,
for a server sparktui started, its state record (watcher.py). A run that ends early keeps what it
measured, marked partial. Every run is appended to the history (history.py).

The room, bottom up:
  results        what a run reports (pydantic models; `vllm bench serve`'s names in VllmBenchFields)
  limits         what a run may ask for (validate)
  target         which server, from sparktui's state or a bare port
  request_record one request's timestamps; figures: a level's figures from them
  history        <state dir>/bench/history.jsonl
  wire           the HTTP/1.1 client stamped by the kernel; client: the streams over it
  server_info    what the server serves, checked before the run; watcher: samples during a level
  levels         one concurrency level; depth: the depth mode; sweep: the ladder and bisection
  run            run_bench, the entry
  vllm_driver    `sparktui bench --vllm`: vLLM's own `vllm bench serve`, level by level
"""
