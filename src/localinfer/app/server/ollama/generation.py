"""Ollama's generation routes, in Ollama's shapes and defaults, so Continue, Zed, Copilot Chat's Ollama provider,
Open WebUI and the ``ollama`` client chat with localinfer unchanged.

- ``POST /api/chat {"model", "messages", "stream", "format", "options", "keep_alive", "think"}``
- ``POST /api/generate {"model", "prompt", "system", "raw", "suffix", "format", "options", ...}``: the prompt goes
  through the model's chat template (with ``system``) unless ``raw``; with a ``suffix``, the model fills in the
  text between ``prompt`` and ``suffix`` (its FIM tokens laid out as llama-server's /infill does; a model without
  them is a 400), as Continue's autocomplete asks.

``stream`` defaults to true: NDJSON lines ``{"model", "created_at", "message": {"role", "content"}, "done":
false}`` (``"response"`` for /api/generate), then a last line with ``"done": true``, ``done_reason`` (``stop``,
``length``) and the counts and durations (nanoseconds): ``total_duration``, ``load_duration``,
``prompt_eval_count``, ``prompt_eval_duration``, ``eval_count``, ``eval_duration``. With ``"stream": false``, that
last object alone, carrying the whole text. A request with no messages (or an empty prompt) loads the model and
answers ``done_reason: "load"``. A request naming no model goes to the server's default one.

Errors before the answer starts are HTTP statuses with ``{"error": "..."}``; an error after it started is the
stream's last line, ``{"error": "..."}``, as Ollama sends it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localinfer.app.server.core.app_state import engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.streams import collect, ndjson_line, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.errors import finish_reason_for, ollama_error_body, user_message
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.ollama.wire import ChatBody, GenerateBody, json_body
from localinfer.engine.engine import Engine
from localinfer.errors import LocalInferError
from localinfer.types import TokenChunk, TokenStream, ToolCall

router = APIRouter(prefix="/api", route_class=FastJSONRoute)
NDJSON = "application/x-ndjson"

ChatJSON = Annotated[ChatBody, Depends(json_body(ChatBody))]
GenerateJSON = Annotated[GenerateBody, Depends(json_body(GenerateBody))]

# the dialect's field for a piece of text (and the tool calls that end it): message or response
Piece = Callable[[str, tuple[ToolCall, ...]], dict[str, Any]]


def created_at() -> str:
    """Now, as Ollama writes it: RFC 3339 in UTC with the fraction of a second."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class _Clock:
    """A request's durations in nanoseconds, as Ollama reports them."""

    def __init__(self) -> None:
        self.started = time.monotonic_ns()
        self.load = 0

    async def load_model(self, engine: Engine, model: str, keep_alive: float | None) -> None:
        before = time.monotonic_ns()
        await engine.runner(model, keep_alive=keep_alive)
        self.load = time.monotonic_ns() - before

    def final(self, model: str, last: TokenChunk, piece: dict[str, Any]) -> dict[str, Any]:
        usage, timings = last.usage, last.timings
        return {
            "model": model,
            "created_at": created_at(),
            **piece,
            "done": True,
            "done_reason": "stop" if last.finish_reason in (None, "tool_calls") else last.finish_reason,
            "total_duration": time.monotonic_ns() - self.started,
            "load_duration": self.load,
            "prompt_eval_count": usage.prompt_tokens if usage else 0,
            "prompt_eval_duration": int(timings.prompt_ms * 1e6) if timings else 0,
            "eval_count": usage.completion_tokens if usage else 0,
            "eval_duration": int(timings.predicted_ms * 1e6) if timings else 0,
        }

    def loaded(self, model: str, piece: dict[str, Any], reason: str = "load") -> dict[str, Any]:
        """The answer to a request that only loads the model (or, ``reason`` "unload", unloads it)."""
        return {
            "model": model,
            "created_at": created_at(),
            **piece,
            "done": True,
            "done_reason": reason,
            "total_duration": time.monotonic_ns() - self.started,
            "load_duration": self.load,
        }


def _message(text: str, calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:  # in Ollama's shape: the arguments as an object
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return {"message": message}


def _response(text: str, calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
    return {"response": text}


@router.post("/chat", response_model=None)
async def chat(request: Request, body: ChatJSON) -> JSONResponse | StreamingResponse:
    engine = engine_of(request)
    model = requested_model(request, body.model_name())
    clock = _Clock()
    core = body.to_core(model)  # a bad field is a 400 before the model loads
    if not core.messages and core.keep_alive == 0:  # Ollama's way to unload a model
        engine.unload_when_idle(model)
        return JSONResponse(clock.loaded(model, _message(""), "unload"))
    await unless_disconnected(request, clock.load_model(engine, model, core.keep_alive))
    if not core.messages:
        return JSONResponse(clock.loaded(model, _message("")))
    return await _answer(request, engine.chat(core), body.stream, model, clock, _message)


@router.post("/generate", response_model=None)
async def generate(request: Request, body: GenerateJSON) -> JSONResponse | StreamingResponse:
    engine = engine_of(request)
    model = requested_model(request, body.model_name())
    clock = _Clock()
    body.check()
    keep_alive = body.keep_alive_seconds()
    if not body.prompt and not body.suffix and keep_alive == 0:  # Ollama's way to unload a model
        engine.unload_when_idle(model)
        return JSONResponse(clock.loaded(model, _response(""), "unload"))
    if body.suffix:  # fill in the middle, from the model's FIM tokens (a model without them: a 400)
        stream = engine.infill(body.infill(model))
    elif body.raw:
        stream = engine.complete(body.completion(model))
    else:
        stream = engine.chat(body.chat(model))
    await unless_disconnected(request, clock.load_model(engine, model, keep_alive))
    if not body.prompt and not body.suffix:
        await stream.aclose()
        return JSONResponse(clock.loaded(model, _response("")))
    return await _answer(request, stream, body.stream, model, clock, _response)


async def _answer(
    request: Request, stream: TokenStream, streaming: bool, model: str, clock: _Clock, piece: Piece
) -> JSONResponse | StreamingResponse:
    """The generation as NDJSON lines, or as one object with the whole text."""
    started = await unless_disconnected(request, primed(stream))  # a bad request fails here, as an HTTP status
    if streaming:
        return StreamingResponse(_lines(started, model, clock, piece), media_type=NDJSON)
    result = await unless_disconnected(request, collect(started))
    return JSONResponse(clock.final(model, result.last, piece(result.text, result.last.tool_calls)))


async def _lines(stream: TokenStream, model: str, clock: _Clock, piece: Piece) -> AsyncIterator[str]:
    """One line per piece of text, then the final line with the counts; an error ends the stream with its line.
    Closing this iterator (the client hung up) closes the generation, which frees its slot."""
    try:
        async for chunk in stream:
            if chunk.text or chunk.tool_calls:  # Ollama sends the calls in a line of their own, before the last
                line = piece(chunk.text, chunk.tool_calls)
                yield ndjson_line({"model": model, "created_at": created_at(), **line, "done": False})
            if chunk.finish_reason is not None:
                yield ndjson_line(clock.final(model, chunk, piece("", ())))
    except LocalInferError as exc:
        yield ndjson_line({**ollama_error_body(user_message(exc)), "done_reason": finish_reason_for(exc)})
    finally:
        await stream.aclose()
