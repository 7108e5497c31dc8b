"""A core ``GenerationRequest`` as a streamed ``/v1/completions`` call to an engine, and its events back as chunks;
and the reading of a child's server-sent events (``sse_data``, ``json_events``, ``event_error``) that the child
``localinfer serve`` of a model on RPC workers (``llamacpp/rpc/child_wire.py``) shares."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from localinfer.errors import GenerationFailed, InvalidRequest, LocalInferError, ModelNotReady
from localinfer.types import FinishReason, GenerationRequest, Timings, TokenChunk, Usage


def completion_body(model: str, request: GenerationRequest, *, top_k_off: int = -1) -> dict[str, Any]:
    """The streamed completion request for ``request``, in OpenAI's and vLLM's parameter names (SGLang, TGI and
    TensorRT-LLM take the same names, and ignore those they do not know: ``Recipe.refuse_unhonoured`` refuses
    those first).

    ``max_tokens`` is sent even when None: vLLM then fills the context, where its default would be 16.
    """
    options = request.options
    sampling = options.sampling
    body: dict[str, Any] = {
        "model": model,
        "prompt": request.prompt,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": options.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else top_k_off,
        "min_p": sampling.min_p,
        "repetition_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "seed": sampling.seed,
        "stop": list(options.stop),
        "ignore_eos": options.ignore_eos,
        "add_special_tokens": request.add_special,
    }
    response_format = options.response_format
    if response_format.type == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif response_format.type == "json_schema":
        schema = {"name": "response", "schema": response_format.schema or {}}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    return body


def error_for(status: int, body: bytes, engine: str = "the engine") -> LocalInferError:
    """The localinfer error for ``engine``'s non-200 answer, with the engine's own message (a 400, or TGI's 422,
    is the request's fault)."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    if isinstance(error, str):
        error = {"message": error}
    message = str(error.get("message") or body.decode(errors="replace")[:500] or f"status {status}")
    if status in (400, 422):
        param = error.get("param")
        return InvalidRequest(message, param=param if isinstance(param, str) else None)
    if status == 503:
        return ModelNotReady(f"{engine} is not ready: {message}")
    return GenerationFailed(f"{engine} failed ({status}): {message}")


async def sse_data(body: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The ``data`` of each event in a server-sent event stream (multi-line data joined with newlines)."""
    buffer = b""
    async for chunk in body:
        buffer = (buffer + chunk).replace(b"\r\n", b"\n")
        while (end := buffer.find(b"\n\n")) >= 0:
            event, buffer = buffer[:end], buffer[end + 2 :]
            lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if lines:
                yield b"\n".join(lines).decode(errors="replace")


async def json_events(
    events: AsyncIterator[str], source: str, *, broken: type[GenerationFailed] = GenerationFailed
) -> AsyncIterator[dict[str, Any]]:
    """Each event's data as JSON, up to ``[DONE]`` or the stream's end. Raises ``broken`` (naming ``source``) for
    an event that is not JSON."""
    async for data in events:
        if data.strip() == "[DONE]":
            return
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise broken(f"{source} sent an event that is not JSON: {data[:200]!r}") from exc
        yield payload


def event_error(payload: Mapping[str, Any]) -> tuple[str, object] | None:
    """The message and code (None when it has none) of an error event, whose ``error`` is an object or a string;
    None for any other event."""
    error = payload.get("error")
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("message")), error.get("code")
    return str(error), None


async def token_chunks(events: AsyncIterator[str], engine: str = "the engine") -> AsyncIterator[TokenChunk]:
    """Chunks from a completion's event data; the last one carries the finish reason, usage and timings.

    Timings are measured here: prompt time is the wait for the first token, generation time the rest.
    Raises GenerationFailed when the stream carries an error or ends without finishing.
    """
    started = time.perf_counter()
    first_token: float | None = None
    finish: FinishReason | None = None
    usage: Usage | None = None
    async for payload in json_events(events, engine):
        if (error := event_error(payload)) is not None:
            raise GenerationFailed(f"{engine} failed mid-generation: {error[0]}")
        if payload.get("usage"):
            u = payload["usage"]
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            usage = Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0), cached)
        for choice in payload.get("choices") or []:
            if choice.get("text"):
                first_token = first_token if first_token is not None else time.perf_counter()
                yield TokenChunk(choice["text"])
            if choice.get("finish_reason"):
                finish = "length" if choice["finish_reason"] == "length" else "stop"
    if finish is None:
        raise GenerationFailed(f"{engine}'s stream ended before the generation finished")
    ended = time.perf_counter()
    first = first_token if first_token is not None else ended
    usage = usage or Usage(0, 0)
    timings = Timings((first - started) * 1000, (ended - first) * 1000, usage.prompt_tokens, usage.completion_tokens)
    yield TokenChunk("", finish_reason=finish, usage=usage, timings=timings)
