"""OpenAI's Responses API answer, built from core token chunks as llama-server's ``to_json_oaicompat_resp`` and
``to_json_oaicompat_resp_stream`` build it (tools/server/server-task.cpp), with the fields OpenAI's own API adds.

A ``response`` object's ``output`` is a ``message`` item holding one ``output_text`` part (when there is text),
then one ``function_call`` item per call (``call_id``, ``name``, ``arguments`` as a JSON string). ``usage`` counts
``input_tokens`` (the whole prompt; ``input_tokens_details.cached_tokens`` those reused from the cache),
``output_tokens`` and ``total_tokens``. An answer cut by ``max_output_tokens`` (or the context) is ``incomplete``
with ``incomplete_details.reason`` ``max_output_tokens``, as OpenAI's API says it (llama-server says
``completed``); every other one is ``completed``.

A stream is the API's named server-sent events, each with its ``type`` and a ``sequence_number`` counting from 0:
``response.created`` and ``response.in_progress``; for the text ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; per call ``response.output_item.added``,
``response.function_call_arguments.delta`` (the arguments whole), ``response.function_call_arguments.done``,
``response.output_item.done``; then ``response.completed`` (or ``response.incomplete``) with the whole response
and, as llama-server adds it, its ``timings`` (llama-server's whole set, as its native routes send it). There is
no ``[DONE]``, as in OpenAI's and llama-server's streams. An error after the stream began ends it with
``response.failed``, the response's ``error`` saying why.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from localinfer.app.server.core.streams import Collected
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
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


@dataclass(frozen=True)
class Reply:
    """One answer: its ids, when it was made, the model, the request's fields it repeats (``echoed``), and whether
    it may hold only one call (``parallel_tool_calls: false``)."""

    model: str
    echoed: dict[str, Any] = field(default_factory=dict)
    single_call: bool = False
    id: str = field(default_factory=lambda: f"resp_{uuid.uuid4().hex}")
    message_id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex}")
    created_at: int = field(default_factory=lambda: int(time.time()))

    def calls(self, last: TokenChunk) -> tuple[ToolCall, ...]:
        return last.tool_calls[:1] if self.single_call else last.tool_calls

    def message_item(self, text: str, status: str) -> dict[str, Any]:
        content = [_text_part(text)] if status != "in_progress" else []
        return {"id": self.message_id, "type": "message", "status": status, "role": "assistant", "content": content}

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
        output = [self.message_item(result.text, status)] if result.text else []
        output += [self.call_item(call) for call in self.calls(result.last)]
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


async def sse_events(stream: TokenStream, reply: Reply) -> AsyncIterator[str]:
    """The events of one answer (see the module's doc). Closing this iterator closes the generation, which frees
    its slot at once."""
    event = _Events()
    yield event("response.created", response=reply.response("in_progress", []))
    yield event("response.in_progress", response=reply.response("in_progress", []))
    output: list[dict[str, Any]] = []
    text: list[str] = []
    at = {"item_id": reply.message_id, "output_index": 0}
    opening = reply.message_item("", "in_progress")
    try:
        async with aclosing(stream):
            async for chunk in stream:
                if chunk.text:
                    if not text:
                        yield event("response.output_item.added", output_index=0, item=opening)
                        yield event("response.content_part.added", **at, content_index=0, part=_text_part(""))
                    text.append(chunk.text)
                    yield event("response.output_text.delta", **at, content_index=0, delta=chunk.text, logprobs=[])
                if chunk.finish_reason is None:
                    continue
                status = status_for(chunk.finish_reason)
                if text:
                    item = reply.message_item("".join(text), status)
                    part = item["content"][0]
                    yield event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
                    yield event("response.content_part.done", **at, content_index=0, part=part)
                    yield event("response.output_item.done", output_index=0, item=item)
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
