"""OpenAI's function-calling fields: ``tools``, ``tool_choice``, an assistant's ``tool_calls`` and ``tool`` turns,
as clients send them (Cline, Roo, aider, the openai SDK), translated into core types here and nowhere else."""

from __future__ import annotations

import json
from typing import Any, Literal

from localinfer.app.server.core.tools import MAX_TOOLS, ToolWire
from localinfer.app.server.core.wire import ClientBody
from localinfer.errors import InvalidRequest
from localinfer.types import Tool, ToolCall, ToolChoice


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class CalledFunctionWire(_Wire):
    name: str
    arguments: str | dict[str, Any] = "{}"  # a JSON string in OpenAI's shape; an object is taken too


class ToolCallWire(_Wire):
    id: str = ""
    type: Literal["function"] = "function"
    function: CalledFunctionWire

    def to_core(self, index: int) -> ToolCall:
        arguments = self.function.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                raise InvalidRequest(
                    "a tool call's arguments must be a JSON object", param=f"messages.tool_calls.{index}"
                ) from None
        if not isinstance(arguments, dict):
            raise InvalidRequest("a tool call's arguments must be a JSON object", param=f"messages.tool_calls.{index}")
        return ToolCall(self.id or f"call_{index}", self.function.name, arguments)


class NamedChoice(_Wire):
    type: Literal["function"] = "function"
    function: CalledFunctionWire


def tools_to_core(
    tools: list[ToolWire] | None, choice: str | NamedChoice | None
) -> tuple[tuple[Tool, ...], ToolChoice]:
    """The tools and what the model must do with them: ``auto`` (default), ``none``, ``required``, or the name of
    one function. Raises InvalidRequest naming the field."""
    if tools is not None and len(tools) > MAX_TOOLS:
        raise InvalidRequest(f"at most {MAX_TOOLS} tools are allowed", param="tools")
    core = tuple(t.to_core() for t in tools or ())
    if isinstance(choice, NamedChoice):
        named = choice.function.name
        if named not in {t.name for t in core}:
            raise InvalidRequest(f"tool_choice names '{named}', which is not among the tools", param="tool_choice")
        return core, named
    chosen = choice or "auto"
    if chosen not in ("auto", "none", "required"):
        raise InvalidRequest("tool_choice must be auto, none, required or a named function", param="tool_choice")
    if chosen == "required" and not core:
        raise InvalidRequest("tool_choice is required but no tools are given", param="tool_choice")
    return core, chosen


def tool_calls_body(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """The calls as OpenAI answers them: arguments as a JSON string."""
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]
