"""Anthropic's message body and its SSE stream, built from core token chunks as llama-server's
``to_json_anthropic`` and ``to_json_anthropic_stream`` build them (tools/server/server-task.cpp).

A message's ``content`` is a ``thinking`` block (a reasoning model's thinking, when it thought), a ``text`` block
(when there is text), then one ``tool_use`` block per call;
``stop_reason`` is ``end_turn``, ``max_tokens``, ``stop_sequence`` (one of the request's ``stop_sequences`` ended
it, named in ``stop_sequence``) or ``tool_use``. ``usage.input_tokens`` counts the prompt tokens computed for this
request, ``cache_read_input_tokens`` those reused from the cache: the prompt is their sum, as in Anthropic's API;
``output_tokens`` counts the thinking and the answer. A reply cut while thinking has only its thinking block.

A thinking block's ``signature`` is ``""``, as llama-server sends it: Anthropic's is an opaque proof that its
servers wrote the thinking; nothing here signs, and a thinking block given back is read as it is (wire.py).

A stream is, as llama-server sends it, ``message_start`` (once the first token is out: its usage holds the
prompt's counts, ``input_tokens`` and ``cache_read_input_tokens``, and 0 output tokens), then per block
``content_block_start``, ``content_block_delta`` (``thinking_delta`` as the model thinks, then one
``signature_delta``; ``text_delta``; ``input_json_delta`` for a call's input, whole in one delta) and
``content_block_stop``, then ``message_delta`` (``stop_reason``, ``stop_sequence`` and ``usage.output_tokens``)
and ``message_stop``; no ``ping`` (Anthropic's API sends one; llama-server does not, and the SDKs need none).
Blocks come one after the other, as Anthropic streams them (llama-server opens the text block, and a call's, before
it closes the ones before: docs/llama-server.md). A backend that does not say the prompt's counts as it goes gets
0 in ``message_start`` and every count in ``message_delta``. An error after the stream began ends it with an
``error`` event in Anthropic's shape, as its API streams errors.
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

SIGNATURE = ""  # a thinking block's: nothing here signs what a model thought (see the module's doc)


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
    shows_thinking: bool = True  # False: thinking blocks without their text (``display: "omitted"``)

    @classmethod
    def new(
        cls, model: str, stop_sequences: tuple[str, ...] = (), single_call: bool = False, shows_thinking: bool = True
    ) -> Reply:
        return cls(f"msg_{uuid.uuid4().hex[:24]}", model, stop_sequences, single_call, shows_thinking)

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
        content: list[dict[str, Any]] = []
        if result.reasoning:
            shown = result.reasoning if self.shows_thinking else ""
            content.append({"type": "thinking", "thinking": shown, "signature": SIGNATURE})
        if result.text:
            content.append({"type": "text", "text": result.text})
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


class _Blocks:
    """The thinking block, then the text block, streamed one after the other: each opens at its first piece and
    closes when the next one opens or the answer ends (the thinking block with its ``signature_delta``)."""

    def __init__(self, shows_thinking: bool) -> None:
        self.index = 0  # the next block's
        self._open: str | None = None  # "thinking" or "text"
        self._shows_thinking = shows_thinking

    def add(self, chunk: TokenChunk) -> list[str]:
        """The events for one chunk's thinking, then its text."""
        events: list[str] = []
        if chunk.reasoning:
            if self._open != "thinking":
                events += self.close()
                events.append(self._start("thinking", {"thinking": "", "signature": ""}))
            if self._shows_thinking:
                events.append(_block_delta(self.index, {"type": "thinking_delta", "thinking": chunk.reasoning}))
        if chunk.text:
            if self._open != "text":
                events += self.close()
                events.append(self._start("text", {"text": ""}))
            events.append(_block_delta(self.index, {"type": "text_delta", "text": chunk.text}))
        return events

    def close(self) -> list[str]:
        """The events that close the open block, if one is."""
        if self._open is None:
            return []
        events = []
        if self._open == "thinking":
            events.append(_block_delta(self.index, {"type": "signature_delta", "signature": SIGNATURE}))
        events.append(_block_stop(self.index))
        self._open, self.index = None, self.index + 1
        return events

    def _start(self, kind: str, fields: dict[str, str]) -> str:
        self._open = kind
        return _block_start(self.index, {"type": kind, **fields})


async def sse_events(stream: TokenStream, reply: Reply) -> AsyncIterator[str]:
    """The events of one answer (see the module's doc). Closing this iterator closes the generation, which frees
    its slot at once."""
    blocks = _Blocks(reply.shows_thinking)
    prompt_known = False  # message_start said the prompt's counts: message_delta need not say them again
    started = False
    try:
        async with aclosing(stream):
            async for chunk in stream:
                if chunk.progress is not None:
                    continue
                if not started:
                    started, prompt_known = True, chunk.prompt_tokens is not None
                    yield event("message_start", {"type": "message_start", "message": _opening(reply, chunk)})
                for piece in blocks.add(chunk):
                    yield piece
                if chunk.finish_reason is None:
                    continue
                for piece in blocks.close():
                    yield piece
                index = blocks.index
                for call in reply.calls(chunk):
                    yield _block_start(index, tool_use_block(call, with_input=False))
                    partial = json.dumps(call.arguments, ensure_ascii=False)
                    yield _block_delta(index, {"type": "input_json_delta", "partial_json": partial})
                    yield _block_stop(index)
                    index += 1
                reason, sequence = reply.stop(chunk)
                usage = usage_body(chunk.usage)
                yield event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": {"output_tokens": usage["output_tokens"]} if prompt_known else usage,
                    },
                )
    except LocalInferError as exc:
        yield event("error", anthropic_error(exc)[1])
        return
    yield event("message_stop", {"type": "message_stop"})


def _opening(reply: Reply, first: TokenChunk) -> dict[str, Any]:
    """``message_start``'s message: no content yet, and the prompt's counts as the first chunk says them (0 where
    the backend does not say them: then ``message_delta`` does)."""
    prompt, cached = first.prompt_tokens or 0, first.cached_tokens or 0
    return {
        **reply.head([]),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage_body(Usage(prompt, 0, cached)),
    }
