"""The sampling fields declared once (app/server/core/sampling_fields.py): each dialect's body turns them into the
same core sampling, with its own defaults and ranges where its API documents others."""

from __future__ import annotations

import pydantic
import pytest

from localinfer.app.server.llamacpp.wire import CompletionBody as LlamaCppBody
from localinfer.app.server.ollama.wire import Options as OllamaOptions
from localinfer.app.server.openai.wire import CompletionBody as OpenAIBody
from localinfer.types import ResponseFormat, SamplingParams

GIVEN = {
    "temperature": 0.5,
    "top_k": 7,
    "top_p": 0.5,
    "min_p": 0.1,
    "repeat_penalty": 1.2,
    "repeat_last_n": -1,
    "presence_penalty": 0.3,
    "frequency_penalty": -0.4,
    "seed": 9,
}


def openai(**fields: object) -> SamplingParams:
    return OpenAIBody.model_validate({"prompt": "x", **fields})._options(None, ResponseFormat()).sampling


def llamacpp(**fields: object) -> SamplingParams:
    return LlamaCppBody.model_validate({"prompt": "x", **fields}).options().sampling


def ollama(**fields: object) -> SamplingParams:
    return OllamaOptions.model_validate(fields).to_core(ResponseFormat()).sampling


def test_the_same_fields_give_the_same_sampling_in_every_dialect() -> None:
    expected = SamplingParams(**GIVEN)  # type: ignore[arg-type]
    assert openai(**GIVEN) == llamacpp(**GIVEN) == ollama(**GIVEN) == expected


def test_each_dialect_keeps_its_documented_defaults() -> None:
    llama_server = SamplingParams(temperature=0.8, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.0)
    assert openai() == llamacpp() == llama_server
    assert ollama() == SamplingParams(temperature=0.8, top_p=0.9, top_k=40, min_p=0.0, repeat_penalty=1.1)


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
def test_openai_and_ollama_bound_the_penalties_as_openai_does_and_llama_cpp_does_not(field: str) -> None:
    for bounded in (openai, ollama):
        with pytest.raises(pydantic.ValidationError):
            bounded(**{field: 2.5})
    assert getattr(llamacpp(**{field: 2.5}), field) == 2.5


def test_openai_bounds_the_temperature_at_2_and_llama_cpp_does_not() -> None:
    with pytest.raises(pydantic.ValidationError):
        openai(temperature=2.5)
    assert llamacpp(temperature=2.5).temperature == ollama(temperature=2.5).temperature == 2.5
