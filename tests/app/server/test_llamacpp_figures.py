"""The figures localinfer reports where it speaks llama-server are llama-server's: ``timings`` (``predicted_n`` every
token generated, the rate over the steps after the first), ``/slots``' ``next_token``, the streamed chat's chunks,
and the token ids of ``/completion``'s pieces and answer, each checked against the real llama-server on the same
GGUF.

llama-server is the one bench/build-llama-cpp builds from the llama.cpp source llama-cpp-python vendors, started
with the context, the one slot and flash attention localinfer's parity server has (as test_infill_parity.py does),
so both write the same greedy text; it answers every request first, alone, and is gone before localinfer starts.
localinfer runs without speculation, as llama-server does by default (its drafts add draft_n to the timings).
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

CTX = 2048
PROMPT = "The capital of France is Paris. The capital of Germany is"
# SmolLM2's chat, laid out as its template does: a greedy reply ends with its end-of-generation token, 10 tokens in.
# Another CPU's greedy reply may be another, so the text is held to this one's, after which the model ends it rather
# than write the space the grammar also allows (a grammar that is complete would end localinfer's reply itself,
# without the end token llama-server samples and counts).
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CHAT_PROMPT = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
ENDS: dict[str, Any] = {"grammar": 'root ::= "Hello! How can I help you today?" " "?'}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64, "temperature": 0}
GREEDY = {"temperature": 0, "cache_prompt": False}

# Each request both servers answer, by name.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{
        f"limit-{n}": ("/completion", {"prompt": PROMPT, "n_predict": n, "ignore_eos": True, **GREEDY})
        for n in (1, 2, 8)
    },
    "eos": ("/completion", {"prompt": CHAT_PROMPT, "n_predict": 64, **ENDS, **GREEDY}),
    "eos-tokens": ("/completion", {"prompt": CHAT_PROMPT, "n_predict": 64, "return_tokens": True, **ENDS, **GREEDY}),
    "tokens": ("/completion", {"prompt": PROMPT, "n_predict": 8, "ignore_eos": True, "return_tokens": True, **GREEDY}),
    "stream": ("/completion", {"prompt": PROMPT, "n_predict": 8, "ignore_eos": True, "stream": True, **GREEDY}),
    "eos-stream": ("/completion", {"prompt": CHAT_PROMPT, "n_predict": 64, "stream": True, **ENDS, **GREEDY}),
    "chat-stream": ("/v1/chat/completions", {**CHAT, "stream": True, **ENDS}),
    "chat-stream-usage": (
        "/v1/chat/completions",
        {**CHAT, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
    ),
}


def ask(url: str, name: str) -> Any:
    """The answer to REQUESTS[name]: the body, or a stream's events (``[DONE]`` left out)."""
    path, body = REQUESTS[name]
    reply = httpx.post(f"{url}{path}", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return events(reply.text) if body.get("stream") else reply.json()


def events(text: str) -> list[dict[str, Any]]:
    out = []
    for block in text.split("\n\n"):
        if block.strip() and block.strip() != "data: [DONE]":
            assert block.startswith("data: "), block
            out.append(json.loads(block[len("data: ") :]))
    return out


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's answer to each of REQUESTS, and its /slots after them."""
    settings = ("-c", str(CTX), "-np", "1", "-fa", "on")
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), *settings) as url:
        answers = {name: ask(url, name) for name in REQUESTS}
        answers["slots"] = httpx.get(f"{url}/slots", timeout=60).json()
        return answers


@pytest.fixture(scope="module")
def server(
    theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """localinfer on the same file, with the same context and one slot, and, as llama-server, no speculation
    (started once llama-server is gone)."""
    extra = ("--ctx-size", str(CTX), "--parallel", "1", "--spec", "off")
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-figures"), *extra) as running:
        yield running


def ours(server: Server, name: str) -> Any:
    return ask(server.url, name)


# --- timings ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 8])
def test_predicted_n_is_every_token_generated(server: Server, theirs: dict[str, Any], n: int) -> None:
    body, their_body = ours(server, f"limit-{n}"), theirs[f"limit-{n}"]
    assert body["timings"]["predicted_n"] == body["tokens_predicted"] == n
    assert their_body["timings"]["predicted_n"] == their_body["tokens_predicted"] == n
    assert set(body["timings"]) == set(their_body["timings"])
    # the prompt and every token but the last, which is sampled and never fed back
    assert body["tokens_cached"] == their_body["tokens_cached"] == body["tokens_evaluated"] + n - 1


def test_the_end_token_counts_as_llama_server_counts_it(server: Server, theirs: dict[str, Any]) -> None:
    body, their_body = ours(server, "eos"), theirs["eos"]
    assert body["stop_type"] == their_body["stop_type"] == "eos"
    assert body["content"] == their_body["content"]
    counts = ("tokens_predicted", "tokens_evaluated", "tokens_cached")
    assert [body[k] for k in counts] == [their_body[k] for k in counts]
    assert body["timings"]["predicted_n"] == their_body["timings"]["predicted_n"] == body["tokens_predicted"]


def test_the_decode_rate_counts_the_steps_after_the_first_token(server: Server) -> None:
    timings = ours(server, "limit-8")["timings"]
    assert timings["predicted_ms"] > 0
    assert timings["predicted_per_second"] == pytest.approx(7 * 1000 / timings["predicted_ms"], rel=0.01, abs=0.01)
    assert timings["predicted_per_token_ms"] == pytest.approx(timings["predicted_ms"] / 7, rel=0.01, abs=0.002)


def test_one_token_has_no_decode_rate_as_in_llama_server(server: Server, theirs: dict[str, Any]) -> None:
    timings = ours(server, "limit-1")["timings"]
    assert timings["predicted_per_second"] == theirs["limit-1"]["timings"]["predicted_per_second"] == 0
    assert timings["predicted_per_token_ms"] == theirs["limit-1"]["timings"]["predicted_per_token_ms"] == 0


def test_chat_timings_count_every_token(server: Server) -> None:
    body = {**CHAT, "max_tokens": 6, "ignore_eos": True}
    timings = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()["timings"]
    assert timings["predicted_n"] == 6
    assert timings["predicted_per_second"] == pytest.approx(5 * 1000 / timings["predicted_ms"], rel=0.01, abs=0.01)


# --- /slots ----------------------------------------------------------------------------------------------------


def test_slots_next_token_is_a_list_as_in_llama_server(server: Server, theirs: dict[str, Any]) -> None:
    ours(server, "limit-2")
    (slot,) = httpx.get(f"{server.url}/slots", timeout=60).json()
    (their_slot,) = theirs["slots"]
    assert isinstance(their_slot["next_token"], list) and isinstance(slot["next_token"], list)
    assert [set(entry) for entry in slot["next_token"]] == [set(entry) for entry in their_slot["next_token"]]


def test_slots_next_token_follows_a_running_stream(server: Server) -> None:
    limit = CTX - 100  # far more than it writes before the stream is closed, which ends the request
    body = {"prompt": "Count: one, two, three,", "n_predict": limit, "ignore_eos": True, "stream": True, **GREEDY}
    with httpx.stream("POST", f"{server.url}/completion", json=body, timeout=300) as reply:
        lines = reply.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        (slot,) = httpx.get(f"{server.url}/slots", timeout=60).json()
        if not slot["is_processing"]:  # show how the stream ended
            slot["stream's end"] = [line for line in lines if line.startswith("data: ")][-1:]
    (entry,) = slot["next_token"]
    assert slot["is_processing"] and entry["has_next_token"] is True, slot
    assert entry["n_decoded"] >= 1 and 0 <= entry["n_remain"] < limit
    assert entry["n_decoded"] + entry["n_remain"] <= limit  # (n_remain is read a moment later)
    assert isinstance(entry["has_new_line"], bool)


# --- streamed chat ---------------------------------------------------------------------------------------------


def deltas(stream: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    return [(c["delta"], c["finish_reason"]) for event in stream for c in event["choices"]]


def test_streamed_chat_sends_the_chunks_llama_server_sends(server: Server, theirs: dict[str, Any]) -> None:
    stream = ours(server, "chat-stream")
    assert deltas(stream) == deltas(theirs["chat-stream"])
    assert deltas(stream)[0] == ({"role": "assistant", "content": None}, None)
    assert all(delta.get("content") != "" for delta, _ in deltas(stream))
    assert "timings" in stream[-1] and all("timings" not in event for event in stream[:-1])


def test_streamed_chat_with_usage_ends_as_llama_servers_does(server: Server, theirs: dict[str, Any]) -> None:
    stream = ours(server, "chat-stream-usage")
    assert deltas(stream) == deltas(theirs["chat-stream-usage"])
    last, their_last = stream[-1], theirs["chat-stream-usage"][-1]
    assert last["choices"] == their_last["choices"] == []
    assert last["usage"]["completion_tokens"] == their_last["usage"]["completion_tokens"]
    assert "timings" in last and all("timings" not in event for event in stream[:-1])


def test_the_openai_sdk_reads_the_streamed_chat(server: Server, model_name: str) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    whole = client.chat.completions.create(model=model_name, extra_body=ENDS, **CHAT)  # type: ignore[call-overload]
    chunks = list(
        client.chat.completions.create(model=model_name, stream=True, extra_body=ENDS, **CHAT)  # type: ignore[call-overload]
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content is None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"


# --- token ids -------------------------------------------------------------------------------------------------


def test_streamed_pieces_carry_their_token_ids(server: Server, theirs: dict[str, Any]) -> None:
    *pieces, last = ours(server, "stream")
    assert all(piece["tokens"] for piece in pieces) and last["tokens"] == []
    for piece in pieces:
        text = httpx.post(f"{server.url}/detokenize", json={"tokens": piece["tokens"]}, timeout=60).json()["content"]
        assert text == piece["content"]
    *their_pieces, _ = theirs["stream"]
    assert [t for p in pieces for t in p["tokens"]] == [t for p in their_pieces for t in p["tokens"]]


def test_a_streamed_end_token_comes_last_with_no_text(server: Server, theirs: dict[str, Any]) -> None:
    *pieces, last = ours(server, "eos-stream")
    *their_pieces, their_last = theirs["eos-stream"]
    assert [t for p in pieces for t in p["tokens"]] == [t for p in their_pieces for t in p["tokens"]]
    assert pieces[-1]["content"] == their_pieces[-1]["content"] == ""
    assert "".join(p["content"] for p in pieces) == "".join(p["content"] for p in their_pieces)
    assert last["tokens_predicted"] == their_last["tokens_predicted"] == len(their_pieces)


def test_an_answer_has_no_token_ids_unless_asked(server: Server, theirs: dict[str, Any]) -> None:
    assert ours(server, "limit-8")["tokens"] == theirs["limit-8"]["tokens"] == []


def test_return_tokens_answers_the_generated_ids_as_llama_server(server: Server, theirs: dict[str, Any]) -> None:
    body = ours(server, "tokens")
    assert len(body["tokens"]) == 8 and body["tokens"] == theirs["tokens"]["tokens"]
    assert body["content"] == theirs["tokens"]["content"]


def test_return_tokens_ends_with_the_end_token_as_llama_server(server: Server, theirs: dict[str, Any]) -> None:
    body = ours(server, "eos-tokens")
    assert body["tokens"] == theirs["eos-tokens"]["tokens"] and len(body["tokens"]) == body["tokens_predicted"]
