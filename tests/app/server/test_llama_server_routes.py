"""llama-server's routes that its users and clients reach without ``/v1``, and the ones it has beside OpenAI's:
``POST /chat/completions``, ``GET /models``, ``GET /v1/health``, the native ``POST /embeddings`` (and
``/embedding``), ``POST /apply-template`` and ``POST /chat/completions/input_tokens``. Each is asked of a real
``localinfer serve`` and, where llama-server answers with values, of llama-server on the same file, and the two
answers compared."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

CHAT: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]
}
TEXTS = ["The cat sat on the mat.", "A dog ran in the park."]
# every input shape llama-server's /v1/embeddings takes, in one list: a text, ids with text mixed in, a content
# object, a prompt_string object (ids and text mixed there too)
MIXED_INPUT: list[Any] = [
    TEXTS[0],
    [504, " sat", 997, " on"],
    {"content": [{"type": "text", "text": TEXTS[1]}]},
    {"prompt_string": [504, " ran"]},
]
PROMPT_OBJECT = {"prompt": {"prompt_string": "The capital of France is"}, "n_predict": 8, "temperature": 0}
PREFLIGHT = {
    "Origin": "http://localhost:5173",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type, authorization",
}


@pytest.fixture(scope="module")
def llama_server_answers(
    smollm2: Manifest, smollm2_embed: Manifest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """What llama-server answers, on SmolLM2 and on its embedding model; it runs only while it is asked, alone."""
    answers: dict[str, Any] = {}
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1") as url:
        answers["apply-template"] = httpx.post(f"{url}/apply-template", json=CHAT, timeout=120).json()
        answers["input_tokens"] = httpx.post(f"{url}/chat/completions/input_tokens", json=CHAT, timeout=120).json()
        answers["models"] = httpx.get(f"{url}/models", timeout=120).json()
        answers["v1/health"] = httpx.get(f"{url}/v1/health", timeout=120)
        answers["prompt_string"] = httpx.post(f"{url}/completion", json=PROMPT_OBJECT, timeout=120).json()
        answers["preflight"] = httpx.options(f"{url}/v1/chat/completions", headers=PREFLIGHT, timeout=120)
    log_dir = tmp_path_factory.mktemp("llama-server-embed")
    with llama_server(smollm2_embed.path, log_dir, "-c", "2048", "-np", "1", "--embeddings") as url:
        answers["embeddings"] = httpx.post(f"{url}/embeddings", json={"content": TEXTS}, timeout=120).json()
        answers["embeddings-input"] = httpx.post(f"{url}/embeddings", json={"input": TEXTS[0]}, timeout=120).json()
        answers["v1-mixed"] = httpx.post(f"{url}/v1/embeddings", json={"input": MIXED_INPUT}, timeout=120).json()
        answers["v1-one-mixed"] = httpx.post(f"{url}/v1/embeddings", json={"input": MIXED_INPUT[1]}, timeout=120).json()
    return answers


@pytest.fixture(scope="module")
def server(
    llama_server_answers: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """SmolLM2, started once llama-server is gone."""
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve"), "--ctx-size", "2048") as server:
        yield server


def test_the_openai_sdk_pointed_at_the_bare_address_chats_and_lists_models(server: Server, smollm2: Manifest) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)  # no /v1
    assert smollm2.name in [m.id for m in client.models.list()]
    reply = client.chat.completions.create(model=smollm2.name, messages=CHAT["messages"], max_tokens=4, temperature=0)
    assert reply.object == "chat.completion" and reply.choices[0].message.content
    streamed = client.chat.completions.create(
        model=smollm2.name, messages=CHAT["messages"], max_tokens=4, temperature=0, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text == reply.choices[0].message.content


def test_models_without_v1_lists_each_model_as_llama_server_does(
    server: Server, smollm2: Manifest, llama_server_answers: dict[str, Any]
) -> None:
    ours = httpx.get(f"{server.url}/models", timeout=30).json()
    theirs = llama_server_answers["models"]
    assert set(theirs) <= set(ours) and ours["object"] == "list"
    assert set(theirs["models"][0]) >= {"name", "model"} and set(theirs["data"][0]) >= {"id", "object"}
    assert smollm2.name in [m["name"] for m in ours["models"]] and smollm2.name in [m["id"] for m in ours["data"]]
    assert httpx.get(f"{server.url}/v1/models", timeout=30).json() == ours


def test_health_answers_under_v1_too(server: Server, llama_server_answers: dict[str, Any]) -> None:
    theirs = llama_server_answers["v1/health"]
    ours = httpx.get(f"{server.url}/v1/health", timeout=30)
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["status"] == theirs.json()["status"] == "ok"


def test_a_preflight_from_a_local_page_is_answered_200_as_llama_server_answers(
    server: Server, llama_server_answers: dict[str, Any]
) -> None:
    theirs = llama_server_answers["preflight"]
    ours = httpx.options(f"{server.url}/v1/chat/completions", headers=PREFLIGHT, timeout=30)
    assert ours.status_code == theirs.status_code == 200
    assert ours.headers["access-control-allow-origin"] == PREFLIGHT["Origin"]
    assert "POST" in ours.headers["access-control-allow-methods"]


def test_apply_template_renders_the_prompt_llama_server_renders(
    server: Server, llama_server_answers: dict[str, Any]
) -> None:
    ours = httpx.post(f"{server.url}/apply-template", json=CHAT, timeout=120)
    assert ours.status_code == 200, ours.text
    assert ours.json() == llama_server_answers["apply-template"]
    assert ours.json()["prompt"].endswith("<|im_start|>assistant\n")


def test_input_tokens_counts_the_chat_prompt_as_llama_server_does(
    server: Server, llama_server_answers: dict[str, Any]
) -> None:
    theirs = llama_server_answers["input_tokens"]
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        ours = httpx.post(f"{server.url}{path}", json=CHAT, timeout=120)
        assert ours.status_code == 200, ours.text
        assert ours.json() == theirs and theirs["input_tokens"] > 20


def test_apply_template_with_a_bad_body_is_a_400_in_llama_servers_shape(server: Server) -> None:
    reply = httpx.post(f"{server.url}/apply-template", json={"messages": "hello"}, timeout=30)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == 400 and reply.json()["error"]["type"] == "invalid_request_error"


@pytest.fixture(scope="module")
def embed_server(
    llama_server_answers: dict[str, Any],
    smollm2_embed: Manifest,
    test_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    with serving(smollm2_embed.name, test_home, tmp_path_factory.mktemp("embed"), "--ctx-size", "2048") as server:
        yield server


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-4) for x, y in zip(a, b, strict=True))


def test_native_embeddings_answer_in_llama_servers_shape_with_its_vectors(
    embed_server: Server, llama_server_answers: dict[str, Any]
) -> None:
    theirs = llama_server_answers["embeddings"]
    for path in ("/embeddings", "/embedding"):
        ours = httpx.post(f"{embed_server.url}{path}", json={"content": TEXTS}, timeout=120)
        assert ours.status_code == 200, ours.text
        body = ours.json()
        assert [e["index"] for e in body] == [e["index"] for e in theirs] == [0, 1]
        assert all(len(e["embedding"]) == 1 for e in body)  # one pooled row per input, as llama-server's
        for mine, reference in zip(body, theirs, strict=True):
            assert close(mine["embedding"][0], reference["embedding"][0])
    one = httpx.post(f"{embed_server.url}/embeddings", json={"input": TEXTS[0]}, timeout=120).json()
    assert close(one[0]["embedding"][0], llama_server_answers["embeddings-input"][0]["embedding"][0])


def test_embeddings_take_content_objects_and_lists_mixing_text_and_token_ids(embed_server: Server) -> None:
    url = embed_server.url
    tokens = httpx.post(f"{url}/tokenize", json={"content": TEXTS[1]}, timeout=30).json()["tokens"]
    mixed = httpx.post(
        f"{url}/v1/embeddings", json={"input": [TEXTS[0], tokens, {"content": TEXTS[1]}]}, timeout=120
    ).json()
    vectors = [d["embedding"] for d in mixed["data"]]
    assert len(vectors) == 3 and close(vectors[1], vectors[2])  # the same text, as ids and as a content object
    plain = httpx.post(f"{url}/v1/embeddings", json={"input": TEXTS[0]}, timeout=120).json()["data"][0]["embedding"]
    assert close(vectors[0], plain)
    # "content" in place of "input" is llama-server's, and gets its native shape even under /v1
    native = httpx.post(f"{url}/v1/embeddings", json={"content": TEXTS[0]}, timeout=120).json()
    assert isinstance(native, list) and close(native[0]["embedding"][0], plain)


@pytest.mark.parametrize("asked", ["v1-mixed", "v1-one-mixed"])
def test_v1_embeddings_take_every_input_shape_llama_server_takes_with_its_vectors(
    asked: str, embed_server: Server, llama_server_answers: dict[str, Any]
) -> None:
    given = MIXED_INPUT if asked == "v1-mixed" else MIXED_INPUT[1]
    reply = httpx.post(f"{embed_server.url}/v1/embeddings", json={"input": given}, timeout=120)
    assert reply.status_code == 200, reply.text
    ours, theirs = reply.json(), llama_server_answers[asked]
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert len(ours["data"]) == len(theirs["data"]) == (len(MIXED_INPUT) if asked == "v1-mixed" else 1)
    for mine, reference in zip(ours["data"], theirs["data"], strict=True):
        assert close(mine["embedding"], reference["embedding"])


def test_native_embeddings_refuse_what_they_cannot_do_in_llama_servers_shape(embed_server: Server) -> None:
    for body, param_word in (({}, "content"), ({"content": TEXTS, "embd_normalize": 1}, "embd_normalize")):
        reply = httpx.post(f"{embed_server.url}/embeddings", json=body, timeout=30)
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["type"] == "invalid_request_error" and reply.json()["error"]["code"] == 400
        assert param_word in reply.json()["error"]["message"] or '"input"' in reply.json()["error"]["message"]


def test_a_prompt_string_object_is_completed_as_llama_server_completes_it(
    server: Server, llama_server_answers: dict[str, Any]
) -> None:
    theirs = llama_server_answers["prompt_string"]
    ours = httpx.post(f"{server.url}/completion", json=PROMPT_OBJECT, timeout=120)
    assert ours.status_code == 200, ours.text
    assert ours.json()["content"] == theirs["content"] and theirs["content"]
    plain = {**PROMPT_OBJECT, "prompt": "The capital of France is"}
    text = httpx.post(f"{server.url}/completion", json=plain, timeout=120)
    assert text.json()["content"] == theirs["content"]
    ids = httpx.post(f"{server.url}/tokenize", json={"content": "The capital of"}, timeout=30).json()["tokens"]
    mixed = {**PROMPT_OBJECT, "prompt": [{"prompt_string": [*ids, " France is"]}]}
    assert httpx.post(f"{server.url}/completion", json=mixed, timeout=120).json()["content"] == theirs["content"]


def test_a_prompt_object_with_images_is_a_400(server: Server) -> None:
    for prompt, said in (
        ({"prompt_string": "Describe <__media__>", "multimodal_data": ["aGVsbG8="]}, "multimodal_data"),
        ([{"prompt_string": "one"}, {"prompt_string": "Describe", "multimodal_data": ["aGVsbG8="]}], "multimodal"),
    ):
        reply = httpx.post(f"{server.url}/completion", json={"prompt": prompt, "n_predict": 2}, timeout=60)
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["type"] == "invalid_request_error" and said in reply.json()["error"]["message"]
