"""llama-server's /infill (and OpenAI's /v1/completions with a suffix) through a real server on the FIM test
model (SmolLM2 with FIM token ids declared, ``tests/fim_model.py``), with the request bodies llama.vscode and
llama.vim send, and bad input in llama-server's error shape."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

CTX = 4096  # room for the extra chunks: they get what the context leaves past a batch (2048)
PREFIX = "import math\n\n\ndef area(r):\n"
SUFFIX = "\n\n\ndef main():\n    print(area(2))\n"
EXTRA = [{"filename": "util.py", "text": "def square(x):\n    return x * x\n"}]


@pytest.fixture(scope="module")
def fim_server(
    smollm2_fim: Manifest, smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The FIM test model served by name (the server's default model); plain SmolLM2, which has no FIM tokens, is
    in the same home and loads on demand. One slot, so a request finds the previous one's cache."""
    log_dir = tmp_path_factory.mktemp("serve-fim")
    with serving(smollm2_fim.name, test_home, log_dir, "--ctx-size", str(CTX), "--parallel", "1") as server:
        yield server


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def assert_llamacpp_error(response: httpx.Response, status: int, kind: str) -> str:
    """The message of a llama-server error ``{"error": {"code", "message", "type"}}`` of ``status``."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "type"} and error["code"] == status and error["type"] == kind, error
    message: str = error["message"]
    return message


def n_tokens(server: Server, text: str, *, special: bool = False) -> int:
    body = {"content": text, "add_special": False, "parse_special": special}
    tokens: list[int] = ok(post(server, "/tokenize", body))["tokens"]
    return len(tokens)


def layout_tokens(
    server: Server, prefix: str, suffix: str, prompt: str = "", extra: Sequence[Mapping[str, Any]] = ()
) -> int:
    """How many tokens llama-server's FIM prompt for the test model has: its six FIM tokens where they go, and each
    piece of text tokenized on its own (``format_prompt_infill``), control tokens in text read as text."""
    files = sum(1 + n_tokens(server, f"{c['filename']}\n") + n_tokens(server, c["text"]) for c in extra)
    repo = 1 + n_tokens(server, "myproject\n") + files + 1 + n_tokens(server, "filename\n")
    return (
        repo + 1 + n_tokens(server, prefix) + n_tokens(server, prompt, special=True) + 1 + n_tokens(server, suffix) + 1
    )


def llama_vscode_body(
    prefix: str, suffix: str, prompt: str, chunks: list[dict[str, str]], nindent: int
) -> dict[str, Any]:
    """What llama.vscode posts to /infill for a completion as you type: ``createRequestPayload(false, ...)`` in
    ggml-org/llama.vscode src/llama-server.ts (commit 009e5b72e5bb51a16e455bbcaa084dad5584c14b), with its
    default settings (n_predict 128, t_max_prompt_ms 500, t_max_predict_ms 1000) and no LoRA."""
    return {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": chunks,
        "prompt": prompt,
        "n_predict": 128,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        **({"n_indent": nindent} if nindent else {}),
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
    }


# llama.vim's fields (ggml-org/llama.vim autoload/llama.vim, commit 02e6a4f337968f14165d2e281c4a44cfa4a9017d,
# llama#fim): what it reads back from the answer
LLAMA_VIM_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]


def llama_vim_body(prefix: str, suffix: str, middle: str, indent: int, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """llama.vim's FIM request (llama#fim, same file and commit), with its defaults (n_predict 256,
    t_max_prompt_ms 500, t_max_predict_ms 1500). Its chunks carry a ``time`` (a reltime() pair) too."""
    return {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": chunks,
        "prompt": middle,
        "n_predict": 256,
        "n_indent": indent,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1500,
        "response_fields": LLAMA_VIM_FIELDS,
    }


def llama_vim_ring_update_body(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """llama.vim's background request that warms the cache with new chunks (s:ring_update, same file)."""
    return {
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": chunks,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "stream": False,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }


# --- the prompt and the answer ----------------------------------------------------------------------------------


def test_llama_vscode_request_is_answered_in_llama_servers_shape_from_the_fim_layout(fim_server: Server) -> None:
    body = llama_vscode_body(PREFIX, SUFFIX, "    return", EXTRA, nindent=4)
    answer = ok(post(fim_server, "/infill", body))
    assert answer["stop"] is True and answer["model"] == "smollm2-fim"
    assert isinstance(answer["content"], str) and answer["content"]
    assert 1 <= answer["tokens_predicted"] <= 128
    # the prompt is llama-server's layout of the model's own FIM tokens, token for token
    assert answer["tokens_evaluated"] == layout_tokens(fim_server, PREFIX, SUFFIX, "    return", EXTRA)
    assert answer["generation_settings"]["samplers"][-2:] == ["infill", "temperature"]
    assert answer["generation_settings"]["n_indent"] == 4
    assert answer["stop_type"] in ("eos", "limit")
    # n_indent 4: a later line that starts with less indentation ends the text, cut after its indentation
    for line in answer["content"].split("\n")[1:]:
        stripped = line.lstrip(" \t")
        assert not stripped or len(line) - len(stripped) >= 4, answer["content"]
    assert set(answer["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n"}


def test_llama_vim_gets_exactly_the_flat_response_fields_it_names(fim_server: Server) -> None:
    chunks = [{**EXTRA[0], "time": [1732512345, 123456]}]
    answer = ok(post(fim_server, "/infill", llama_vim_body(PREFIX, SUFFIX, "    ret", 4, chunks)))
    assert sorted(answer) == sorted(LLAMA_VIM_FIELDS)
    assert isinstance(answer["content"], str) and answer["truncated"] is False
    assert answer["timings/prompt_n"] + answer.get("timings/cache_n", 0) <= answer["tokens_cached"]
    assert answer["timings/predicted_n"] >= 0 and answer["timings/prompt_ms"] > 0


def test_llama_vim_ring_update_warms_the_cache_and_answers_an_empty_object(fim_server: Server) -> None:
    chunks = [{"filename": "notes.py", "text": "x = 1\ny = 2\n", "time": [1, 2]}]
    assert ok(post(fim_server, "/infill", llama_vim_ring_update_body(chunks))) == {}


def test_llama_vscode_cache_warming_request_evaluates_the_prompt_only(fim_server: Server) -> None:
    """llama.vscode's ``createRequestPayload(true, ...)`` (updateExtraContext, same file and commit): the new
    chunks, nothing to predict, so that the next completion finds them in the cache."""
    chunks = [{"filename": "warm.py", "text": "def cube(x):\n    return x * x * x\n"}]
    body = {
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": chunks,
        "prompt": "",
        "n_predict": 0,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1,
    }
    warm = ok(post(fim_server, "/infill", body))
    assert warm["content"] == "" and warm["tokens_predicted"] == 0
    assert warm["tokens_evaluated"] == layout_tokens(fim_server, "", "", "", chunks)
    completion = ok(post(fim_server, "/infill", llama_vscode_body(PREFIX, SUFFIX, "", chunks, nindent=0)))
    # the chunks, and the layout's head before them, come from the cache
    assert completion["timings"]["cache_n"] >= layout_tokens(fim_server, "", "", "", chunks) - 4


def test_typing_one_more_character_reuses_the_cached_prompt(fim_server: Server) -> None:
    first = ok(post(fim_server, "/infill", llama_vscode_body(PREFIX, SUFFIX, "    retur", EXTRA, nindent=4)))
    second = ok(post(fim_server, "/infill", llama_vscode_body(PREFIX, SUFFIX, "    return", EXTRA, nindent=4)))
    cached = second["timings"]["cache_n"]
    # everything up to where the typed line differs comes from the cache; only the rest is computed
    assert cached >= layout_tokens(fim_server, PREFIX, "", "", EXTRA) - 2, (first["timings"], second["timings"])
    assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - cached
    assert second["timings"]["prompt_n"] < second["tokens_evaluated"] / 2


def test_a_stream_sends_the_same_text_as_one_answer(fim_server: Server) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "    return", "n_predict": 12}
    body |= {"temperature": 0, "cache_prompt": False}
    whole = ok(post(fim_server, "/infill", body))
    reply = post(fim_server, "/infill", {**body, "stream": True})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(block.removeprefix("data: ")) for block in reply.text.split("\n\n") if block.strip()]
    assert all(not e["stop"] for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["tokens_predicted"] == whole["tokens_predicted"]


def test_openai_completions_with_a_suffix_fill_in_the_middle_as_infill_does(fim_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{fim_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    completion = client.completions.create(
        model="smollm2-fim",
        prompt=PREFIX,
        suffix=SUFFIX,
        max_tokens=12,
        temperature=0,
        extra_body={"cache_prompt": False},
    )
    infill = ok(
        post(
            fim_server,
            "/infill",
            {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0, "cache_prompt": False},
        )
    )
    assert completion.choices[0].text == infill["content"] and infill["content"]
    assert completion.usage is not None and completion.usage.prompt_tokens == layout_tokens(fim_server, PREFIX, SUFFIX)


# --- refusals ---------------------------------------------------------------------------------------------------


def test_a_model_without_fim_tokens_is_refused_with_a_clear_400(fim_server: Server, smollm2: Manifest) -> None:
    body = {"model": smollm2.name, "input_prefix": PREFIX, "input_suffix": SUFFIX}
    message = assert_llamacpp_error(post(fim_server, "/infill", body), 400, "invalid_request_error")
    assert "fill-in-the-middle" in message and smollm2.name in message
    reply = post(fim_server, "/v1/completions", {"model": smollm2.name, "prompt": PREFIX, "suffix": SUFFIX})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "model", reply.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input_suffix": SUFFIX}, "input_prefix"),
        ({"input_prefix": PREFIX}, "input_suffix"),
        ({"input_prefix": 5, "input_suffix": SUFFIX}, "input_prefix"),
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": ["x"]}, "prompt"),
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": "util.py"}, "input_extra"),
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"filename": "a.py"}]}, "input_extra"),
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_indent": -1}, "n_indent"),
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "samplers": ["mirostat"]}, "samplers"),
    ],
)
def test_bad_input_is_a_400_in_llama_servers_shape_naming_the_field(
    fim_server: Server, body: dict[str, Any], field: str
) -> None:
    assert field in assert_llamacpp_error(post(fim_server, "/infill", body), 400, "invalid_request_error")


def test_a_prompt_past_the_context_is_refused_with_the_numbers(fim_server: Server) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "x = 1\n" * CTX}
    reply = post(fim_server, "/infill", body)
    assert_llamacpp_error(reply, 400, "exceed_context_size_error")
    assert reply.json()["error"]["n_ctx"] == CTX and reply.json()["error"]["n_prompt_tokens"] >= CTX


def test_a_prefix_longer_than_the_batch_is_cut_to_its_last_three_quarters_as_llama_server_does(
    fim_server: Server,
) -> None:
    long_prefix = "".join(f"value_{i} = {i}\n" for i in range(900))  # thousands of tokens, past the context
    answer = ok(post(fim_server, "/infill", {"input_prefix": long_prefix, "input_suffix": "", "n_predict": 1}))
    assert n_tokens(fim_server, long_prefix) > CTX
    # the layout's fixed tokens, 3/4 of a 2048-token batch (llama-server's default, and ours) of prefix, no suffix
    fixed = layout_tokens(fim_server, "", "")
    assert answer["tokens_evaluated"] == fixed + 3 * 2048 // 4


def test_an_infill_arriving_while_a_chat_streams_on_the_same_model_does_not_wait_for_the_chat(
    smollm2_server: Server, smollm2_fim: Manifest
) -> None:
    """A keystroke's /infill is served beside a long chat on the same model (the session server has 4 slots): it
    is answered while the chat is still streaming, its first chunk far from its last."""
    chat_tokens = 400
    body = {
        "model": smollm2_fim.name,
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
        "max_tokens": chat_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=300) as chat:
        assert chat.status_code == 200
        lines = chat.iter_lines()
        received = 0
        for line in lines:
            received += line.startswith("data: {")
            if received == 4:  # the chat is generating: type a character now
                break
        infill = {"model": smollm2_fim.name, "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8}
        answer = ok(post(smollm2_server, "/infill", infill))
        assert answer["tokens_predicted"] >= 1 and answer["model"] == smollm2_fim.name
        # the infill is done; the chat is not: it is still decoding, most of its tokens still to come
        response = httpx.get(f"{smollm2_server.url}/slots", params={"model": smollm2_fim.name}, timeout=30)
        assert response.status_code == 200, response.text
        slots: list[dict[str, Any]] = response.json()
        decoding = [slot["next_token"][0]["n_decoded"] for slot in slots if slot["is_processing"]]
        assert decoding and max(decoding) < chat_tokens // 2, slots
        rest = [line for line in lines if line.startswith("data: {")]
    assert received + len(rest) >= chat_tokens // 2
