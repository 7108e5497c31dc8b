"""Ollama wire models: request bodies as Ollama's clients send them.

Unknown fields are accepted and ignored, as Ollama does. A model is named by ``model``; the legacy ``name``
that older clients send is accepted too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, ValidationError

from localinfer.app.server.limits import parse_json
from localinfer.errors import InvalidRequest


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ModelBody(_Wire):
    """A body that names one model."""

    model: str | None = None
    name: str | None = None  # the field's name before Ollama 0.4

    def target(self) -> str:
        """The model named; raises InvalidRequest when there is none."""
        model = (self.model or self.name or "").strip()
        if not model:
            raise InvalidRequest("model is required", param="model")
        return model


class PullBody(ModelBody):
    stream: bool = True
    insecure: bool = False  # accepted, ignored: localinfer pulls over HTTPS from the Hub, or from a local file


class DeleteBody(ModelBody):
    """``DELETE /api/delete``: only the model's name."""


BodyT = TypeVar("BodyT", bound=BaseModel)


def json_body(model: type[BodyT]) -> Callable[[Request], Awaitable[BodyT]]:
    """A dependency reading the body as JSON whatever its Content-Type: Ollama's own docs send JSON with
    ``curl -d``, which labels it a form, and Ollama reads it anyway."""

    async def parse(request: Request) -> BodyT:
        raw = await request.body()
        try:
            data = parse_json(raw) if raw.strip() else {}
        except ValueError as exc:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "invalid JSON"}]) from exc
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc

    return parse
