"""Bad images never hurt the server: through a real ``localinfer serve --mmproj`` (and one without a projector),
each bad image in each dialect is a 400 in that dialect's error shape naming what is wrong, and the server goes on
answering. Truncated and corrupt files, base64 that is not, a MIME type that is not an image, a 20,000 x 20,000
image (refused from its header, never decoded), 50 images in one message, an image over ``--max-body`` (413)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server
from tests.images import b64, data_uri, png, png_header_only

pytestmark = pytest.mark.model

TRUNCATED = png()[:60]  # its header is whole, its pixels cut short
CORRUPT = png()[:33] + bytes(range(256)) * 4  # a PNG header, then noise
TEXT_FILE = b"just some text, not a picture at all\n" * 8

# (case, the image as base64 or a data URI (None: a list of 50 images), what the error says)
CASES: list[tuple[str, str | None, str]] = [
    ("truncated", b64(TRUNCATED), "could not be decoded"),
    ("corrupt", b64(CORRUPT), "could not be decoded"),
    ("not-base64", "this is not base64 at all!!", "not valid base64"),
    ("text-bytes", b64(TEXT_FILE), "not an image"),
    ("huge", b64(png_header_only(20_000, 20_000)), "20000 x 20000"),
    ("fifty", None, "more than 32"),
]


def openai_chat(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    parts = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{i}"}} for i in images]
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, *parts]}], "max_tokens": 4}
    return "/v1/chat/completions", body


def completion(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    prompt = "<__media__>" * len(images) + " What?"
    return "/completion", {"prompt": {"prompt_string": prompt, "multimodal_data": images}, "n_predict": 4}


def ollama_chat(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    body = {"messages": [{"role": "user", "content": "What?", "images": images}], "stream": False}
    return "/api/chat", {**body, "options": {"num_predict": 4}}


def ollama_generate(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    return "/api/generate", {"prompt": "What?", "images": images, "stream": False, "options": {"num_predict": 4}}


def anthropic_messages(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    blocks = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": i}} for i in images]
    body = {"messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "What?"}]}], "max_tokens": 4}
    return "/v1/messages", body


def responses(image: str | None) -> tuple[str, dict[str, Any]]:
    images = [b64(png(seed=i)) for i in range(50)] if image is None else [image]
    parts = [{"type": "input_image", "image_url": f"data:image/png;base64,{i}"} for i in images]
    return "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What?"}, *parts]}]}


def error_message(dialect: str, answer: httpx.Response) -> str:
    """The error's message, checking that the body has the dialect's error shape."""
    body = answer.json()
    if dialect.startswith("ollama"):
        assert set(body) == {"error"} and isinstance(body["error"], str), body
        message: str = body["error"]
    elif dialect == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        message = body["error"]["message"]
    else:
        assert body["error"]["type"] == "invalid_request_error", body
        message = body["error"]["message"]
    return message


DIALECTS: dict[str, Callable[[str | None], tuple[str, dict[str, Any]]]] = {
    "openai": openai_chat,
    "llama-completion": completion,
    "ollama-chat": ollama_chat,
    "ollama-generate": ollama_generate,
    "anthropic": anthropic_messages,
    "responses": responses,
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("case", "image", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_image_is_a_400_in_the_dialects_shape(
    vision_server: Server, smollm2: Manifest, dialect: str, case: str, image: str | None, says: str
) -> None:
    path, body = DIALECTS[dialect](image)
    answer = httpx.post(f"{vision_server.url}{path}", json={"model": smollm2.name, **body}, timeout=120)
    assert answer.status_code == 400, answer.text
    assert says in error_message(dialect, answer)
    assert httpx.get(f"{vision_server.url}/health", timeout=10).status_code == 200


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("data:text/plain;base64," + b64(TEXT_FILE), "text/plain is not an image"),
        (data_uri(TEXT_FILE), "not an image"),
        ("data:image/png," + "x" * 20, "must be base64"),
    ],
    ids=["text-mime", "png-mime-text-bytes", "not-base64-uri"],
)
def test_a_data_uri_that_is_not_an_image_is_a_400(vision_server: Server, url: str, says: str) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
    answer = httpx.post(f"{vision_server.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    assert says in error_message("openai", answer)


def test_an_image_over_max_body_is_a_413_in_the_dialects_shape(vision_server: Server) -> None:
    path, body = ollama_chat(b64(b"\x89PNG" + b"\x00" * (17 * 1024 * 1024)))
    answer = httpx.post(f"{vision_server.url}{path}", json=body, timeout=120)
    assert answer.status_code == 413, answer.text
    assert isinstance(answer.json()["error"], str)


def test_a_model_without_a_projector_refuses_images_in_its_dialect(smollm2_server: Server, smollm2: Manifest) -> None:
    for dialect in ("openai", "ollama-chat", "anthropic", "llama-completion"):
        path, body = DIALECTS[dialect](b64(png()))
        answer = httpx.post(f"{smollm2_server.url}{path}", json={"model": smollm2.name, **body}, timeout=120)
        assert answer.status_code == 400, answer.text
        assert "loaded without a projector" in error_message(dialect, answer)


def test_image_urls_are_not_fetched_unless_allowed(smollm2_server: Server, smollm2: Manifest) -> None:
    part = {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/picture.png"}}
    body = {"model": smollm2.name, "messages": [{"role": "user", "content": [part]}]}
    answer = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    assert "not fetched" in error_message("openai", answer)


def test_sound_is_refused_by_a_projector_that_does_not_hear(vision_server: Server) -> None:
    wav = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + b"\x00" * 24
    part = {"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}}
    body = {"messages": [{"role": "user", "content": [part, {"type": "text", "text": "What?"}]}]}
    answer = httpx.post(f"{vision_server.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    assert "audio" in error_message("openai", answer)
