"""The ``tools`` field as OpenAI and Ollama both send it: ``{"type": "function", "function": {name, description,
parameters}}``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from localinfer.types import Tool

MAX_TOOLS = 128  # as OpenAI's limit: each tool's schema goes into the prompt and the constraint


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


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
