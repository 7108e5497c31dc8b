"""Anthropic's message body and its SSE stream, built from core token chunks as llama-server's
``to_json_anthropic`` and ``to_json_anthropic_stream`` build them (tools/server/server-task.cpp).

A message's ``content`` is a ``text`` block (when there is text) followed by one ``tool_use`` block per call;
``stop_reason`` is ``end_turn``, ``max_tokens``, ``stop_sequence`` (one of the request's ``stop_sequences`` ended
it, named in ``stop_sequence``) or ``tool_use``. ``usage.input_tokens`` counts the prompt tokens computed for this
request, ``cache_read_input_tokens`` those reused from the cache: the prompt is their sum, as in Anthropic's API.

A stream is ``message_start``, ``ping``, then per block ``content_block_start``, ``content_block_delta``
(``text_delta``; ``input_json_delta`` for a call's input, whole in one delta) and ``content_block_stop``, then
``message_delta`` (``stop_reason``, ``stop_sequence`` and the usage) and ``message_stop``. The usage is known once
the answer ends, so ``message_start`` says 0 tokens and ``message_delta`` carries every count (the anthropic SDKs
take its ``input_tokens`` too). An error after the stream began ends it with an ``error`` event in Anthropic's
shape, as its API streams errors.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from localinfer.app.server.core.streams import Collected
from localinfer.app.server.errors import anthropic_error
from localinfer.errors import LocalInferError
from localinfer.types import TokenChunk, TokenStream, ToolCall, Usage


def usage_body(usage: Usage | None) -> dict[str, int]:
    used = usage or Usage(0, 0)
    return {
        "input_tokens": used.prompt_tokens - used.cached_tokens,
        "cache_read_input_tokens": used.cached_tokens,
        "output_tokens": used.completion_tokens,
    }


def tool_use_block(call: ToolCall, *, with_input: bool = True) -> dict[str, Any]:
    """A call as a ``tool_use`` block (its id in Anthropic's ``toolu_`` form); in a stream its input comes after,
    in a delta."""
    block_id = call.id if call.id.startswith("toolu_") else f"toolu_{call.id.removeprefix('call_')}"
    return {"type": "tool_use", "id": block_id, "name": call.name, "input": call.arguments if with_input else {}}


@dataclass(frozen=True)
class Reply:
    """One answer: its id and model, and how its last chunk reads (the request's stop sequences, whether it may
    make only one call)."""

    id: str
    model: str
    stop_sequences: tuple[str, ...] = ()
    single_call: bool = False

    @classmethod
    def new(cls, model: str, stop_sequences: tuple[str, ...] = (), single_call: bool = False) -> Reply:
        return cls(f"msg_{uuid.uuid4().hex[:24]}", model, stop_sequences, single_call)

    def stop(self, last: TokenChunk) -> tuple[str, str | None]:
        """``stop_reason`` and ``stop_sequence`` for the chunk that ended the answer."""
        if last.finish_reason == "tool_calls":
            return "tool_use", None
        if last.finish_reason == "length":
            return "max_tokens", None
        if last.stop_word is not None and last.stop_word in self.stop_sequences:
            return "stop_sequence", last.stop_word
        return "end_turn", None  # the end of the turn, or a stop of the chat template's own

    def calls(self, last: TokenChunk) -> tuple[ToolCall, ...]:
        return last.tool_calls[:1] if self.single_call else last.tool_calls

    def message(self, result: Collected) -> dict[str, Any]:
        """The whole message, as ``/v1/messages`` answers without ``stream``."""
        content: list[dict[str, Any]] = [{"type": "text", "text": result.text}] if result.text else []
        content += [tool_use_block(call) for call in self.calls(result.last)]
        reason, sequence = self.stop(result.last)
        return {
            **self.head(content),
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage_body(result.last.usage),
        }

    def head(self, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content}


def event(name: str, data: dict[str, Any]) -> str:
    """One server-sent event, named as Anthropic names them (its ``type`` repeats the name)."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _block_start(index: int, block: dict[str, Any]) -> str:
    return event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _block_delta(index: int, delta: dict[str, Any]) -> str:
    return event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_stop(index: int) -> str:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})


async def sse_events(stream: TokenStream, reply: Reply) -> AsyncIterator[str]:
    """The events of one answer (see the module's doc). Closing this iterator closes the generation, which frees
    its slot at once."""
    opening = {**reply.head([]), "stop_reason": None, "stop_sequence": None, "usage": usage_body(None)}
    yield event("message_start", {"type": "message_start", "message": opening})
    yield event("ping", {"type": "ping"})
    index, text_open = 0, False
    try:
        async with aclosing(stream):
            async for chunk in stream:
                if chunk.text:
                    if not text_open:
                        yield _block_start(index, {"type": "text", "text": ""})
                        text_open = True
                    yield _block_delta(index, {"type": "text_delta", "text": chunk.text})
                if chunk.finish_reason is None:
                    continue
                if text_open:
                    yield _block_stop(index)
                    index, text_open = index + 1, False
                for call in reply.calls(chunk):
                    yield _block_start(index, tool_use_block(call, with_input=False))
                    partial = json.dumps(call.arguments, ensure_ascii=False)
                    yield _block_delta(index, {"type": "input_json_delta", "partial_json": partial})
                    yield _block_stop(index)
                    index += 1
                reason, sequence = reply.stop(chunk)
                yield event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": usage_body(chunk.usage),
                    },
                )
    except LocalInferError as exc:
        yield event("error", anthropic_error(exc)[1])
        return
    yield event("message_stop", {"type": "message_stop"})
