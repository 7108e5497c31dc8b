"""What HttpClient's chat body leaves to the server: a sampling field at its default is left out, so that the model's
own parameters (a Modelfile's PARAMETER lines, filled in every dialect: tests/app/server/test_ollama_create.py and
tests/models/test_create.py) or the server's defaults (``serve --temp``) apply; a field set on purpose is sent."""

from __future__ import annotations

import dataclasses

from localinfer.client.chat_body import SENT_SAMPLING, chat_body
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams

MESSAGES = (ChatMessage("user", "Hi"),)


def test_sampling_fields_at_their_defaults_are_left_to_the_model_and_the_server() -> None:
    body = chat_body(ChatRequest("m", MESSAGES))
    assert not set(SENT_SAMPLING) & set(body)


def test_a_sampling_field_set_to_another_value_is_sent() -> None:
    options = GenerationOptions(sampling=SamplingParams(temperature=0.0, top_k=1))
    body = chat_body(ChatRequest("m", MESSAGES, options))
    assert (body["temperature"], body["top_k"]) == (0.0, 1)
    assert "top_p" not in body


def test_a_field_set_on_purpose_is_sent_at_its_default_too() -> None:
    request = ChatRequest("m", MESSAGES, explicit=frozenset({"temperature"}))
    assert chat_body(request)["temperature"] == SamplingParams().temperature
    assert "top_p" not in chat_body(dataclasses.replace(request, explicit=frozenset()))
