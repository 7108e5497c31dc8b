"""Ollama's /api/chat, /api/generate and /api/show on a real server with the real SmolLM2, driven by the official
``ollama`` client and by request bodies copied from Continue's source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import ollama
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server
from tests.capital_answer import CAPITAL_SCHEMA, capital_in

pytestmark = pytest.mark.model

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
GREEDY = {"temperature": 0, "num_predict": 16}


@pytest.fixture(scope="module")
def client(smollm2_server: Server) -> Iterator[ollama.Client]:
    c = ollama.Client(host=smollm2_server.url, timeout=120)
    try:
        yield c
    finally:
        c.close()  # type: ignore[no-untyped-call]


def post(server: Server, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}{path}", content=content, timeout=120)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def assert_final_counts(final: dict[str, Any], *, at_most: int) -> None:
    assert final["done"] is True
    assert final["done_reason"] in ("stop", "length")
    assert final["prompt_eval_count"] > 10  # the chat template's system prompt and turn markers
    assert 0 < final["eval_count"] <= at_most
    assert final["eval_duration"] > 0 and final["prompt_eval_duration"] > 0
    assert final["total_duration"] >= final["eval_duration"] + final["prompt_eval_duration"]
    assert final["load_duration"] >= 0


def test_chat_answers_in_ollamas_shape_with_counts_in_nanoseconds(client: ollama.Client, model_name: str) -> None:
    # the answer held to a choice of capitals as JSON (tests/capital_answer.py): free greedy text differs between CPUs
    reply = client.chat(model=model_name, messages=QUESTION, options=GREEDY, format=CAPITAL_SCHEMA)
    assert reply.message.role == "assistant"
    assert capital_in(reply.message.content) == "Paris"
    assert_final_counts(reply.model_dump(), at_most=16)
    assert reply.model == model_name


def test_streamed_chat_pieces_add_up_to_the_whole_answer(client: ollama.Client, model_name: str) -> None:
    whole = client.chat(model=model_name, messages=QUESTION, options=GREEDY).message.content
    parts = list(client.chat(model=model_name, messages=QUESTION, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content or "" for p in parts) == whole
    assert_final_counts(parts[-1].model_dump(), at_most=16)


def test_chat_streams_by_default_as_ndjson(smollm2_server: Server, model_name: str) -> None:
    reply = post(smollm2_server, "/api/chat", {"model": model_name, "messages": QUESTION, "options": GREEDY})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/x-ndjson")
    objects = lines(reply)
    assert len(objects) > 2
    assert all(set(o) == {"model", "created_at", "message", "done"} for o in objects[:-1])
    assert objects[-1]["created_at"].endswith("Z")


def test_continues_chat_request_is_served(smollm2_server: Server, model_name: str) -> None:
    # the body Continue's Ollama provider sends (core/llm/llms/Ollama.ts, _streamChat and _getModelFileParams, at
    # continuedev/continue 0108be5e): every option it sets, num_ctx larger than the loaded context, keep_alive in
    # seconds, num_thread and use_mmap (runtime settings, ignored)
    body = {
        "model": model_name,
        "messages": [
            {"role": "system", "content": "You are a helpful coding assistant."},
            {"role": "user", "content": "Write a Python function that adds two numbers."},
        ],
        "options": {
            "temperature": 0,
            "top_p": 0.9,
            "top_k": 40,
            "num_predict": 24,
            "stop": ["<|im_end|>"],
            "num_ctx": 8192,
            "num_thread": 2,
            "use_mmap": True,
            "min_p": 0.05,
        },
        "keep_alive": 1800,
        "stream": True,
    }
    objects = lines(post(smollm2_server, "/api/chat", body))
    text = "".join(o["message"]["content"] for o in objects)
    # the greedy answer to the same chat (the same server's, so the same on any CPU), streamed
    plain = {"temperature": 0, "num_predict": 24, "stop": ["<|im_end|>"]}
    greedy = post(smollm2_server, "/api/chat", {**body, "options": plain, "stream": False}).json()
    assert text == greedy["message"]["content"] and text.strip()
    assert objects[-1]["eval_count"] <= 24


def test_generate_goes_through_the_chat_template_unless_raw(
    client: ollama.Client, smollm2_server: Server, model_name: str
) -> None:
    templated = client.generate(model=model_name, prompt="The capital of France is", options=GREEDY)
    raw = client.generate(model=model_name, prompt="The capital of France is", raw=True, options=GREEDY)
    assert templated.response and raw.response
    assert raw.prompt_eval_count is not None and templated.prompt_eval_count is not None
    assert raw.prompt_eval_count <= 8 < templated.prompt_eval_count  # the template adds the turn markers
    # raw, the prompt is continued as it is: the plain completion of it (the same server's greedy text, with
    # Ollama's default repeat penalty)
    plain = {"model": model_name, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}
    ollamas = {"repeat_penalty": 1.1, "repeat_last_n": 64}
    completion = post(smollm2_server, "/v1/completions", {**plain, **ollamas}).json()
    assert raw.response == completion["choices"][0]["text"]


def test_generate_with_a_system_prompt_is_the_chat_of_that_system_and_user_message(
    client: ollama.Client, model_name: str
) -> None:
    system = "Always answer in French."
    generated = client.generate(model=model_name, prompt="Hi", system=system, options=GREEDY)
    chatted = client.chat(
        model=model_name,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
        options=GREEDY,
    )
    assert generated.prompt_eval_count == chatted.prompt_eval_count
    assert generated.response == chatted.message.content
    plain = client.generate(model=model_name, prompt="Hi", options=GREEDY)
    assert plain.prompt_eval_count != generated.prompt_eval_count  # SmolLM2's template has its own default system


def test_format_json_and_a_schema_constrain_the_answer(client: ollama.Client, model_name: str) -> None:
    as_json = client.chat(
        model=model_name,
        messages=[{"role": "user", "content": "Give me a JSON object describing a cat."}],
        format="json",
        options={"temperature": 0, "num_predict": 64},
    )
    if as_json.done_reason == "stop":
        assert isinstance(json.loads(as_json.message.content or ""), dict)
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    }
    answer = client.chat(
        model=model_name,
        messages=[{"role": "user", "content": "Which city is the capital of France?"}],
        format=schema,
        options={"temperature": 0, "num_predict": 48},
    )
    assert answer.done_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content or ""), schema)


def test_no_messages_loads_the_model(smollm2_server: Server, model_name: str) -> None:
    for path, field in (("/api/chat", "message"), ("/api/generate", "response")):
        reply = post(smollm2_server, path, {"model": model_name})
        assert reply.status_code == 200
        body = reply.json()
        assert (body["done"], body["done_reason"]) == (True, "load")
        assert field in body


def test_a_request_naming_no_model_uses_the_served_one_and_latest_is_the_untagged_name(
    smollm2_server: Server, model_name: str
) -> None:
    unnamed = post(smollm2_server, "/api/chat", {"messages": QUESTION, "options": GREEDY, "stream": False})
    assert unnamed.status_code == 200, unnamed.text
    assert unnamed.json()["model"] == model_name
    tagged = post(
        smollm2_server,
        "/api/generate",
        {"model": f"{model_name}:latest", "prompt": "Hi", "options": GREEDY, "stream": False},
    )
    assert tagged.status_code == 200, tagged.text
    assert tagged.json()["response"]


def test_show_describes_the_model_from_its_gguf(client: ollama.Client, model_name: str, smollm2: Manifest) -> None:
    shown = client.show(model_name)
    assert shown.details is not None and shown.details.format == "gguf"
    assert shown.details.family == "llama"
    info = dict(shown.modelinfo or {})
    assert info["general.architecture"] == "llama"
    assert info["llama.context_length"] == 8192
    assert info["general.parameter_count"] > 100_000_000
    assert info["tokenizer.ggml.tokens"] is None  # arrays are null without verbose, as in Ollama
    assert "<|im_start|>" in (shown.template or "")
    assert shown.capabilities == ["completion"]  # its template renders no tools; its file declares no FIM tokens
    assert ".Suffix" not in (shown.template or "")
    assert shown.parameters == "num_ctx 2048"  # what it is loaded with


def test_show_of_an_unknown_model_is_a_404_in_ollamas_shape(smollm2_server: Server) -> None:
    reply = post(smollm2_server, "/api/show", {"model": "no-such-model"})
    assert reply.status_code == 404
    assert reply.json()["error"].startswith("model 'no-such-model' not found")


BAD_CHATS: list[tuple[dict[str, Any], str]] = [
    ({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, "images"),
    ({"messages": QUESTION, "tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools"),
    ({"messages": QUESTION, "options": {"temperature": "hot"}}, "options.temperature"),
    ({"messages": QUESTION, "options": {"mirostat": 2}}, "mirostat"),
    ({"messages": QUESTION, "options": {"typical_p": 0.5}}, "typical_p"),
    ({"messages": QUESTION, "format": "xml"}, "format"),
    ({"messages": QUESTION, "options": {"stop": ["x"] * 17}}, "stop"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "role"),
    ({"messages": [{"role": "user", "content": "word " * 3000}]}, "context"),
]


@pytest.mark.parametrize(("body", "named"), BAD_CHATS, ids=[named for _, named in BAD_CHATS])
def test_bad_chat_bodies_are_400s_in_ollamas_shape(
    smollm2_server: Server, model_name: str, body: dict[str, Any], named: str
) -> None:
    reply = post(smollm2_server, "/api/chat", {"model": model_name, **body})
    assert reply.status_code == 400, reply.text
    assert set(reply.json()) == {"error"}
    assert named in reply.json()["error"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"prompt": "hi", "images": ["aGk="]}, "images"),
        ({"prompt": "hi", "template": "{{ .Prompt }}"}, "template"),
        ({"prompt": "hi", "context": [1, 2, 3]}, "context"),
        ({"prompt": 5}, "prompt"),
    ],
)
def test_bad_generate_bodies_are_400s_in_ollamas_shape(
    smollm2_server: Server, model_name: str, body: dict[str, Any], named: str
) -> None:
    reply = post(smollm2_server, "/api/generate", {"model": model_name, **body})
    assert reply.status_code == 400, reply.text
    assert named in reply.json()["error"]


def test_not_json_and_unknown_models_answer_in_ollamas_shape(smollm2_server: Server) -> None:
    broken = post(smollm2_server, "/api/chat", b"{not json")
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]
    missing = post(smollm2_server, "/api/generate", {"model": "nope", "prompt": "hi"})
    assert missing.status_code == 404 and missing.json()["error"].startswith("model 'nope' not found")
    assert httpx.get(f"{smollm2_server.url}/health").status_code == 200


def test_ps_answers_after_a_keep_alive_of_centuries(smollm2_server: Server, model_name: str) -> None:
    """A keep-alive past what a date can hold (a fuzzer's 1e30 seconds) is shown as kept for good, not a 500."""
    reply = post(smollm2_server, "/api/generate", {"model": model_name, "keep_alive": 1e30})
    assert reply.status_code == 200, reply.text
    ps = httpx.get(f"{smollm2_server.url}/api/ps", timeout=60)
    assert ps.status_code == 200, ps.text
    (running,) = [m for m in ps.json()["models"] if m["name"] in (model_name, f"{model_name}:latest")]
    assert running["expires_at"].startswith("21")  # a century ahead
