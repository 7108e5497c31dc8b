"""OpenAI's Responses API answer, built from core token chunks as llama-server's ``to_json_oaicompat_resp`` and
``to_json_oaicompat_resp_stream`` build it (tools/server/server-task.cpp), with the fields OpenAI's own API adds.

A ``response`` object's ``output`` is, for a reasoning model that thought, a ``reasoning`` item (its thinking whole
as one ``reasoning_text`` content part, ``summary`` empty: none is written), then a ``message`` item holding one
``output_text`` part (when there is text), then one ``function_call`` item per call (``call_id``, ``name``,
``arguments`` as a JSON string). ``usage`` counts ``input_tokens`` (the whole prompt;
``input_tokens_details.cached_tokens`` those reused from the cache), ``output_tokens`` (thinking and answer) and
``total_tokens``; ``output_tokens_details.reasoning_tokens`` those thought in. An answer cut by
``max_output_tokens`` (or the context) is ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens``,
as OpenAI's API says it (llama-server says ``completed``), and so is its last item; every other one is
``completed``.

A stream is the API's named server-sent events, each with its ``type`` and a ``sequence_number`` counting from 0:
``response.created`` and ``response.in_progress``; for the thinking ``response.output_item.added``,
``response.content_part.added`` (a ``reasoning_text`` part), ``response.reasoning_text.delta``...,
``response.reasoning_text.done``, ``response.content_part.done``, ``response.output_item.done`` (the thinking
comes only first, engine/thinking_split.py, so its item is done before the answer's begins); for the text
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``...,
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``; per call
``response.output_item.added``, ``response.function_call_arguments.delta`` (the arguments whole),
``response.function_call_arguments.done``, ``response.output_item.done``; then ``response.completed`` (or
``response.incomplete``) with the whole response and, as llama-server adds it, its ``timings`` (llama-server's
whole set, as its native routes send it). llama.cpp's telemetry as llama-server sends it here: with
``timings_per_token`` each piece's delta carries the ``timings`` so far, and with ``return_progress`` the prompt's
progress comes in more ``response.in_progress`` events, each with its ``prompt_progress`` (``total``, ``cache``,
``processed``, ``time_ms``) and, with ``timings_per_token`` too, the timings so far. There is no ``[DONE]``, as
in OpenAI's and llama-server's streams. An error after the stream began ends it with ``response.failed``, the
response's ``error`` saying why.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from localinfer.app.server.core.streams import Collected
from localinfer.app.server.core.timings import progress_timings
from localinfer.app.server.errors import openai_error
from localinfer.app.server.llamacpp.responses import timings_body
from localinfer.errors import LocalInferError
from localinfer.types import FinishReason, TokenChunk, TokenStream, ToolCall, Usage


def usage_body(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


@dataclass(frozen=True)
class Reply:
    """One answer: its ids, when it was made, the model, the request's fields it repeats (``echoed``), and whether
    it may hold only one call (``parallel_tool_calls: false``)."""

    model: str
    echoed: dict[str, Any] = field(default_factory=dict)
    single_call: bool = False
    id: str = field(default_factory=lambda: f"resp_{uuid.uuid4().hex}")
    message_id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex}")
    reasoning_id: str = field(default_factory=lambda: f"rs_{uuid.uuid4().hex}")
    created_at: int = field(default_factory=lambda: int(time.time()))

    def calls(self, last: TokenChunk) -> tuple[ToolCall, ...]:
        return last.tool_calls[:1] if self.single_call else last.tool_calls

    def message_item(self, text: str, status: str) -> dict[str, Any]:
        content = [_text_part(text)] if status != "in_progress" else []
        return {"id": self.message_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def reasoning_item(self, text: str, status: str) -> dict[str, Any]:
        """The thinking as a ``reasoning`` item; in progress, its content is still empty."""
        content = [_reasoning_part(text)] if status != "in_progress" else []
        return {
            "id": self.reasoning_id,
            "type": "reasoning",
            "status": status,
            "summary": [],
            "content": content,
            "encrypted_content": None,  # nothing is encrypted: the thinking is the content
        }

    @staticmethod
    def call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
        """A call as a ``function_call`` item; in progress, its arguments are still empty."""
        arguments = json.dumps(call.arguments, ensure_ascii=False) if status != "in_progress" else ""
        return {
            "id": f"fc_{call.id.removeprefix('call_')}",
            "type": "function_call",
            "status": status,
            "arguments": arguments,
            "call_id": call.id,
            "name": call.name,
        }

    def response(
        self, status: str, output: list[dict[str, Any]], usage: Usage | None = None, error: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``response`` object in ``status`` (``in_progress``, ``completed``, ``incomplete`` or ``failed``)."""
        done = status in ("completed", "incomplete")
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if done else None,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            **self.echoed,
            "model": self.model,
            "output": output,
            "usage": usage_body(usage),
        }

    def answer(self, result: Collected) -> dict[str, Any]:
        """The whole response, as ``/v1/responses`` answers without ``stream``."""
        status = status_for(result.last.finish_reason)
        calls = [self.call_item(call) for call in self.calls(result.last)]
        output = []
        if result.reasoning:  # cut while thinking, it is the item left incomplete
            output.append(self.reasoning_item(result.reasoning, status if not (result.text or calls) else "completed"))
        if result.text:
            output.append(self.message_item(result.text, status))
        output += calls
        return self.response(status, output, result.last.usage)


def status_for(finish_reason: FinishReason | None) -> str:
    """A finished answer's status: ``incomplete`` when its length ran out, else ``completed``."""
    return "incomplete" if finish_reason == "length" else "completed"


class _Events:
    """Named server-sent events, numbered in the order they are sent."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self, name: str, **data: Any) -> str:
        body = {"type": name, "sequence_number": self._next, **data}
        self._next += 1
        return f"event: {name}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


async def sse_events(stream: TokenStream, reply: Reply, *, timings_per_token: bool = False) -> AsyncIterator[str]:
    """The events of one answer (see the module's doc). An item's ``output_index`` is the number of items done
    before it. Closing this iterator closes the generation, which frees its slot at once."""
    event = _Events()
    yield event("response.created", response=reply.response("in_progress", []))
    yield event("response.in_progress", response=reply.response("in_progress", []))
    output: list[dict[str, Any]] = []  # the items done
    thinking: list[str] = []
    text: list[str] = []
    thinking_open = False
    try:
        async with aclosing(stream):
            async for chunk in stream:
                if chunk.progress is not None:  # return_progress: how far the prompt is, as llama-server says it
                    yield event(
                        "response.in_progress",
                        response=reply.response("in_progress", []),
                        **_so_far(chunk, timings_per_token),
                        prompt_progress=dataclasses.asdict(chunk.progress),
                    )
                    continue
                done = chunk.finish_reason is not None
                timed = _so_far(chunk, timings_per_token) if not done else {}
                if chunk.reasoning and not text:  # thinking comes only first
                    if not thinking:
                        thinking_open = True
                        for piece in _reasoning_opened(event, reply, len(output)):
                            yield piece
                    thinking.append(chunk.reasoning)
                    at = {"item_id": reply.reasoning_id, "output_index": len(output), "content_index": 0}
                    shown = timed if not chunk.text else {}  # the chunk's last event carries its timings
                    yield event("response.reasoning_text.delta", **at, delta=chunk.reasoning, **shown)
                if thinking_open and (chunk.text or done):
                    thinking_open = False
                    cut = done and not chunk.text and not reply.calls(chunk)  # cut while thinking
                    item = reply.reasoning_item(
                        "".join(thinking), status_for(chunk.finish_reason) if cut else "completed"
                    )
                    for piece in _item_done(event, item, len(output), "reasoning_text"):
                        yield piece
                    output.append(item)
                at = {"item_id": reply.message_id, "output_index": len(output), "content_index": 0}
                if chunk.text:
                    if not text:
                        yield event(
                            "response.output_item.added",
                            output_index=len(output),
                            item=reply.message_item("", "in_progress"),
                        )
                        yield event("response.content_part.added", **at, part=_text_part(""))
                    text.append(chunk.text)
                    yield event("response.output_text.delta", **at, delta=chunk.text, logprobs=[], **timed)
                if not done:
                    continue
                status = status_for(chunk.finish_reason)
                if text:
                    item = reply.message_item("".join(text), status)
                    for piece in _item_done(event, item, len(output), "output_text"):
                        yield piece
                    output.append(item)
                for call in reply.calls(chunk):
                    for piece in _call_events(event, reply, call, len(output)):
                        yield piece
                    output.append(reply.call_item(call))
                timings = {"timings": timings_body(chunk.timings, chunk.usage)} if chunk.timings is not None else {}
                yield event(f"response.{status}", response=reply.response(status, output, chunk.usage), **timings)
    except LocalInferError as exc:
        error = openai_error(exc)[1]["error"]
        failure = {"code": error["code"] or error["type"], "message": error["message"]}
        yield event("response.failed", response=reply.response("failed", output, error=failure))


def _so_far(chunk: TokenChunk, timings_per_token: bool) -> dict[str, Any]:
    """``{"timings": ...}``, the timings so far, where the request asked for them (``timings_per_token``): on a
    piece's delta, and on the prompt's progress (its tokens computed so far); else nothing."""
    if chunk.progress is not None:
        return {"timings": timings_body(progress_timings(chunk.progress), None)} if timings_per_token else {}
    return {"timings": timings_body(chunk.timings, None)} if chunk.timings is not None else {}


def _reasoning_opened(event: _Events, reply: Reply, index: int) -> list[str]:
    """The thinking's item added, in progress, and its one ``reasoning_text`` part, empty."""
    at = {"item_id": reply.reasoning_id, "output_index": index, "content_index": 0}
    return [
        event("response.output_item.added", output_index=index, item=reply.reasoning_item("", "in_progress")),
        event("response.content_part.added", **at, part=_reasoning_part("")),
    ]


def _item_done(event: _Events, item: dict[str, Any], index: int, kind: str) -> list[str]:
    """A message's or the thinking's closing events: its text whole (``kind``: ``output_text`` or
    ``reasoning_text``), its part done, its item done."""
    part = item["content"][0]
    at = {"item_id": item["id"], "output_index": index, "content_index": 0}
    logprobs: dict[str, list[Any]] = {"logprobs": []} if kind == "output_text" else {}
    return [
        event(f"response.{kind}.done", **at, text=part["text"], **logprobs),
        event("response.content_part.done", **at, part=part),
        event("response.output_item.done", output_index=index, item=item),
    ]


def _call_events(event: _Events, reply: Reply, call: ToolCall, index: int) -> list[str]:
    """A call's events: its item added with empty arguments, the arguments whole in one delta, then done."""
    item = reply.call_item(call)
    at = {"item_id": item["id"], "output_index": index}
    return [
        event("response.output_item.added", output_index=index, item=reply.call_item(call, "in_progress")),
        event("response.function_call_arguments.delta", **at, delta=item["arguments"]),
        event("response.function_call_arguments.done", **at, arguments=item["arguments"]),
        event("response.output_item.done", output_index=index, item=item),
    ]
