"""A reasoning model's thinking on Anthropic's ``/v1/messages`` (extended thinking), through a real server and the
official anthropic client: ``thinking: {"type": "enabled", "budget_tokens": N}`` budgets it, a ``thinking`` block
comes before the text block (streamed as ``thinking_delta`` events and a ``signature_delta`` before the block
closes), ``{"type": "disabled"}`` turns it off through the template, and an earlier turn's thinking blocks go
back to the template. The model is SmolLM2 made a reasoning model (tests/reasoning_model.py): it never closes its
thinking itself, so the thinking under a budget of N is exactly the first N tokens it writes (tests/app/server/
thinking.py asks the same server raw what those are)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message, MessageParam, ThinkingConfigEnabledParam

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, budgeted, prompt_of, raw, tokens_of

pytestmark = pytest.mark.model

ASK: list[MessageParam] = [{"role": "user", "content": QUESTION[0]["content"]}]
FOLLOW_UP: list[dict[str, Any]] = [{"role": "user", "content": "And of Spain?"}]
GREEDY = {"temperature": 0}  # not a keyword of the client's create(): sent as it is, in extra_body
BUDGET, LIMIT = 5, 24


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_think.name, test_home, tmp_path_factory.mktemp("serve-think"), "--parallel", "1") as running:
        yield running


@pytest.fixture(scope="module")
def claude(server: Server) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    yield client
    client.close()


def ask(claude: anthropic.Anthropic, max_tokens: int = LIMIT, **fields: Any) -> Message:
    message: Message = claude.messages.create(
        model="", messages=ASK, max_tokens=max_tokens, extra_body=GREEDY, **fields
    )
    return message


def answer(claude: anthropic.Anthropic, stream: bool, max_tokens: int, **fields: Any) -> Message:
    """The message of a greedy request of ASK, as ``create`` answers it or as the client gathers it streamed."""
    if not stream:
        return ask(claude, max_tokens, **fields)
    with claude.messages.stream(model="", messages=ASK, max_tokens=max_tokens, extra_body=GREEDY, **fields) as streamed:
        return streamed.get_final_message()


def blocks(message: Message) -> list[dict[str, Any]]:
    """A message's content blocks as Anthropic's fields say them (the client's own fields left out)."""
    fields = {"thinking": ("thinking", "signature"), "text": ("text",)}
    return [{"type": b.type, **{f: getattr(b, f) for f in fields.get(b.type, ())}} for b in message.content]


def enabled(budget: int) -> ThinkingConfigEnabledParam:
    return {"type": "enabled", "budget_tokens": budget}


def raw_events(server: Server, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events of a streamed greedy ``/v1/messages`` of ASK, as (name, data)."""
    body = {"messages": ASK, "max_tokens": LIMIT, "stream": True, **GREEDY, **fields}
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
    return events


def shape(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each event as its name, block index and block or delta type; a run of the same delta read as one."""
    out: list[str] = []
    for name, data in events:
        if name == "content_block_start":
            step = f"start {data['index']} {data['content_block']['type']}"
        elif name == "content_block_delta":
            step = f"delta {data['index']} {data['delta']['type']}"
        elif name == "content_block_stop":
            step = f"stop {data['index']}"
        else:
            step = name
        if not out or out[-1] != step:
            out.append(step)
    return out


def test_a_budget_gives_a_thinking_block_of_that_many_tokens_then_the_text_block(
    server: Server, claude: anthropic.Anthropic
) -> None:
    message = ask(claude, thinking=enabled(BUDGET))
    thinking, answer = budgeted(server, BUDGET, LIMIT)
    assert [block.type for block in message.content] == ["thinking", "text"]
    first, second = message.content
    assert first.type == "thinking" and second.type == "text"
    assert (first.thinking, first.signature, second.text) == (thinking, "", answer)


def test_output_tokens_count_the_thinking_and_the_answer(server: Server, claude: anthropic.Anthropic) -> None:
    limit = BUDGET + 1 + 2  # the thinking, its forced end, and two tokens of the answer
    message = ask(claude, limit, thinking=enabled(BUDGET))
    assert blocks(message) == [
        {"type": "thinking", "thinking": budgeted(server, BUDGET, limit)[0], "signature": ""},
        {"type": "text", "text": budgeted(server, BUDGET, limit)[1]},
    ]
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", limit)


def test_the_stream_sends_the_thinking_block_signed_and_closed_before_the_text_block(server: Server) -> None:
    events = raw_events(server, thinking=enabled(BUDGET))
    assert shape(events) == [
        "message_start",
        "start 0 thinking",
        "delta 0 thinking_delta",
        "delta 0 signature_delta",
        "stop 0",
        "start 1 text",
        "delta 1 text_delta",
        "stop 1",
        "message_delta",
        "message_stop",
    ]
    thinking, answer = budgeted(server, BUDGET, LIMIT)
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == thinking
    assert [d["signature"] for d in deltas if d["type"] == "signature_delta"] == [""]
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == answer


def test_the_anthropic_client_reads_a_streamed_thinking_block_as_the_whole_message(
    claude: anthropic.Anthropic,
) -> None:
    whole = ask(claude, thinking=enabled(BUDGET))
    with claude.messages.stream(
        model="", messages=ASK, max_tokens=LIMIT, thinking=enabled(BUDGET), extra_body=GREEDY
    ) as stream:
        thought = "".join(e.thinking for e in stream if e.type == "thinking")
        final = stream.get_final_message()
    assert blocks(final) == blocks(whole)
    assert thought == blocks(whole)[0]["thinking"]
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_cut_while_thinking_has_only_its_thinking_block(
    server: Server, claude: anthropic.Anthropic, stream: bool
) -> None:
    thinking = raw(server, prompt_of(server), 8).rstrip()
    message = answer(claude, stream, 8, thinking=enabled(1024))  # a budget past max_tokens is served: never binds
    assert blocks(message) == [{"type": "thinking", "thinking": thinking, "signature": ""}]
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 8)


def test_without_thinking_in_the_request_the_model_thinks_as_the_server_defaults_say(
    server: Server, claude: anthropic.Anthropic
) -> None:
    message = ask(claude, 8)
    assert blocks(message) == [
        {"type": "thinking", "thinking": raw(server, prompt_of(server), 8).rstrip(), "signature": ""}
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_thinking_disabled_goes_through_the_template_and_no_thinking_block_comes(
    server: Server, claude: anthropic.Anthropic, stream: bool
) -> None:
    off = prompt_of(server, chat_template_kwargs={"enable_thinking": False})
    assert off.endswith("<think>\n\n</think>\n\n")
    assert raw(server, off, LIMIT) == ""  # after an empty thinking block this model ends its turn at once
    message = answer(claude, stream, LIMIT, thinking={"type": "disabled"})
    assert (blocks(message), message.stop_reason) == ([], "end_turn")


def test_count_tokens_counts_the_prompt_that_thinking_disabled_renders(
    server: Server, claude: anthropic.Anthropic
) -> None:
    on = claude.messages.count_tokens(model="", messages=ASK, thinking=enabled(BUDGET)).input_tokens
    off = claude.messages.count_tokens(model="", messages=ASK, thinking={"type": "disabled"}).input_tokens
    assert on == len(tokens_of(server, prompt_of(server)))
    assert off == len(tokens_of(server, prompt_of(server, chat_template_kwargs={"enable_thinking": False})))


def test_display_omitted_answers_the_thinking_block_without_its_text(claude: anthropic.Anthropic) -> None:
    shown = ask(claude, thinking=enabled(BUDGET))
    omitted = ask(claude, thinking={**enabled(BUDGET), "display": "omitted"})
    assert blocks(omitted) == [
        {"type": "thinking", "thinking": "", "signature": ""},
        blocks(shown)[1],
    ]


@pytest.mark.parametrize(
    ("thinking", "param"),
    [({"type": "between_tools"}, "thinking.type"), (enabled(-1), "thinking.budget_tokens")],
    ids=["unknown-type", "negative-budget"],
)
def test_thinking_that_cannot_be_honoured_is_a_400_naming_the_field(
    server: Server, thinking: dict[str, Any], param: str
) -> None:
    body = {"messages": ASK, "max_tokens": 8, "thinking": thinking}
    reply = httpx.post(f"{server.url}/v1/messages", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert param in reply.json()["error"]["message"]


KEEPS_THINKING = """\
{%- for message in messages %}<|im_start|>{{ message.role }}
{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def test_an_earlier_turns_thinking_goes_back_to_the_template_and_redacted_thinking_is_dropped(
    smollm2_think: Manifest, test_home: Path, tmp_path: Path
) -> None:
    template = tmp_path / "keeps-thinking.jinja"
    template.write_text(KEEPS_THINKING)

    def turns(*answer: dict[str, Any]) -> list[dict[str, Any]]:
        return [*QUESTION, {"role": "assistant", "content": list(answer)}, *FOLLOW_UP]

    thinking = {"type": "thinking", "thinking": "The user asks about France.", "signature": ""}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    text = {"type": "text", "text": "Paris."}
    written = {"type": "text", "text": "<think>\nThe user asks about France.\n</think>\n\nParis."}
    with serving(smollm2_think.name, test_home, tmp_path, "--chat-template-file", str(template)) as keeping:

        def count(messages: list[dict[str, Any]]) -> int:
            body = {"messages": messages}
            tokens: int = httpx.post(f"{keeping.url}/v1/messages/count_tokens", json=body, timeout=60).json()[
                "input_tokens"
            ]
            return tokens

        assert count(turns(thinking, redacted, text)) == count(turns(written)) > count(turns(text))
        assert count(turns(redacted, text)) == count(turns(text))
