"""The ``tools`` field as OpenAI and Ollama both send it: ``{"type": "function", "function": {name, description,
parameters}}``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from localinfer.app.server.core.wire import ClientBody
from localinfer.types import Tool

MAX_TOOLS = 128  # as OpenAI's limit: each tool's schema goes into the prompt and the constraint


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class FunctionWire(_Wire):
    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolWire(_Wire):
    type: Literal["function"] = "function"
    function: FunctionWire

    def to_core(self) -> Tool:
        parameters = self.function.parameters or {"type": "object", "properties": {}}
        return Tool(self.function.name, self.function.description, parameters)
