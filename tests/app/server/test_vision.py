"""Images in every dialect, through a real ``localinfer serve --mmproj`` with SmolLM2 and the test projector
(tests/vision_model.py), compared with the real llama-server ``--mmproj`` on the same two files and images: the same
greedy text from OpenAI chat, ``/completion`` with ``multimodal_data``, Ollama's ``images``, Anthropic's image
blocks and the Responses API's ``input_image``; another image gives another distribution; a picture asked about
again is not computed again, also after another picture in between; ``/props`` says the model sees, and
``input_tokens`` counts an image as the tokens it becomes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from localinfer.client.remote import HttpClient
from localinfer.models.store import Manifest
from localinfer.types import MEDIA_MARKER, ChatMessage, ChatRequest, GenerationOptions, MediaPart, SamplingParams
from tests.app.server.conftest import Server
from tests.images import b64, data_uri, png
from tests.llama_cpp_tools import llama_server
from tests.vision_model import TOKENS_PER_IMAGE

pytestmark = pytest.mark.model

CONTEXT = ("--ctx-size", "2048")
RED, BLUE = png(seed=1), png(seed=2)
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, smollm2_mmproj: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real llama-server on the same model and projector."""
    log_dir = tmp_path_factory.mktemp("llama-server-vision")
    with llama_server(smollm2.path, log_dir, *CONTEXT, "-np", "1", "--mmproj", str(smollm2_mmproj)) as url:
        yield url


def chat_body(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 24, **extra}


def image_part(image: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_uri(image)}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def their_chat(url: str, body: dict[str, Any]) -> str:
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


@pytest.mark.parametrize(
    "content",
    [
        [text_part(QUESTION), image_part(RED)],
        [image_part(RED), text_part(QUESTION)],
        [text_part("First"), image_part(RED), text_part("then"), image_part(BLUE), text_part(QUESTION)],
    ],
    ids=["text-then-image", "image-then-text", "two-images"],
)
def test_openai_chat_with_images_gives_llama_servers_greedy_text(
    vision_server: Server, theirs: str, smollm2: Manifest, content: list[dict[str, Any]]
) -> None:
    client = openai.OpenAI(base_url=f"{vision_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    message: Any = {"role": "user", "content": content}
    reply = client.chat.completions.create(model=smollm2.name, messages=[message], temperature=0, max_tokens=24)
    assert reply.choices[0].message.content == their_chat(theirs, chat_body(content))
    assert reply.choices[0].message.content


def completion(url: str, prompt: str, images: list[bytes], **extra: Any) -> dict[str, Any]:
    body = {
        "prompt": {"prompt_string": prompt, "multimodal_data": [b64(image) for image in images]},
        "temperature": 0,
        "n_predict": 16,
        **extra,
    }
    answer = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def marker(url: str) -> str:
    found: str = httpx.get(f"{url}/props", timeout=30).json()["media_marker"]
    return found


def test_completion_with_multimodal_data_gives_llama_servers_greedy_text(vision_server: Server, theirs: str) -> None:
    ask = "<|im_start|>user\n{m} {q}<|im_end|>\n<|im_start|>assistant\n"
    mine = completion(vision_server.url, ask.format(m=marker(vision_server.url), q=QUESTION), [BLUE])
    their = completion(theirs, ask.format(m=marker(theirs), q=QUESTION), [BLUE])
    assert mine["content"] == their["content"] and mine["content"]
    assert mine["tokens_evaluated"] == their["tokens_evaluated"]


def test_another_image_gives_another_distribution(vision_server: Server) -> None:
    ask = f"<|im_start|>user\n{marker(vision_server.url)} {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    first = completion(vision_server.url, ask, [RED], n_probs=5, n_predict=1, cache_prompt=False)
    other = completion(vision_server.url, ask, [BLUE], n_probs=5, n_predict=1, cache_prompt=False)
    again = completion(vision_server.url, ask, [RED], n_probs=5, n_predict=1, cache_prompt=False)
    assert first["completion_probabilities"] == again["completion_probabilities"]
    assert first["completion_probabilities"] != other["completion_probabilities"]


def test_a_picture_asked_about_again_is_not_computed_again_even_after_another(vision_server: Server) -> None:
    """Two slots: the second picture goes to the other slot, so the first is still cached when it comes back."""
    for slot in (0, 1):  # both empty, whatever the tests before left there
        assert httpx.post(f"{vision_server.url}/slots/{slot}?action=erase", timeout=30).status_code == 200
    ask = f"<|im_start|>user\n{marker(vision_server.url)} Say something about it.<|im_end|>\n<|im_start|>assistant\n"
    picture = png(seed=11)
    first = completion(vision_server.url, ask, [picture])
    assert first["timings"]["media_n"] == TOKENS_PER_IMAGE
    between = completion(vision_server.url, ask, [png(seed=12)])
    assert between["timings"]["media_n"] == TOKENS_PER_IMAGE
    again = completion(vision_server.url, ask, [picture])
    assert "media_n" not in again["timings"]  # no image embeddings decoded
    assert again["timings"]["prompt_n"] == 1  # only the prompt's last token, for its logits
    assert again["content"] == first["content"]
    metrics = httpx.get(f"{vision_server.url}/metrics", timeout=30).text
    assert "localinfer_media_tokens_total" in metrics
    saved = httpx.post(f"{vision_server.url}/slots/0?action=save", json={"filename": "x.bin"}, timeout=30)  # both
    assert saved.status_code == 400 and "holds an image" in saved.json()["error"]["message"]  # ids of this process


def test_ollama_images_give_llama_servers_greedy_text(vision_server: Server, theirs: str, smollm2: Manifest) -> None:
    """Ollama puts a message's images before its text: the prompt of an OpenAI image part then a text part."""
    client = ollama.Client(host=vision_server.url, timeout=120)
    options = {"temperature": 0, "num_predict": 24, "repeat_penalty": 1.0}  # Ollama's default is 1.1
    reply = client.chat(
        model=smollm2.name, messages=[{"role": "user", "content": QUESTION, "images": [RED]}], options=options
    )
    expected = their_chat(theirs, chat_body([image_part(RED), text_part(QUESTION)]))
    assert reply.message.content == expected
    generated = client.generate(model=smollm2.name, prompt=QUESTION, images=[RED], options=options)
    assert generated.response == expected


def test_anthropic_image_blocks_give_llama_servers_greedy_text(
    vision_server: Server, theirs: str, smollm2: Manifest
) -> None:
    client = anthropic.Anthropic(base_url=vision_server.url, api_key="unused", max_retries=0, timeout=120)
    message = client.messages.create(
        model=smollm2.name,
        max_tokens=24,
        extra_body={"temperature": 0},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(RED)}},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ],
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    assert text == their_chat(theirs, chat_body([image_part(RED), text_part(QUESTION)]))


def test_responses_input_image_gives_llama_servers_greedy_text(
    vision_server: Server, theirs: str, smollm2: Manifest
) -> None:
    client = openai.OpenAI(base_url=f"{vision_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    response = client.responses.create(
        model=smollm2.name,
        temperature=0,
        max_output_tokens=24,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": QUESTION},
                    {"type": "input_image", "image_url": data_uri(BLUE), "detail": "auto"},
                ],
            }
        ],
    )
    assert response.output_text == their_chat(theirs, chat_body([text_part(QUESTION), image_part(BLUE)]))


def test_input_tokens_count_an_image_as_llama_server_does(vision_server: Server, theirs: str) -> None:
    body = chat_body([text_part(QUESTION), image_part(RED)])
    mine = httpx.post(f"{vision_server.url}/v1/chat/completions/input_tokens", json=body, timeout=60)
    their = httpx.post(f"{theirs}/v1/chat/completions/input_tokens", json=body, timeout=60)
    assert mine.status_code == their.status_code == 200, (mine.text, their.text)
    assert mine.json()["input_tokens"] == their.json()["input_tokens"]
    text_only = httpx.post(
        f"{vision_server.url}/v1/chat/completions/input_tokens", json=chat_body([text_part(QUESTION)])
    )
    assert mine.json()["input_tokens"] > text_only.json()["input_tokens"] + TOKENS_PER_IMAGE - 1


def test_props_say_the_model_sees(vision_server: Server, theirs: str) -> None:
    mine = httpx.get(f"{vision_server.url}/props", timeout=30).json()
    their = httpx.get(f"{theirs}/props", timeout=30).json()
    assert {key: their["modalities"][key] for key in ("vision", "audio")} == {"vision": True, "audio": False}
    assert mine["modalities"] == {"vision": True, "audio": False, "video": False}  # no video here
    assert mine["media_marker"] == "<__media__>"


class _Pictures(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/red.png":
            body = RED
        elif self.path == "/huge.png":
            body = b"\x89PNG\r\n\x1a\n" + b"\x00" * (21 * 1024 * 1024)
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        return


@pytest.fixture(scope="module")
def pictures() -> Iterator[str]:
    """A web server on 127.0.0.1 with a picture, one too large to fetch, and nothing else."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pictures)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_an_image_url_is_fetched_when_allowed_and_gives_the_same_text(vision_server: Server, pictures: str) -> None:
    by_data = httpx.post(f"{vision_server.url}/v1/chat/completions", json=chat_body([image_part(RED)]), timeout=120)
    by_url = httpx.post(
        f"{vision_server.url}/v1/chat/completions",
        json=chat_body([{"type": "image_url", "image_url": {"url": f"{pictures}/red.png"}}]),
        timeout=120,
    )
    assert by_url.status_code == by_data.status_code == 200, by_url.text
    assert by_url.json()["choices"][0]["message"]["content"] == by_data.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(("path", "says"), [("/missing.png", "answered 404"), ("/huge.png", "larger than")])
def test_an_image_url_that_fails_is_a_400(vision_server: Server, pictures: str, path: str, says: str) -> None:
    answer = httpx.post(
        f"{vision_server.url}/v1/chat/completions",
        json=chat_body([{"type": "image_url", "image_url": {"url": f"{pictures}{path}"}}]),
        timeout=120,
    )
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["error"]["message"]


def test_the_http_client_sends_a_messages_images_as_its_parts(vision_server: Server, smollm2: Manifest) -> None:
    """The app's client of a remote server: a message's images reach the server in their places in its text."""
    text = f"Look {MEDIA_MARKER} and {MEDIA_MARKER}: {QUESTION}"
    media = (MediaPart("image", RED, "image/png"), MediaPart("image", BLUE, "image/png"))
    options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=16)
    request = ChatRequest(smollm2.name, (ChatMessage("user", text, media=media),), options)

    async def scenario() -> str:
        client = HttpClient(vision_server.url)
        try:
            return "".join([chunk.text async for chunk in client.chat(request)])
        finally:
            await client.close()

    parts = [text_part("Look "), image_part(RED), text_part(" and "), image_part(BLUE), text_part(f": {QUESTION}")]
    body = chat_body(parts, max_tokens=16)
    direct = httpx.post(f"{vision_server.url}/v1/chat/completions", json=body, timeout=120).json()
    assert asyncio.run(scenario()) == direct["choices"][0]["message"]["content"]
