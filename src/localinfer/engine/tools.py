"""Function calling: tools into the prompt, tool calls out of the generated text.

A chat template that knows tools (its source uses ``tools``: Qwen, Hermes, Llama 3.1+, Mistral...) renders them
itself, with the assistant's earlier calls and the tools' answers. A template that does not gets the tools
described in a system turn in the Hermes layout (calls written as ``<tool_call>{"name", "arguments"}</tool_call>``),
earlier calls written back that way, and tool answers as ``<tool_response>`` user turns.

The generated text is read for calls in the layouts models are tuned on: Hermes / Qwen ``<tool_call>`` blocks,
Mistral's ``[TOOL_CALLS]`` list, and a whole reply that is one JSON object with ``name`` and ``arguments`` (or
Llama 3's ``parameters``). While text that may become a call streams, it is held back; a reply that turns out not
to be a call is sent as text after all. When a call is required (``tool_choice`` ``required`` or a function's
name) the output is constrained to such a JSON object by the same engine as ``response_format``, so it always
parses.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from localinfer.errors import InvalidRequest
from localinfer.types import (
    ChatMessage,
    GenerationOptions,
    ResponseFormat,
    ThinkingMarkers,
    TokenChunk,
    TokenStream,
    Tool,
    ToolCall,
)

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
MISTRAL_MARKER = "[TOOL_CALLS]"
MARKERS = (HERMES_OPEN, MISTRAL_MARKER)

TOOLS_PREAMBLE = (
    "You can call functions to help with the user's request. Their signatures, as JSON, are between <tools> and "
    "</tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call one, reply with a JSON object naming it and giving its arguments, between <tool_call> and "
    '</tool_call>, for example:\n<tool_call>\n{{"name": "function_name", "arguments": {{"argument": "value"}}}}\n'
    "</tool_call>\nAnswer in plain text when no function is needed."
)


def openai_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools as chat templates expect them: OpenAI's ``{"type": "function", "function": {...}}``."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def template_message(message: ChatMessage, markers: ThinkingMarkers | None = None) -> dict[str, Any]:
    """A message as a tool-aware chat template reads it (calls with their arguments as objects); for a harmony
    model (``markers``), earlier thinking as ``thinking``, as gpt-oss's template reads it (and llama-server gives
    it), without the content of a turn that called tools."""
    rendered: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        rendered["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        rendered["name"] = message.name
    if message.reasoning is not None:  # a reasoning model's earlier thinking, where its template keeps it
        rendered["reasoning_content"] = message.reasoning
        if markers is not None and markers.harmony:
            rendered["thinking"] = message.reasoning
            if message.tool_calls:  # gpt-oss's template refuses a call's turn with both
                del rendered["content"]
    return rendered


def described_tools(messages: Sequence[ChatMessage], tools: Sequence[Tool]) -> tuple[ChatMessage, ...]:
    """``messages`` for a template that knows no tools: the tools (if any) described in the system turn (added,
    or put before the system text there is), calls written as ``<tool_call>`` blocks, tool answers as user
    turns."""
    out: list[ChatMessage] = []
    for message in messages:
        if message.role == "tool":
            out.append(ChatMessage("user", f"<tool_response>\n{message.content}\n</tool_response>"))
        elif message.tool_calls:
            calls = "\n".join(
                f"{HERMES_OPEN}\n{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}\n"
                f"{HERMES_CLOSE}"
                for c in message.tool_calls
            )
            out.append(ChatMessage(message.role, f"{message.content}\n{calls}".strip()))
        else:
            out.append(ChatMessage(message.role, message.content))
    if not tools:
        return tuple(out)
    listing = "\n".join(json.dumps(entry, ensure_ascii=False) for entry in openai_tools(tools))
    preamble = TOOLS_PREAMBLE.format(tools=listing)
    if out and out[0].role == "system":
        return (ChatMessage("system", f"{preamble}\n\n{out[0].content}"), *out[1:])
    return (ChatMessage("system", preamble), *out)


def required_call(options: GenerationOptions, tools: Sequence[Tool], choice: str) -> ResponseFormat:
    """The output constraint for a call that must be made: one JSON object ``{"name", "arguments"}`` for one of
    ``tools`` (``required``) or for the function ``choice`` names. Raises InvalidRequest for an unknown name, or
    when the request also asks for a ``response_format`` (the two constraints cannot both hold)."""
    if options.response_format.type != "text":
        raise InvalidRequest("a response_format cannot be combined with a required tool call", param="response_format")
    chosen = list(tools) if choice == "required" else [t for t in tools if t.name == choice]
    if not chosen:
        raise InvalidRequest(f"tool_choice names '{choice}', which is not among the tools", param="tool_choice")
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters or {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in chosen
    ]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return ResponseFormat("json_schema", schema)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCallReader:
    """Reads a reply as it streams: ``feed`` returns the text that is surely not part of a call (to send now);
    ``finish`` returns the text still held back and the calls found. ``names``: the functions that exist; a call
    to another name is left as text."""

    names: frozenset[str]
    _text: str = ""
    _sent: int = 0

    def feed(self, piece: str) -> str:
        self._text += piece
        safe = self._safe_end()
        out, self._sent = self._text[self._sent : safe], max(self._sent, safe)
        return out

    def finish(self) -> tuple[str, tuple[ToolCall, ...]]:
        held = self._text[self._sent :]
        calls = self._calls(held)
        if not calls:
            return held, ()
        before = held[: _first_marker(held) or 0]
        return (before if before.strip() else ""), calls  # spaces before a call are not an answer

    def _safe_end(self) -> int:
        """Where the text may still turn into a call: from the first marker, from a reply that began with ``{``,
        or from a tail that could be the start of a marker."""
        text = self._text
        if not text.strip() or text.lstrip().startswith("{"):  # a call may yet come: not even its spaces are sent
            return self._sent
        marker = _first_marker(text)
        if marker is not None:
            return marker if text[:marker].strip() else self._sent
        for length in range(min(len(text), max(len(m) for m in MARKERS)), 0, -1):
            if any(m.startswith(text[-length:]) for m in MARKERS):
                return len(text) - length
        return len(text)

    def _calls(self, text: str) -> tuple[ToolCall, ...]:
        found: list[dict[str, Any]] = []
        if HERMES_OPEN in text:
            for block in text.split(HERMES_OPEN)[1:]:
                found += _objects(block.split(HERMES_CLOSE)[0])
        elif MISTRAL_MARKER in text:
            found = _objects(text.split(MISTRAL_MARKER, 1)[1])
        elif text.lstrip().startswith("{"):
            found = _objects(text)
        calls = []
        for item in found:
            name = item.get("name")
            arguments = item.get("arguments", item.get("parameters", {}))
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    return ()
            if not isinstance(name, str) or name not in self.names or not isinstance(arguments, dict):
                return ()
            calls.append(ToolCall(new_call_id(), name, arguments))
        return tuple(calls)


def _first_marker(text: str) -> int | None:
    found = [i for i in (text.find(m) for m in MARKERS) if i >= 0]
    return min(found) if found else None


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON object, or list of objects, that ``text`` holds (with spaces around it); [] when it holds other
    text too or does not parse."""
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return []
    items = value if isinstance(value, list) else [value]
    return items if all(isinstance(item, dict) for item in items) else []


async def read_tool_calls(chunks: TokenStream, tools: Sequence[Tool]) -> TokenStream:
    """``chunks`` with the tool calls taken out of the text: text that may be a call is held back until it is
    known; the last chunk carries the calls found (``finish_reason`` ``tool_calls``) or the held text."""
    reader = ToolCallReader(frozenset(t.name for t in tools))
    async with aclosing(chunks):
        async for chunk in chunks:
            text = reader.feed(chunk.text)  # the answer only: a reasoning model's thinking is never read for calls
            if chunk.finish_reason is None:
                if text or chunk.reasoning:
                    yield TokenChunk(text, reasoning=chunk.reasoning)
                continue
            held, calls = reader.finish()
            calls = chunk.tool_calls + calls  # a harmony model's, read from its messages already
            reason = "tool_calls" if calls else chunk.finish_reason
            yield dataclasses.replace(chunk, text=text + held, finish_reason=reason, tool_calls=calls)
