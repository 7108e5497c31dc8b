"""Ollama wire models: request bodies as Ollama's clients send them.

Unknown fields are accepted and ignored, as Ollama does. A model is named by ``model``; the legacy ``name``
that older clients send is accepted too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

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
