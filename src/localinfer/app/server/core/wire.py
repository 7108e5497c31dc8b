"""The base of every client body model: unknown fields ignored, and a null field read as an absent one.

Clients send ``null`` for what they leave unset: Zed's Ollama chat sends ``"options": {"temperature": null,
"top_p": null, ...}``, OpenAI SDKs in other languages send ``"stop": null``. Ollama and OpenAI read those as the
default, and so does every body here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class ClientBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data
