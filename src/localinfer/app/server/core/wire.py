"""The base of every client body model: unknown fields ignored, and a null field read as an absent one.

Clients send ``null`` for what they leave unset: Zed's Ollama chat sends ``"options": {"temperature": null,
"top_p": null, ...}``, OpenAI SDKs in other languages send ``"stop": null``. Ollama and OpenAI read those as the
default, and so does every body here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from localinfer.config import parse_duration
from localinfer.errors import InvalidRequest


class ClientBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


def keep_alive_seconds(value: str | int | float | None) -> float | None:
    """A request's ``keep_alive`` (Ollama's: seconds as a number, or a duration such as ``"10m"``; negative keeps
    the model for good, 0 unloads it after the request) in seconds; None when not given. Raises InvalidRequest."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InvalidRequest(f"keep_alive: {exc}", param="keep_alive") from None
