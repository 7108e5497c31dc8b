"""Text completions through a real server: SmolLM2 with the openai client, and Gemma 3 270M."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.capital_answer import CAPITAL_GRAMMAR

pytestmark = pytest.mark.model

PROMPT = "The capital of France is Paris. The capital of Germany is"


def test_multi_token_prompt_decodes(client: openai.OpenAI, model_name: str) -> None:
    """A prompt of many tokens goes through one batched decode (the AMX miscompile crashed exactly here)."""
    reply = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0)
    assert reply.usage is not None and reply.usage.prompt_tokens > 10
    assert reply.choices[0].text.strip()


def test_completion_continues_the_prompt(client: openai.OpenAI, model_name: str) -> None:
    """The model reads the prompt: of the capitals it may write, it takes Germany's, not France's it was shown."""
    reply = client.completions.create(
        model=model_name, prompt=PROMPT, max_tokens=4, temperature=0, extra_body={"grammar": CAPITAL_GRAMMAR}
    )
    assert reply.object == "text_completion"
    assert reply.choices[0].text == " Berlin"


def test_completion_max_tokens_defaults_to_16(client: openai.OpenAI, model_name: str) -> None:
    reply = client.completions.create(
        model=model_name, prompt="Once upon a time", temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 16
    assert reply.choices[0].finish_reason == "length"


def test_completion_echo_prefixes_the_prompt(client: openai.OpenAI, model_name: str) -> None:
    reply = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=4, temperature=0, echo=True)
    assert reply.choices[0].text.startswith(PROMPT)
    assert len(reply.choices[0].text) > len(PROMPT)


def test_completion_list_prompt_gives_one_choice_each(client: openai.OpenAI, model_name: str) -> None:
    prompts = ["One, two, three,", "Monday, Tuesday,"]
    reply = client.completions.create(model=model_name, prompt=prompts, max_tokens=4, temperature=0)
    assert [c.index for c in reply.choices] == [0, 1]
    singles = [
        client.completions.create(model=model_name, prompt=p, max_tokens=4, temperature=0).choices[0].text
        for p in prompts
    ]
    assert [c.text for c in reply.choices] == singles


def test_completion_stream_matches_non_streamed(client: openai.OpenAI, model_name: str) -> None:
    whole = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=12, temperature=0)
    chunks = list(client.completions.create(model=model_name, prompt=PROMPT, max_tokens=12, temperature=0, stream=True))
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_completion_stop_string_is_not_in_the_text(client: openai.OpenAI, model_name: str) -> None:
    counting = {"grammar": 'root ::= " 5, 6, 7, 8, 9"'}  # the text forced: a CPU's greedy text is not hoped for
    reply = client.completions.create(
        model=model_name, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0, stop=[" 7"], extra_body=counting
    )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == " 5, 6,"


@pytest.fixture(scope="module")
def gemma_server(gemma3: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Gemma served from a path outside any store (a link named like a user's download), used in place."""
    folder = tmp_path_factory.mktemp("serve-gemma")
    link = folder / "gemma-3-270m-q4_k_m.gguf"
    link.symlink_to(gemma3.path)
    with serving(str(link), folder / "empty-home", folder, "--ctx-size", "2048") as server:
        yield server


def test_gemma3_270m_served_from_a_path_is_named_after_the_file(gemma_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{gemma_server.url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["gemma-3-270m-q4_k_m"]
    assert not (gemma_server.log.parent / "empty-home" / "models" / "blobs").exists()  # nothing was copied


def test_gemma3_270m_completes_through_completions(gemma_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{gemma_server.url}/v1", api_key="unused", max_retries=0)
    reply = client.completions.create(
        model="gemma-3-270m-q4_k_m",
        prompt=PROMPT,
        max_tokens=8,
        temperature=0,
        extra_body={"grammar": CAPITAL_GRAMMAR},  # a choice of capitals (tests/capital_answer.py)
    )
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert reply.choices[0].text == " Berlin"


def test_gemma3_base_model_chat_falls_back_to_a_transcript(gemma_server: Server) -> None:
    """Gemma 3 270M has no chat template: the fallback still gives a non-empty reply that ends at a turn."""
    client = openai.OpenAI(base_url=f"{gemma_server.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="gemma-3-270m-q4_k_m",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=30,
        temperature=0,
    )
    text = reply.choices[0].message.content or ""
    assert text.strip()
    assert "User:" not in text


def test_gemma3_sliding_window_cache_reuses_a_prefix_after_a_long_reply(gemma_server: Server) -> None:
    """Gemma 3 attends through a 512-token sliding window whose cache keeps only the last ~1,024 positions: after
    a reply of 800 tokens, the cells of the prompt are gone and cannot be rolled back to. The slot's checkpoint of
    the window, taken when the prompt was prefilled, lets the next request sharing the prompt compute only its
    new tail, and the reply is the one the whole prompt computed afresh (``cache_prompt: false``) gives."""
    document = " ".join(f"Entry {i}: the lighthouse keeper logged the weather." for i in range(25))

    def complete(prompt: str, max_tokens: int, cache_prompt: bool = True) -> dict[str, Any]:
        body = {
            "model": "gemma-3-270m-q4_k_m",
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "cache_prompt": cache_prompt,
        }
        response = httpx.post(f"{gemma_server.url}/v1/completions", json=body, timeout=300)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    first = complete(document, 800)
    second = complete(document + " Then the storm came.", 4)
    afresh = complete(document + " Then the storm came.", 4, cache_prompt=False)
    assert 250 < first["usage"]["prompt_tokens"] < 512
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 1
    assert second["timings"]["prompt_n"] <= second["usage"]["prompt_tokens"] - first["usage"]["prompt_tokens"] + 1
    assert afresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["choices"][0]["text"] == afresh["choices"][0]["text"]
