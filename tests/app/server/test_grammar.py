"""``grammar`` (GBNF, llama.cpp's grammar format) on a real ``localinfer serve`` with SmolLM2, through the same
constraint engine as JSON schemas: on ``/completion`` the same greedy text as llama-server's on the same file, on
the OpenAI routes through the official client; a grammar that cannot be read is a 400 naming ``grammar``.

llama-server is the one bench/build-llama-cpp builds from the llama.cpp source llama-cpp-python vendors, started
with flash attention on as our contexts have it (see test_infill_parity.py); each request computes its whole prompt.
"""

from __future__ import annotations

import json
import re
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

YES_NO = 'root ::= "yes" | "no"'
QUESTION = "<|im_start|>user\nIs the sky blue? Answer yes or no.<|im_end|>\n<|im_start|>assistant\n"
GREEDY: dict[str, Any] = {"n_predict": 24, "temperature": 0, "cache_prompt": False}
# (prompt, grammar) pairs asked of both servers
CASES: dict[str, tuple[str, str]] = {
    "yes or no": (QUESTION, YES_NO),
    "a number of apples": ("I counted the apples: there were", 'root ::= " " [1-9] [0-9]? " apples"'),
    "a list of colours": (
        "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
        'root ::= item ", " item ", " item\nitem ::= [a-z]+',
    ),
    "a date": (
        "The first moon landing was on",
        'root ::= " " year "-" month "-" day\nyear ::= [0-9] [0-9] [0-9] [0-9]\n'
        'month ::= "0" [1-9] | "1" [0-2]\nday ::= [0-2] [0-9] | "3" [01]',
    ),
}
PATTERNS = {
    "yes or no": r"yes|no",
    "a number of apples": r" [1-9][0-9]? apples",
    "a list of colours": r"[a-z]+, [a-z]+, [a-z]+",
    "a date": r" [0-9]{4}-(0[1-9]|1[0-2])-([0-2][0-9]|3[01])",
}
BAD_GRAMMARS = [
    'root ::= "yes',  # an unterminated string
    'answer ::= "yes"',  # no root rule
    "root ::= yes",  # a rule that is not defined
    "root ::= [a-",  # an unterminated character class
    "   ",
]


def completion(url: str, prompt: str, grammar: str, **fields: Any) -> httpx.Response:
    body = {"prompt": prompt, "grammar": grammar, **GREEDY, **fields}
    return httpx.post(f"{url}/completion", json=body, timeout=300)


@pytest.fixture(scope="module")
def llama_answers(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's answers to CASES; it runs only while they are asked."""
    with llama_server(
        smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1", "-fa", "on"
    ) as url:
        answers = {}
        for name, (prompt, grammar) in CASES.items():
            reply = completion(url, prompt, grammar)
            assert reply.status_code == 200, reply.text
            answers[name] = reply.json()
    return answers


@pytest.mark.parametrize("case", list(CASES))
def test_completion_follows_the_grammar_as_llama_server_does(
    llama_answers: dict[str, Any], smollm2_server: Server, case: str
) -> None:
    prompt, grammar = CASES[case]
    reply = completion(smollm2_server.url, prompt, grammar)
    assert reply.status_code == 200, reply.text
    content = reply.json()["content"]
    assert re.fullmatch(PATTERNS[case], content), content
    assert content == llama_answers[case]["content"]


def test_generation_settings_show_the_grammar_as_llama_server_does(
    llama_answers: dict[str, Any], smollm2_server: Server
) -> None:
    reply = completion(smollm2_server.url, QUESTION, YES_NO)
    assert (
        reply.json()["generation_settings"]["grammar"] == llama_answers["yes or no"]["generation_settings"]["grammar"]
    )
    assert reply.json()["generation_settings"]["grammar"] == YES_NO


def test_the_grammar_ends_the_text_with_stop(smollm2_server: Server) -> None:
    answer = completion(smollm2_server.url, QUESTION, YES_NO, n_predict=-1).json()
    assert answer["content"] in ("yes", "no")
    assert answer["stop"] is True and answer["stop_type"] != "limit"


def test_a_streamed_completion_follows_the_grammar(smollm2_server: Server) -> None:
    body = {"prompt": QUESTION, "grammar": YES_NO, **GREEDY, "stream": True}
    with httpx.stream("POST", f"{smollm2_server.url}/completion", json=body, timeout=300) as reply:
        assert reply.status_code == 200
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    assert "".join(event["content"] for event in events) in ("yes", "no")
    assert events[-1]["stop"] is True


def test_chat_completions_follows_a_grammar_from_the_openai_client(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
        temperature=0,
        extra_body={"grammar": YES_NO},
    )
    assert reply.choices[0].message.content in ("yes", "no")
    assert reply.choices[0].finish_reason == "stop"


def test_a_streamed_chat_follows_the_grammar(client: openai.OpenAI, model_name: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
            temperature=0.7,
            seed=3,
            stream=True,
            extra_body={"grammar": YES_NO},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) in ("yes", "no")


def test_v1_completions_follows_a_grammar_from_the_openai_client(client: openai.OpenAI, model_name: str) -> None:
    prompt, grammar = CASES["a date"]
    reply = client.completions.create(
        model=model_name, prompt=prompt, max_tokens=24, temperature=0, extra_body={"grammar": grammar}
    )
    assert re.fullmatch(PATTERNS["a date"], reply.choices[0].text), reply.choices[0].text


@pytest.mark.parametrize("grammar", BAD_GRAMMARS)
def test_a_grammar_that_cannot_be_read_is_a_400_naming_grammar(smollm2_server: Server, grammar: str) -> None:
    reply = completion(smollm2_server.url, QUESTION, grammar)
    assert reply.status_code == 400, reply.text
    assert "grammar" in reply.json()["error"]["message"]


def test_the_openai_client_sees_a_bad_grammar_as_a_bad_request_on_param_grammar(
    client: openai.OpenAI, model_name: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            extra_body={"grammar": 'root ::= "yes'},
        )
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "grammar"


def test_a_grammar_and_a_response_format_together_are_a_400_naming_grammar(
    client: openai.OpenAI, model_name: str
) -> None:
    """llama-server refuses a json_schema with a grammar ("Cannot use both json_schema and grammar") and, given a
    response_format instead, follows the grammar alone: here both are refused the same way, never one dropped."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            response_format={"type": "json_object"},
            extra_body={"grammar": YES_NO},
        )
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "grammar"


def test_a_grammar_with_tools_is_a_400_naming_grammar(client: openai.OpenAI, model_name: str) -> None:
    """As llama-server: "Cannot use custom grammar constraints with tools."."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "What is the weather?"}],
            max_tokens=4,
            tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            extra_body={"grammar": YES_NO},
        )
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "grammar"


def test_the_server_serves_on_after_refusing_a_grammar(smollm2_server: Server) -> None:
    completion(smollm2_server.url, QUESTION, BAD_GRAMMARS[0])
    reply = completion(smollm2_server.url, QUESTION, YES_NO)
    assert reply.status_code == 200 and reply.json()["content"] in ("yes", "no")


@pytest.fixture(scope="module")
def onnx_server(smollm2_onnx: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_onnx.name, test_home, tmp_path_factory.mktemp("serve-onnx")) as server:
        yield server


def test_an_onnx_model_refuses_a_grammar_with_a_400_naming_it(onnx_server: Server, smollm2_onnx: Manifest) -> None:
    """The ONNX backend holds output to JSON schemas only: a grammar is refused, never dropped."""
    body = {"model": smollm2_onnx.name, "prompt": QUESTION, "max_tokens": 4, "grammar": YES_NO}
    reply = httpx.post(f"{onnx_server.url}/v1/completions", json=body, timeout=300)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "grammar"
