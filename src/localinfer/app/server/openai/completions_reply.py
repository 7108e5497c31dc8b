"""OpenAI response bodies and SSE streams built from core token chunks."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from localinfer.app.server.core.choices import choices_usage, merged
from localinfer.app.server.core.timings import progress_timings, timings_fields
from localinfer.app.server.errors import finish_reason_for, openai_error
from localinfer.app.server.openai.verbose import VerboseBodies
from localinfer.errors import LocalInferError
from localinfer.types import Timings, TokenLogprob, TokenStream, ToolCall, Usage


def usage_body(usage: Usage | None) -> dict[str, Any] | None:
    """OpenAI's usage: ``completion_tokens_details.reasoning_tokens`` counts the completion's tokens a reasoning
    model thought in (its markers, and a budget's forced end, not counted)."""
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def timings_body(t: Timings | None) -> dict[str, Any] | None:
    """llama-server's ``timings`` (the same figures as on its own routes), None without any."""
    return None if t is None else timings_fields(t, t.cache_n)


@dataclass(frozen=True)
class StreamHeader:
    """What every chunk of one stream repeats: id, created, model, object."""

    object: str
    model: str
    id: str
    created: int

    @classmethod
    def new(cls, object: str, model: str, id_prefix: str) -> StreamHeader:
        return cls(object, model, f"{id_prefix}-{uuid.uuid4().hex}", int(time.time()))

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


class ChoiceShape(Protocol):
    """How one dialect endpoint shapes a streamed choice."""

    def opening(self, index: int) -> dict[str, Any] | None: ...
    def content(self, index: int, text: str, logprobs: tuple[TokenLogprob, ...] = ()) -> dict[str, Any]: ...
    def reasoning(self, index: int, text: str) -> dict[str, Any] | None: ...
    def tool_calls(self, index: int, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]: ...
    def finish(self, index: int, reason: str) -> dict[str, Any]: ...


async def sse_stream(
    streams: list[TokenStream],
    header: StreamHeader,
    shape: ChoiceShape,
    include_usage: bool,
    n: int = 1,
    *,
    timings_per_token: bool = False,
    verbose: VerboseBodies | None = None,
    verbose_pieces: bool = False,
) -> AsyncIterator[str]:
    """Server-sent events for one or more generations (one per choice index, ``n`` per prompt), run side by side:
    each choice's opening first, then the chunks of all choices interleaved as they come, each naming its choice's
    ``index``, each choice ending with its finishing chunk; then ``[DONE]``.

    The last chunk carries the ``timings``, as llama-server's does: each choice's finishing chunk its own, or, when
    usage is asked for, the closing usage chunk those of all choices, and the usage of all of them (each prompt
    counted once, core/choices.py).

    An error after the stream began (the server shutting down, a failed generation) ends it properly all the same:
    every choice not finished yet gets a finishing chunk whose ``finish_reason`` is ``abort`` (shutting down) or
    ``error``, then the error is sent as ``data: {"error": ...}``, as OpenAI streams errors, then ``[DONE]``.
    Closing this iterator closes the generations, which frees their slots at once.

    With ``verbose`` (openai/verbose.py), each choice's finishing chunk carries its ``__verbose``, and with
    ``verbose_pieces`` (text completions) every piece of text its own, as llama-server sends them.
    """
    extra: dict[str, Any] = {"usage": None} if include_usage else {}
    usages: list[Usage | None] = [None] * len(streams)
    timings: Timings | None = None
    finished: set[int] = set()
    try:
        for index in range(len(streams)):
            opening = shape.opening(index)
            if opening is not None:
                yield sse(header.chunk([opening], **extra))
        async with aclosing(merged(streams)) as chunks:
            async for index, chunk in chunks:
                if chunk.progress is not None:  # return_progress: the choice's opening again, with the progress
                    choice = shape.opening(index) or shape.content(index, "")
                    progress = dataclasses.asdict(chunk.progress)
                    timed = {"timings": timings_body(progress_timings(chunk.progress))} if timings_per_token else {}
                    yield sse(header.chunk([choice], **extra, **timed, prompt_progress=progress))
                    continue
                thought = shape.reasoning(index, chunk.reasoning) if chunk.reasoning else None
                if thought is not None:
                    yield sse(header.chunk([thought], **extra))
                if chunk.text or chunk.logprobs:
                    so_far = chunk.timings if chunk.finish_reason is None else None  # timings_per_token
                    shown = {"timings": timings_body(so_far)} if so_far is not None else {}
                    if verbose is not None and verbose_pieces:
                        shown["__verbose"] = verbose.piece(index, chunk)
                    yield sse(header.chunk([shape.content(index, chunk.text, chunk.logprobs)], **extra, **shown))
                for delta in shape.tool_calls(index, chunk.tool_calls):
                    yield sse(header.chunk([delta], **extra))
                if chunk.finish_reason is not None:
                    own = chunk.timings is not None and not include_usage
                    shown = {"timings": timings_body(chunk.timings)} if own else {}
                    if verbose is not None:
                        shown["__verbose"] = verbose.final(index, "", chunk)
                    yield sse(header.chunk([shape.finish(index, chunk.finish_reason)], **extra, **shown))
                    finished.add(index)
                    if chunk.timings is not None:
                        timings = chunk.timings if timings is None else timings + chunk.timings
                if chunk.usage is not None:
                    usages[index] = chunk.usage
    except LocalInferError as exc:
        reason = finish_reason_for(exc)
        for index in range(len(streams)):
            if index not in finished:
                yield sse(header.chunk([shape.finish(index, reason)], **extra))
        yield sse(openai_error(exc)[1])
        yield sse("[DONE]")
        return
    if include_usage:
        shown = {"timings": timings_body(timings)} if timings is not None else {}
        yield sse(header.chunk([], usage=usage_body(choices_usage(usages, n)), **shown))
    yield sse("[DONE]")


def chat_logprobs(logprobs: Sequence[TokenLogprob]) -> dict[str, Any]:
    """Chat's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}``."""

    def entry(token: str, raw: bytes, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(raw)}

    content = [{**entry(t.token, t.raw, t.logprob), "top_logprobs": [entry(*top) for top in t.top]} for t in logprobs]
    return {"content": content, "refusal": None}


def completion_logprobs(logprobs: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    """The legacy completions' ``logprobs``: parallel lists, ``text_offset`` counted from ``offset``."""
    offsets, at = [], offset
    for t in logprobs:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in logprobs],
        "token_logprobs": [t.logprob for t in logprobs],
        "top_logprobs": [{token: logprob for token, _, logprob in t.top} for t in logprobs],
        "text_offset": offsets,
    }
