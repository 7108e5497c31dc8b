"""``logit_bias`` on a real ``localinfer serve`` with SmolLM2, as llama-server's users send it: OpenAI's map and
llama-server's list of pairs, token ids and texts, ``false`` to ban; on ``/completion`` the same text and the same
``generation_settings.logit_bias`` as llama-server's on the same file (greedy), on the OpenAI routes through the
official client. Where llama-server drops a bad entry without a word, localinfer answers 400 naming the field.

llama-server is the one bench/build-llama-cpp builds from the llama.cpp source llama-cpp-python vendors, started
with flash attention on as our contexts have it (see test_infill_parity.py); each request computes its whole prompt.
"""

from __future__ import annotations

import json
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

PROMPT = "The capital of France is"
GREEDY: dict[str, Any] = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "cache_prompt": False}
# a chat turn SmolLM2 answers in a few tokens and ends: ignore_eos has something to ban
SHORT_REPLY = "<|im_start|>user\nReply with one word: hello.<|im_end|>\n<|im_start|>assistant\n"
FORCED_TEXT = " banana"


def completion(url: str, **fields: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/completion", json={**GREEDY, **fields}, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def tokens(url: str, text: str) -> list[int]:
    ids: list[int] = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=60).json()["tokens"]
    return ids


def cases(first: int, forced: int) -> dict[str, dict[str, Any]]:
    """The /completion requests asked of both servers, by what they show."""
    return {
        "first greedy token banned with false": {"logit_bias": [[first, False]]},
        "first greedy token banned with -100 in the map": {"logit_bias": {str(first): -100}},
        "a token forced with +100": {"logit_bias": {str(forced): 100}},
        "a text's tokens banned": {"logit_bias": [[" Paris", False]]},
        "a text key in the map": {"logit_bias": {" Paris": -5.5, "Hello": 1}},
        "ids and texts mixed, an id twice": {"logit_bias": [[first, -2], [" Paris", False], [first, 1.5]]},
        "ignore_eos": {"prompt": SHORT_REPLY, "n_predict": 12, "ignore_eos": True},
        "ignore_eos with a bias": {"prompt": SHORT_REPLY, "n_predict": 12, "ignore_eos": True, "logit_bias": [[5, 1]]},
        "no bias": {},
    }


@pytest.fixture(scope="module")
def llama(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's answers to every case, and the token ids they were built from; it runs only while asked."""
    with llama_server(
        smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1", "-fa", "on"
    ) as url:
        plain = completion(url)
        first = tokens(url, plain["content"])[0]
        forced = tokens(url, FORCED_TEXT)
        assert len(forced) == 1, forced
        answers = {name: completion(url, **body) for name, body in cases(first, forced[0]).items()}
        short = completion(url, prompt=SHORT_REPLY, n_predict=12)
        v1 = httpx.post(
            f"{url}/v1/completions",
            json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logit_bias": {str(first): -100}},
            timeout=300,
        ).json()
    return {"first": first, "forced": forced[0], "answers": answers, "short": short, "v1": v1}


@pytest.fixture(scope="module")
def ours(llama: dict[str, Any], smollm2_server: Server) -> dict[str, dict[str, Any]]:
    """localinfer's answers to the same cases (asked once llama-server is gone)."""
    return {
        name: completion(smollm2_server.url, **body) for name, body in cases(llama["first"], llama["forced"]).items()
    }


@pytest.mark.parametrize("case", list(cases(0, 0)))
def test_completion_writes_llama_servers_text_under_each_bias(
    llama: dict[str, Any], ours: dict[str, dict[str, Any]], case: str
) -> None:
    assert ours[case]["content"] == llama["answers"][case]["content"]


@pytest.mark.parametrize("case", list(cases(0, 0)))
def test_generation_settings_show_the_biases_as_llama_server_does(
    llama: dict[str, Any], ours: dict[str, dict[str, Any]], case: str
) -> None:
    assert (
        ours[case]["generation_settings"]["logit_bias"] == llama["answers"][case]["generation_settings"]["logit_bias"]
    )


def test_a_banned_first_token_changes_the_greedy_text(ours: dict[str, dict[str, Any]]) -> None:
    banned = ours["first greedy token banned with false"]["content"]
    assert banned != ours["no bias"]["content"]
    assert not banned.startswith(ours["no bias"]["content"][:3])


def test_a_token_forced_with_plus_100_is_every_token(ours: dict[str, dict[str, Any]]) -> None:
    assert ours["a token forced with +100"]["content"] == FORCED_TEXT * GREEDY["n_predict"]


def test_ignore_eos_bans_the_end_of_generation_tokens_and_writes_on(
    llama: dict[str, Any], ours: dict[str, dict[str, Any]], smollm2_server: Server
) -> None:
    assert llama["short"]["tokens_predicted"] < 12  # without ignore_eos the reply ends early
    answer = ours["ignore_eos"]
    assert answer["tokens_predicted"] == 12 and answer["stop_type"] == "limit"
    bans = answer["generation_settings"]["logit_bias"]
    assert bans and all(entry["bias"] is None for entry in bans)
    eos = tokens(smollm2_server.url, "<|im_end|>")
    assert eos[0] in [entry["token"] for entry in bans]


def test_v1_completions_bans_a_token_as_llama_server_does(
    llama: dict[str, Any], client: openai.OpenAI, model_name: str
) -> None:
    reply = client.completions.create(
        model=model_name, prompt=PROMPT, max_tokens=8, temperature=0, logit_bias={str(llama["first"]): -100}
    )
    assert reply.choices[0].text == llama["v1"]["choices"][0]["text"]


def test_chat_completions_takes_a_forced_token_from_the_openai_client(
    llama: dict[str, Any], client: openai.OpenAI, model_name: str
) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Name a fruit."}],
        max_tokens=3,
        temperature=0,
        logit_bias={str(llama["forced"]): 100},
    )
    assert reply.choices[0].message.content == FORCED_TEXT * 3


def test_chat_completions_takes_llama_servers_list_with_false(
    client: openai.OpenAI, model_name: str, smollm2_server: Server
) -> None:
    messages: Any = [{"role": "user", "content": "What is the capital of France?"}]
    plain = client.chat.completions.create(model=model_name, messages=messages, max_tokens=6, temperature=0)
    first_text = plain.choices[0].message.content or ""
    first = tokens(smollm2_server.url, first_text)[0]
    banned = client.chat.completions.create(
        model=model_name,
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_body={"logit_bias": [[first, False]]},
    )
    content = banned.choices[0].message.content or ""
    assert content and content != first_text
    assert tokens(smollm2_server.url, content)[0] != first


def test_a_streamed_completion_follows_the_bias(llama: dict[str, Any], smollm2_server: Server) -> None:
    body = {**GREEDY, "stream": True, "logit_bias": {str(llama["forced"]): 100}}
    with httpx.stream("POST", f"{smollm2_server.url}/completion", json=body, timeout=300) as reply:
        assert reply.status_code == 200
        pieces = [line.removeprefix("data: ") for line in reply.iter_lines() if line.startswith("data: ")]
    text = "".join(json.loads(piece)["content"] for piece in pieces)
    assert text == FORCED_TEXT * GREEDY["n_predict"]


@pytest.mark.parametrize(
    "bias",
    [
        [[49152, 1.0]],  # one past SmolLM2's last token
        {"-1": -100},
        {"99999999": 5},
    ],
)
def test_an_id_outside_the_vocabulary_is_a_400_naming_logit_bias(smollm2_server: Server, bias: Any) -> None:
    """llama-server drops such an entry and answers as if it were not there; a client that sent it meant it."""
    reply = httpx.post(f"{smollm2_server.url}/completion", json={**GREEDY, "logit_bias": bias}, timeout=60)
    assert reply.status_code == 400
    assert "logit_bias" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    "bias",
    [
        [[1, True]],
        [[1, "strong"]],
        {"15": None},
        [[1, 2, 3]],
        [1, 2],
        [[1.5, 2]],
        "Hello",
    ],
)
def test_a_bias_that_is_not_a_number_or_false_is_a_400_naming_logit_bias(smollm2_server: Server, bias: Any) -> None:
    reply = httpx.post(f"{smollm2_server.url}/completion", json={**GREEDY, "logit_bias": bias}, timeout=60)
    assert reply.status_code == 400
    assert "logit_bias" in reply.json()["error"]["message"]


def test_the_openai_client_sees_a_bad_id_as_a_bad_request_on_param_logit_bias(
    client: openai.OpenAI, model_name: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=2,
            logit_bias={"100000": -100},
        )
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "logit_bias"


def test_the_server_serves_on_after_refusing_a_bias(smollm2_server: Server) -> None:
    httpx.post(f"{smollm2_server.url}/completion", json={**GREEDY, "logit_bias": [[10**9, 1]]}, timeout=60)
    assert completion(smollm2_server.url)["content"]


@pytest.fixture(scope="module")
def onnx_server(smollm2_onnx: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_onnx.name, test_home, tmp_path_factory.mktemp("serve-onnx")) as server:
        yield server


def test_an_onnx_model_refuses_logit_bias_with_a_400_naming_it(onnx_server: Server, smollm2_onnx: Manifest) -> None:
    """onnxruntime-genai cannot bias logits: the request is refused, never answered without its bias."""
    body = {"model": smollm2_onnx.name, "prompt": PROMPT, "max_tokens": 4, "logit_bias": {"5": -100}}
    reply = httpx.post(f"{onnx_server.url}/v1/completions", json=body, timeout=300)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "logit_bias"
