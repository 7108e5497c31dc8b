"""Log-probabilities on chat and text completions, through a real server with the real SmolLM2 and the official
openai client: every logprob is at most 0, at temperature 0 the chosen token is the most likely one, the tokens
spell the text, and streamed chunks carry the same figures as one answer."""

from __future__ import annotations

import math

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]


def test_chat_logprobs_spell_the_answer_and_the_chosen_token_is_the_top_one(
    client: openai.OpenAI, model_name: str
) -> None:
    reply = client.chat.completions.create(
        model=model_name, messages=ASK, temperature=0, max_tokens=12, logprobs=True, top_logprobs=3
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    entries = choice.logprobs.content
    assert reply.usage is not None and len(entries) == reply.usage.completion_tokens
    assert "".join(e.token for e in entries) == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen token is the most likely
        assert math.isclose(entry.top_logprobs[0].logprob, entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
        assert bytes(entry.bytes or []).decode("utf-8", errors="replace") == entry.token
    assert sum(math.exp(t.logprob) for t in entries[0].top_logprobs) <= 1.0 + 1e-6


def test_streamed_logprobs_are_those_of_one_answer(client: openai.OpenAI, model_name: str) -> None:
    kwargs = {"model": model_name, "messages": ASK, "temperature": 0, "max_tokens": 12, "logprobs": True}
    whole = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    chunks = list(client.chat.completions.create(**kwargs, stream=True))  # type: ignore[call-overload]
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content or []]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [
        (e.token, round(e.logprob, 4)) for e in whole.choices[0].logprobs.content
    ]


def test_no_logprobs_unless_asked(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(model=model_name, messages=ASK, temperature=0, max_tokens=4)
    assert reply.choices[0].logprobs is None


def test_completion_logprobs_in_the_legacy_shape(client: openai.OpenAI, model_name: str) -> None:
    prompt = "The capital of France is"
    reply = client.completions.create(
        model=model_name, prompt=prompt, temperature=0, max_tokens=6, logprobs=2, echo=True
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs and logprobs.top_logprobs
    assert prompt + "".join(logprobs.tokens) == reply.choices[0].text
    assert all(lp <= 0 for lp in logprobs.token_logprobs)
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs, strict=True):
        assert max(top, key=lambda t: top[t]) == token
    assert logprobs.text_offset is not None and logprobs.text_offset[0] == len(prompt)


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("/v1/completions", {"logprobs": 21}, "logprobs"),
        ("/v1/completions", {"logprobs": -1}, "logprobs"),
    ],
)
def test_logprobs_out_of_range_are_400s(
    smollm2_server: Server, model_name: str, path: str, extra: dict[str, object], param: str
) -> None:
    body = {"model": model_name, "max_tokens": 2, **extra}
    body |= {"messages": ASK} if "chat" in path else {"prompt": "Hi"}
    reply = httpx.post(f"{smollm2_server.url}{path}", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
