"""Function calling over HTTP for ``HttpClient``: a request's tools and earlier calls in OpenAI's chat fields, and
the streamed ``tool_calls`` deltas put back together into ``ToolCall``s (argument fragments concatenated by index,
as OpenAI's SDKs do)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from localinfer.types import ChatMessage, ChatRequest, ToolCall


def tool_fields(request: ChatRequest) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` in OpenAI's shape; nothing when the request offers no tools."""
    if not request.tools:
        return {}
    choice: Any = request.tool_choice
    if choice not in ("auto", "none", "required"):
        choice = {"type": "function", "function": {"name": choice}}
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in request.tools
    ]
    return {"tools": tools, "tool_choice": choice}


def message_tool_fields(message: ChatMessage) -> dict[str, Any]:
    """An assistant turn's calls (arguments as a JSON string), a tool turn's call id and function name."""
    body: dict[str, Any] = {}
    if message.tool_calls:
        body["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        body["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role == "tool":
        body["name"] = message.name
    return body


@dataclass
class ToolCallDeltas:
    """The ``tool_calls`` deltas of one streamed choice, by index."""

    _parts: dict[int, dict[str, str]] = field(default_factory=dict)

    def feed(self, deltas: Any) -> None:
        for delta in deltas or ():
            part = self._parts.setdefault(int(delta.get("index", len(self._parts))), {"id": "", "name": "", "args": ""})
            part["id"] = delta.get("id") or part["id"]
            function = delta.get("function") or {}
            part["name"] += function.get("name") or ""
            part["args"] += function.get("arguments") or ""

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls, in index order; arguments that are not a JSON object are given as ``{}``."""
        calls = []
        for _, part in sorted(self._parts.items()):
            try:
                arguments = json.loads(part["args"]) if part["args"].strip() else {}
            except json.JSONDecodeError:
                arguments = {}
            calls.append(ToolCall(part["id"], part["name"], arguments if isinstance(arguments, dict) else {}))
        return tuple(calls)
