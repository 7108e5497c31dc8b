"""OpenAI routes: parse the body, translate to core requests, hand to the engine, shape the answer."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localinfer.app.server.core.app_state import SSE_HEADERS, engine_of
from localinfer.app.server.core.choices import choice_streams, choices_usage, collect_all
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.streams import Collected, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.openai.completions_reply import (
    ChoiceShape,
    StreamHeader,
    chat_logprobs,
    completion_logprobs,
    sse_stream,
    timings_body,
    usage_body,
)
from localinfer.app.server.openai.tools_wire import tool_calls_body
from localinfer.app.server.openai.verbose import VerboseBodies, verbose_asked, verbose_bodies
from localinfer.app.server.openai.wire import ChatCompletionBody, CompletionBody
from localinfer.engine.engine import Engine
from localinfer.errors import ModelNotFound
from localinfer.types import (
    CompletionRequest,
    InfillRequest,
    ModelInfo,
    Timings,
    TokenLogprob,
    TokenStream,
    ToolCall,
)

router = APIRouter(
    prefix="/v1", route_class=FastJSONRoute
)  # the access guard (guard.py) checks the key before the body is read


def _model_card(request: Request, name: str, created: int) -> dict[str, Any]:
    """A model as OpenAI lists it, with llama-server's ``aliases`` and ``tags`` (``--alias``, ``--tags``)."""
    labels = getattr(request.app.state, "model_labels", {}).get(name, {"aliases": [], "tags": []})
    return {"id": name, **labels, "object": "model", "created": created, "owned_by": "localinfer"}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    """OpenAI's list; llama-server's clients (``GET /models``, no ``/v1``) find each model under ``models`` too,
    named as Ollama's list names them, with llama-server's ``capabilities`` (``multimodal`` for one with a
    projector)."""
    models = engine_of(request).models()
    return {
        "object": "list",
        "data": [_model_card(request, m.name, m.created) for m in models],
        "models": [
            {"name": m.name, "model": m.name, "type": "model", "capabilities": llama_server_capabilities(m)}
            for m in models
        ],
    }


def llama_server_capabilities(model: ModelInfo) -> list[str]:
    """What llama-server's model list says a model does: ``completion``, and ``multimodal`` when it loads a projector
    (images or sounds, alike)."""
    return ["completion", "multimodal"] if model.modalities else ["completion"]


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    for info in engine_of(request).models():
        if info.name == model_id:
            return _model_card(request, info.name, info.created)
    raise ModelNotFound(model_id)


class _ChatShape:
    """A streamed chat choice as llama-server (and OpenAI) sends it: the role first, with ``content`` null; then
    only pieces of text, never an empty one; then the finish reason with an empty delta."""

    def __init__(self, with_logprobs: bool = False) -> None:
        self._with_logprobs = with_logprobs

    def opening(self, index: int) -> dict[str, Any]:
        return {
            "index": index,
            "delta": {"role": "assistant", "content": None},
            "logprobs": None,
            "finish_reason": None,
        }

    def content(self, index: int, text: str, logprobs: tuple[TokenLogprob, ...] = ()) -> dict[str, Any]:
        """A piece of text; the log-probabilities of tokens whose text was dropped (a stop string) come with an
        empty delta rather than an empty ``content``."""
        shown = chat_logprobs(logprobs) if self._with_logprobs else None
        return {"index": index, "delta": {"content": text} if text else {}, "logprobs": shown, "finish_reason": None}

    def reasoning(self, index: int, text: str) -> dict[str, Any]:
        """A piece of a reasoning model's thinking, as llama-server (and DeepSeek) streams it."""
        return {"index": index, "delta": {"reasoning_content": text}, "logprobs": None, "finish_reason": None}

    def tool_calls(self, index: int, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        """Each call as OpenAI streams it: its id, type and name with empty arguments, then the arguments."""
        deltas = []
        for position, call in enumerate(tool_calls_body(calls)):
            named = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            arguments = {"function": {"arguments": call["function"]["arguments"]}}
            for part in (named, arguments):
                deltas.append(
                    {"index": index, "delta": {"tool_calls": [{"index": position, **part}]}, "logprobs": None}
                )
        return deltas

    def finish(self, index: int, reason: str) -> dict[str, Any]:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": reason}


@router.post("/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionBody, request: Request) -> JSONResponse | StreamingResponse:
    """One choice, or ``n`` from the same prompt (core/choices.py: computed once, decoded side by side)."""
    body.model = requested_model(request, body.model)  # none named: the server's default model
    core = body.to_core()
    engine = engine_of(request)
    streams = choice_streams([core], body.n, engine.chat)
    streams[0] = await unless_disconnected(request, primed(streams[0]))
    header = StreamHeader.new("chat.completion.chunk", body.model, "chatcmpl")
    verbose = await verbose_bodies(engine, [core], body.n, stream=body.stream) if _verbose(request, body) else None
    if body.stream:
        return _streamed(streams, header, _ChatShape(body.logprobs), body, verbose)
    results = await unless_disconnected(request, collect_all(streams))
    choices = [_chat_choice(index, result, body.logprobs) for index, result in enumerate(results)]
    usage = choices_usage([r.last.usage for r in results], body.n)
    timings = _summed_timings(results)
    answer = {
        **header.chunk(choices, usage=usage_body(usage), timings=timings_body(timings)),
        "object": "chat.completion",
    }
    return JSONResponse(_with_verbose(answer, verbose, results))


def _streamed(
    streams: list[TokenStream],
    header: StreamHeader,
    shape: ChoiceShape,
    body: ChatCompletionBody | CompletionBody,
    verbose: VerboseBodies | None,
    *,
    verbose_pieces: bool = False,
) -> StreamingResponse:
    """The choices' streams as OpenAI's server-sent events (``verbose_pieces``: text completions' pieces carry
    ``__verbose`` too, as llama-server sends them)."""
    events = sse_stream(
        streams,
        header,
        shape,
        body.include_usage,
        body.n,
        timings_per_token=body.timings_per_token,
        verbose=verbose,
        verbose_pieces=verbose_pieces,
    )
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def _verbose(request: Request, body: ChatCompletionBody | CompletionBody) -> bool:
    return verbose_asked(request, body.verbose)


def _with_verbose(answer: dict[str, Any], verbose: VerboseBodies | None, results: list[Collected]) -> dict[str, Any]:
    """``answer`` with the first choice's ``__verbose`` (llama-server's answers hold one choice each)."""
    if verbose is None:
        return answer
    return {**answer, "__verbose": verbose.final(0, results[0].text, results[0].last)}


def _chat_choice(index: int, result: Collected, with_logprobs: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.text}
    if result.reasoning:  # a reasoning model's thinking, as llama-server and DeepSeek answer it
        message["reasoning_content"] = result.reasoning
    if result.last.tool_calls:
        message = {**message, "content": result.text or None, "tool_calls": tool_calls_body(result.last.tool_calls)}
    logprobs = chat_logprobs(result.logprobs) if with_logprobs else None
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": result.last.finish_reason}


def _summed_timings(results: list[Collected]) -> Timings | None:
    """All choices' timings together: a prompt computed once counts once (its other choices' ``prompt_n`` is what
    they computed beyond the cache they borrowed)."""
    timings = [r.last.timings for r in results if r.last.timings is not None]
    return sum(timings[1:], timings[0]) if timings else None


class _CompletionShape:
    def __init__(self, prompts: list[str], echo: bool, with_logprobs: bool = False) -> None:
        self._prompts = prompts
        self._echo = echo
        self._with_logprobs = with_logprobs
        self._offsets = [len(p) if echo else 0 for p in prompts]  # where the next text starts, per choice

    def opening(self, index: int) -> dict[str, Any] | None:
        if not self._echo:
            return None
        return {"index": index, "text": self._prompts[index], "logprobs": None, "finish_reason": None}

    def content(self, index: int, text: str, logprobs: tuple[TokenLogprob, ...] = ()) -> dict[str, Any]:
        shown = completion_logprobs(logprobs, self._offsets[index]) if self._with_logprobs else None
        self._offsets[index] += len(text)
        return {"index": index, "text": text, "logprobs": shown, "finish_reason": None}

    def reasoning(self, index: int, text: str) -> None:
        return None  # a text completion is raw text: no thinking is taken out of it

    def tool_calls(self, index: int, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        return []  # text completions take no tools

    def finish(self, index: int, reason: str) -> dict[str, Any]:
        return {"index": index, "text": "", "logprobs": None, "finish_reason": reason}


def _generate(engine: Engine, core: CompletionRequest | InfillRequest) -> TokenStream:
    return engine.infill(core) if isinstance(core, InfillRequest) else engine.complete(core)


@router.post("/completions", response_model=None)
async def completions(body: CompletionBody, request: Request) -> JSONResponse | StreamingResponse:
    """One choice per prompt, or ``n`` per prompt (core/choices.py), all run side by side."""
    engine = engine_of(request)
    body.model = requested_model(request, body.model)
    cores = body.to_core()
    prompts = [p for p in body.prompts for _ in range(body.n)]  # the prompt of each choice
    streams = choice_streams(cores, body.n, functools.partial(_generate, engine))
    streams[0] = await unless_disconnected(request, primed(streams[0]))
    header = StreamHeader.new("text_completion", body.model, "cmpl")
    verbose = await verbose_bodies(engine, cores, body.n, stream=body.stream) if _verbose(request, body) else None
    if body.stream:
        shape = _CompletionShape(prompts, body.echo, body.logprobs is not None)
        return _streamed(streams, header, shape, body, verbose, verbose_pieces=True)
    results = await unless_disconnected(request, collect_all(streams))
    choices: list[dict[str, Any]] = []
    for index, result in enumerate(results):
        start = len(prompts[index]) if body.echo else 0
        text = (prompts[index] if body.echo else "") + result.text
        logprobs = completion_logprobs(result.logprobs, start) if body.logprobs is not None else None
        choices.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": result.last.finish_reason})
    usage = choices_usage([r.last.usage for r in results], body.n)
    timings = _summed_timings(results) or Timings(0.0, 0.0, 0, 0)
    answer = header.chunk(choices, usage=usage_body(usage), timings=timings_body(timings))
    return JSONResponse(_with_verbose(answer, verbose, results))


# llama-server answers OpenAI's routes without /v1 too, and its docs point the openai SDK at the bare address.
root_router = APIRouter(route_class=FastJSONRoute)
root_router.add_api_route("/chat/completions", chat_completions, methods=["POST"], response_model=None)
root_router.add_api_route("/models", list_models, methods=["GET"])
