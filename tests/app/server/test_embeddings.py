"""/v1/embeddings, /api/embed and /api/embeddings on a real server with the real SmolLM2, driven by the official
``openai`` client (which asks for base64 by default and decodes it) and the official ``ollama`` client."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import ollama
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

N_EMBD = 576  # SmolLM2-135M's embedding length
CTX = 2048  # the session server's context
LONG = "word " * (CTX + 100)  # past the context


@pytest.fixture(scope="module")
def ollama_client(smollm2_server: Server) -> Iterator[ollama.Client]:
    c = ollama.Client(host=smollm2_server.url, timeout=120)
    try:
        yield c
    finally:
        c.close()  # type: ignore[no-untyped-call]


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=json.dumps(body).encode(), timeout=120)


def norm(vector: Sequence[float]) -> float:
    return math.sqrt(math.fsum(x * x for x in vector))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


def assert_openai_error(response: httpx.Response, param: str | None = None) -> None:
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


def assert_ollama_error(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]


# --- OpenAI ------------------------------------------------------------------------------------------------------


def test_openai_client_gets_equal_vectors_for_equal_texts_and_different_for_different(
    client: openai.OpenAI, model_name: str
) -> None:
    texts = ["def add(a, b): return a + b", "def add(a, b): return a + b", "The capital of France is Paris."]
    answer = client.embeddings.create(model=model_name, input=texts)  # base64 on the wire, decoded by the client
    vectors = [item.embedding for item in answer.data]
    assert [item.index for item in answer.data] == [0, 1, 2]
    assert all(len(v) == N_EMBD for v in vectors)
    assert vectors[0] == vectors[1]
    assert vectors[0] != vectors[2] and cosine(vectors[0], vectors[2]) < 0.99
    assert all(norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert answer.model == model_name
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 10


def test_a_list_gives_each_inputs_own_vector_in_order(client: openai.OpenAI, model_name: str) -> None:
    texts = ["red apples", "a sorting algorithm in Rust", "red apples and green pears", "x"]
    together = [d.embedding for d in client.embeddings.create(model=model_name, input=texts).data]
    alone = [client.embeddings.create(model=model_name, input=t).data[0].embedding for t in texts]
    assert together == alone


def test_base64_decodes_to_the_float_vector(smollm2_server: Server, model_name: str, client: openai.OpenAI) -> None:
    floats = post(smollm2_server, "/v1/embeddings", {"model": model_name, "input": "hello world"}).json()
    assert isinstance(floats["data"][0]["embedding"], list)
    decoded = client.embeddings.create(model=model_name, input="hello world").data[0].embedding
    assert decoded == pytest.approx(floats["data"][0]["embedding"], abs=0)  # float32 both ways, bit for bit
    assert floats["object"] == "list" and floats["data"][0]["object"] == "embedding"


def test_token_arrays_embed_as_their_text_and_usage_counts_them(
    smollm2_server: Server, client: openai.OpenAI, model_name: str
) -> None:
    tokens = httpx.post(f"{smollm2_server.url}/tokenize", json={"content": "hello world", "add_special": True}).json()[
        "tokens"
    ]
    by_text = client.embeddings.create(model=model_name, input="hello world")
    by_tokens = client.embeddings.create(model=model_name, input=tokens)
    assert by_tokens.data[0].embedding == by_text.data[0].embedding
    assert by_text.usage.prompt_tokens == by_tokens.usage.prompt_tokens == len(tokens)
    several = client.embeddings.create(model=model_name, input=[tokens, tokens[:1]])
    assert several.data[0].embedding == by_text.data[0].embedding
    assert several.usage.prompt_tokens == len(tokens) + 1


def test_a_request_naming_no_model_uses_the_default(smollm2_server: Server, model_name: str) -> None:
    answer = post(smollm2_server, "/v1/embeddings", {"input": "hello"})
    assert answer.status_code == 200 and answer.json()["model"] == model_name
    assert len(answer.json()["data"][0]["embedding"]) == N_EMBD


def test_dimensions_are_honoured_only_when_they_are_the_models(client: openai.OpenAI, model_name: str) -> None:
    same = client.embeddings.create(model=model_name, input="hello", dimensions=N_EMBD)
    assert len(same.data[0].embedding) == N_EMBD
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=model_name, input="hello", dimensions=256)
    assert refused.value.param == "dimensions"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": LONG}, "input"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["fine", ""]}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": [1, 10**9]}, "input"),
        ({"input": [-1]}, "input"),
        ({"input": 3}, "input"),
        ({"input": [1.5]}, "input"),
        ({}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": ["x"] * 2049}, "input"),
    ],
)
def test_bad_input_is_a_400_in_openais_shape_and_the_server_keeps_serving(
    smollm2_server: Server, model_name: str, body: dict[str, Any], param: str
) -> None:
    assert_openai_error(post(smollm2_server, "/v1/embeddings", {"model": model_name, **body}), param)
    assert post(smollm2_server, "/v1/embeddings", {"model": model_name, "input": "ok"}).status_code == 200


def test_an_unknown_model_is_a_404_in_openais_shape(smollm2_server: Server) -> None:
    answer = post(smollm2_server, "/v1/embeddings", {"model": "no-such-model", "input": "x"})
    assert answer.status_code == 404 and answer.json()["error"]["message"]


# --- Ollama ------------------------------------------------------------------------------------------------------


def test_ollama_embed_gives_normalised_vectors_of_the_models_length(
    ollama_client: ollama.Client, model_name: str
) -> None:
    answer = ollama_client.embed(model=model_name, input=["hello world", "hello world", "goodbye moon"])
    vectors = [list(v) for v in answer.embeddings]
    assert len(vectors) == 3 and all(len(v) == N_EMBD for v in vectors)
    assert vectors[0] == vectors[1] and vectors[0] != vectors[2]
    assert all(norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert answer.model == model_name
    assert answer.prompt_eval_count is not None and answer.prompt_eval_count >= 6
    assert answer.total_duration is not None and answer.load_duration is not None
    assert answer.total_duration >= answer.load_duration >= 0


def test_ollama_embed_equals_openais(ollama_client: ollama.Client, client: openai.OpenAI, model_name: str) -> None:
    by_ollama = list(ollama_client.embed(model=model_name, input="the same text").embeddings[0])
    by_openai = client.embeddings.create(model=model_name, input="the same text").data[0].embedding
    assert by_ollama == by_openai


def test_the_legacy_route_gives_the_raw_pooled_vector(ollama_client: ollama.Client, model_name: str) -> None:
    raw = list(ollama_client.embeddings(model=model_name, prompt="hello world").embedding)
    normalised = list(ollama_client.embed(model=model_name, input="hello world").embeddings[0])
    assert len(raw) == N_EMBD
    assert norm(raw) > 2.0  # not normalised, as Ollama's legacy route
    assert [x / norm(raw) for x in raw] == pytest.approx(normalised, abs=1e-6)


def test_ollama_truncates_past_the_context_by_default_and_refuses_when_asked_not_to(
    smollm2_server: Server, ollama_client: ollama.Client, model_name: str
) -> None:
    cut = ollama_client.embed(model=model_name, input=LONG)
    assert len(cut.embeddings[0]) == N_EMBD and cut.prompt_eval_count == CTX
    refused = post(smollm2_server, "/api/embed", {"model": model_name, "input": LONG, "truncate": False})
    assert_ollama_error(refused)
    assert refused.status_code == 400
    with pytest.raises(ollama.ResponseError):
        ollama_client.embed(model=model_name, input=LONG, truncate=False)


def test_ollama_dimensions_shorten_and_normalise_again(ollama_client: ollama.Client, model_name: str) -> None:
    whole = list(ollama_client.embed(model=model_name, input="hello").embeddings[0])
    short = list(ollama_client.embed(model=model_name, input="hello", dimensions=64).embeddings[0])
    assert len(short) == 64 and norm(short) == pytest.approx(1.0, abs=1e-6)
    assert short == pytest.approx([x / norm(whole[:64]) for x in whole[:64]], abs=1e-6)


def test_an_empty_ollama_request_loads_the_model_and_embeds_nothing(smollm2_server: Server, model_name: str) -> None:
    for body in ({"model": model_name}, {"model": model_name, "input": ""}, {"model": model_name, "input": []}):
        answer = post(smollm2_server, "/api/embed", body)
        assert answer.status_code == 200 and answer.json()["embeddings"] == []
    legacy = post(smollm2_server, "/api/embeddings", {"model": model_name, "prompt": ""})
    assert legacy.status_code == 200 and legacy.json() == {"embedding": []}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/embed", {"input": 3}),
        ("/api/embed", {"input": ["text", 3]}),
        ("/api/embed", {"input": ["fine", ""]}),
        ("/api/embed", {"input": "x", "truncate": "sometimes"}),
        ("/api/embed", {"input": "x", "dimensions": -1}),
        ("/api/embed", {"input": ["x"] * 2049}),
        ("/api/embeddings", {"prompt": ["a list"]}),
        ("/api/embeddings", {"prompt": 7}),
    ],
)
def test_bad_input_is_a_400_in_ollamas_shape_and_the_server_keeps_serving(
    smollm2_server: Server, model_name: str, path: str, body: dict[str, Any]
) -> None:
    assert_ollama_error(post(smollm2_server, path, {"model": model_name, **body}))
    assert post(smollm2_server, path, {"model": model_name, "input": "ok", "prompt": "ok"}).status_code == 200


def test_show_calls_a_model_stating_a_pooling_type_an_embedding_model(
    smollm2_embed: Manifest, ollama_client: ollama.Client, model_name: str
) -> None:
    embedding_model = ollama_client.show(smollm2_embed.name)
    assert embedding_model.capabilities is not None and "embedding" in embedding_model.capabilities
    assert "completion" not in embedding_model.capabilities  # as Ollama: an embedding model does not generate
    generative = ollama_client.show(model_name)
    assert generative.capabilities is not None
    assert "completion" in generative.capabilities and "embedding" not in generative.capabilities


def test_embedding_beside_a_streaming_chat_gives_the_same_vector_and_both_finish(
    client: openai.OpenAI, model_name: str
) -> None:
    alone = client.embeddings.create(model=model_name, input="embedded while a chat streams").data[0].embedding
    stream = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Count from one to fifty in words."}],
        max_tokens=48,
        temperature=0,
        stream=True,
    )
    pieces = []
    for chunk in stream:
        pieces.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
        if len(pieces) == 3:  # the chat is generating: embed now, beside it
            beside = client.embeddings.create(model=model_name, input="embedded while a chat streams")
            assert beside.data[0].embedding == alone
    assert len(pieces) > 3 and "".join(pieces).strip()
