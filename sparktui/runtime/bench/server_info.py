"""Before a run: which model the server serves (the one asked for, else the one sparktui started it
with), whether a prompt and its output fit its max model length, and its vLLM version and flags."""

from __future__ import annotations

import httpx

from sparktui.errors import UserError
from sparktui.runtime.bench.client import StreamClient
from sparktui.runtime.bench.results import BenchServer, BenchSettings
from sparktui.runtime.bench.target import recorded_flags


async def server_info(client: StreamClient) -> BenchServer:
    """The server as the run reports it; sets the client's model. UserError when it cannot be run."""
    url = client.target.url
    try:
        reply = await client.http.get("/v1/models", timeout=10)
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
    state = client.target.state or {}
    wanted = client.settings.model
    if wanted is not None and wanted not in served:
        raise UserError(f"--model {wanted}: the server does not serve it; it serves {', '.join(served)}")
    if wanted is None:
        wanted = state.get("model") if state.get("model") in served else served[0]
    assert wanted is not None
    client.model = wanted
    card = next(c for c in cards if c["id"] == wanted)
    max_len = card.get("max_model_len")
    max_len = int(max_len) if isinstance(max_len, int) else (state.get("summary") or {}).get("max_model_len")
    check_length(client.settings, max_len)
    version = (state.get("summary") or {}).get("version")
    if not version:
        try:
            answer = await client.http.get("/version", timeout=5)
            version = answer.json().get("version") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            version = None
    guard = state.get("guard") or {}
    return BenchServer(
        url=url,
        port=client.target.port,
        managed=client.target.state is not None,
        profile=state.get("profile"),
        model=wanted,
        model_path=state.get("model"),
        vllm_version=str(version) if version else None,
        flags=recorded_flags(state.get("argv")),
        max_model_len=max_len if isinstance(max_len, int) else None,
        guard_armed=bool(guard.get("armed")) if client.target.state is not None else None,
        api_key_sent=bool(client.target.api_key),
    )


def check_length(settings: BenchSettings, max_len: object) -> None:
    """A prompt (after its context depth) and its output must fit the server's max model length."""
    if not isinstance(max_len, int):
        return
    depth = max(settings.depths or [0])
    needed = depth + settings.prompt_tokens + settings.output_tokens
    if depth and needed > max_len:
        raise UserError(
            f"--depth {depth} + --prompt-tokens {settings.prompt_tokens} + --output-tokens "
            f"{settings.output_tokens} = {needed} tokens, more than the server's max model length "
            f"{max_len}: lower the depth"
        )
    if needed > max_len:
        raise UserError(
            f"--prompt-tokens {settings.prompt_tokens} + --output-tokens {settings.output_tokens} = "
            f"{needed} tokens, more than the server's max model length {max_len}: lower one of them"
        )
