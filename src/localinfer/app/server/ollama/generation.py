"""Ollama's generation routes, in Ollama's shapes and defaults, so Continue, Zed, Copilot Chat's Ollama provider,
Open WebUI and the ``ollama`` client chat with localinfer unchanged.

- ``POST /api/chat {"model", "messages", "stream", "format", "options", "keep_alive", "think", "tools"}``
- ``POST /api/generate {"model", "prompt", "system", "raw", "suffix", "format", "options", "think", ...}``: the
  prompt goes through the model's chat template (with ``system``) unless ``raw``; with a ``suffix``, the model
  fills in the text between ``prompt`` and ``suffix`` (its FIM tokens laid out as llama-server's /infill does; a
  model without them is a 400), as Continue's autocomplete asks.

``stream`` defaults to true: NDJSON lines ``{"model", "created_at", "message": {"role", "content"}, "done":
false}`` (``"response"`` for /api/generate), then a last line with ``"done": true``, ``done_reason`` (``stop``,
``length``) and the counts and durations (nanoseconds): ``total_duration``, ``load_duration``,
``prompt_eval_count``, ``prompt_eval_duration``, ``eval_count``, ``eval_duration``. With ``"stream": false``, that
last object alone, carrying the whole text. A request with no messages (or an empty prompt) loads the model and
answers ``done_reason: "load"``. A request naming no model goes to the server's default one.

A reasoning model's thinking comes apart from the answer, in ``message.thinking`` (``thinking`` on /api/generate),
streamed in lines of its own as it is written, without the whitespace that starts it and the answer after it, as
Ollama sends it; a reply cut while thinking has an empty answer and ``done_reason: "length"``. ``think`` switches
it (ollama/think.py); an assistant turn's ``thinking`` goes back to the template. A ``raw`` prompt stays raw text.

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
from localinfer.app.server.ollama.think import for_model, refuse_unless_reasoning
from localinfer.app.server.ollama.wire import ChatBody, GenerateBody, json_body
from localinfer.engine.engine import Engine
from localinfer.engine.scheduler import Runner
from localinfer.engine.thinking_split import trimmed
from localinfer.errors import LocalInferError
from localinfer.types import CompletionRequest, InfillRequest, TokenChunk, TokenStream, ToolCall

router = APIRouter(prefix="/api", route_class=FastJSONRoute)
NDJSON = "application/x-ndjson"

ChatJSON = Annotated[ChatBody, Depends(json_body(ChatBody))]
GenerateJSON = Annotated[GenerateBody, Depends(json_body(GenerateBody))]

# the dialect's fields for a piece of the answer, of the thinking, and the tool calls that end it: message or
# response (and thinking)
Piece = Callable[[str, str, tuple[ToolCall, ...]], dict[str, Any]]


def created_at() -> str:
    """Now, as Ollama writes it: RFC 3339 in UTC with the fraction of a second."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class _Clock:
    """A request's durations in nanoseconds, as Ollama reports them."""

    def __init__(self) -> None:
        self.started = time.monotonic_ns()
        self.load = 0

    async def load_model(self, engine: Engine, model: str, keep_alive: float | None) -> Runner:
        before = time.monotonic_ns()
        runner = await engine.runner(model, keep_alive=keep_alive)
        self.load = time.monotonic_ns() - before
        return runner

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


def _message(text: str, thinking: str = "", calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if thinking:  # a reasoning model's thinking, apart from the answer, as Ollama sends it
        message["thinking"] = thinking
    if calls:  # in Ollama's shape: the arguments as an object
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return {"message": message}


def _response(text: str, thinking: str = "", calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
    return {"response": text, "thinking": thinking} if thinking else {"response": text}


@router.post("/chat", response_model=None)
async def chat(request: Request, body: ChatJSON) -> JSONResponse | StreamingResponse:
    engine = engine_of(request)
    model = requested_model(request, body.model_name())
    clock = _Clock()
    core = body.to_core(model)  # a bad field is a 400 before the model loads
    if not core.messages and core.keep_alive == 0:  # Ollama's way to unload a model
        engine.unload_when_idle(model)
        return JSONResponse(clock.loaded(model, _message(""), "unload"))
    runner = await unless_disconnected(request, clock.load_model(engine, model, core.keep_alive))
    core = for_model(core, body.think, _named(body, model), runner.backend.facts.thinking)
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
    # each request is built (a bad field is a 400) before the model loads
    asked = body.infill(model) if body.suffix else body.completion(model) if body.raw else body.chat(model)
    runner = await unless_disconnected(request, clock.load_model(engine, model, keep_alive))
    markers = runner.backend.facts.thinking
    refuse_unless_reasoning(body.think, _named(body, model), markers)
    if not body.prompt and not body.suffix:
        return JSONResponse(clock.loaded(model, _response("")))
    if isinstance(asked, InfillRequest):  # fill in the middle, from the model's FIM tokens (none: a 400)
        stream = engine.infill(asked)
    elif isinstance(asked, CompletionRequest):  # raw: the text as the model writes it, thinking and all
        stream = engine.complete(asked)
    else:
        stream = engine.chat(for_model(asked, body.think, _named(body, model), markers))
    return await _answer(request, stream, body.stream, model, clock, _response)


def _named(body: ChatBody | GenerateBody, model: str) -> str:
    """The model as the request named it (Ollama's errors say it so), or the one it went to."""
    return (body.model_name() or "").strip() or model


async def _answer(
    request: Request, stream: TokenStream, streaming: bool, model: str, clock: _Clock, piece: Piece
) -> JSONResponse | StreamingResponse:
    """The generation as NDJSON lines, or as one object with the whole text (and thinking, trimmed as Ollama
    trims it)."""
    started = await unless_disconnected(request, primed(trimmed(stream)))  # a bad request fails here, as an HTTP status
    if streaming:
        return StreamingResponse(_lines(started, model, clock, piece), media_type=NDJSON)
    result = await unless_disconnected(request, collect(started))
    return JSONResponse(clock.final(model, result.last, piece(result.text, result.reasoning, result.last.tool_calls)))


async def _lines(stream: TokenStream, model: str, clock: _Clock, piece: Piece) -> AsyncIterator[str]:
    """One line per piece of text, then the final line with the counts; an error ends the stream with its line.
    Closing this iterator (the client hung up) closes the generation, which frees its slot."""
    try:
        async for chunk in stream:
            if chunk.text or chunk.reasoning or chunk.tool_calls:  # the calls in a line before the last, as Ollama
                line = piece(chunk.text, chunk.reasoning, chunk.tool_calls)
                yield ndjson_line({"model": model, "created_at": created_at(), **line, "done": False})
            if chunk.finish_reason is not None:
                yield ndjson_line(clock.final(model, chunk, piece("", "", ())))
    except LocalInferError as exc:
        yield ndjson_line({**ollama_error_body(user_message(exc)), "done_reason": finish_reason_for(exc)})
    finally:
        await stream.aclose()
