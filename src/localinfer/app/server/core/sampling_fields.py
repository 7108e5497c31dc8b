"""The sampling fields the OpenAI, Ollama and llama.cpp dialects take, declared once, and their translation into the
core's ``SamplingParams``.

Declared as llama-server declares them (its names, defaults and bounds: it bounds neither the temperature nor the
penalties). A dialect whose own API documents another default or range for a field redeclares that field in its
wire model, and only that: OpenAI's temperature (at most 2), Ollama's
``top_p``, ``min_p`` and ``repeat_penalty`` defaults. OpenAI's range for the penalties, which Ollama keeps too, is
``BoundedPenalties``. The seed stays each dialect's: each spells "random" its own
way.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from localinfer.app.server.core.defaults import default_temperature
from localinfer.app.server.core.logit_bias import LogitBias
from localinfer.types import SamplingParams


class SamplingFields(BaseModel):
    """A base of a dialect's body: the sampling it asks for."""

    temperature: float = Field(default_factory=lambda: default_temperature(0.8), ge=0.0)
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    repeat_penalty: float = Field(1.0, gt=0.0)
    repeat_last_n: int = Field(64, ge=-1)  # -1: the whole context
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def sampling_params(self, *, seed: int | None, logit_bias: LogitBias = ()) -> SamplingParams:
        """The sampling these fields ask for, with ``seed`` (None: a random one) and ``logit_bias``."""
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=self.repeat_last_n,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=seed,
            logit_bias=logit_bias,
        )


class BoundedPenalties(SamplingFields):
    """The sampling fields with the penalties in OpenAI's range, -2 to 2 (Ollama's too)."""

    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
