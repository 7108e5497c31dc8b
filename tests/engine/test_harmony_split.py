"""A harmony model's (gpt-oss's) reply taken apart (engine/harmony.py): what gpt-oss writes after its generation
prompt, as llama.cpp's and Ollama's harmony parsers read it, and the property that matters for streaming: however
the text is cut into chunks, the same thinking, answer and calls come out, and no piece of a marker reaches either."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given
from hypothesis import strategies as st

from localinfer.engine.harmony import HarmonySplitter, read_header, split_harmony
from localinfer.engine.thinking_split import chat_reply
from localinfer.models.metadata.thinking import HARMONY
from localinfer.types import TokenChunk, TokenStream, Tool, ToolCall, Usage

PROMPT = "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"
REPLY = "<|channel|>analysis<|message|>User asks weather.<|end|><|start|>assistant<|channel|>final<|message|>Sunny."
CALL = (
    "<|channel|>analysis<|message|>Need the tool.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
)
WEATHER = Tool("get_weather", "The weather of a city", {"type": "object"})


def split(pieces: list[str], *, prefix: str = "<|start|>assistant", separate: bool = True) -> tuple[str, str]:
    splitter = HarmonySplitter(prefix, separate=separate, names=frozenset({"get_weather"}))
    thinking, answer = [], []
    for piece in pieces:
        t, a = splitter.feed(piece)
        thinking.append(t)
        answer.append(a)
    t, a, _ = splitter.finish()
    return "".join(thinking) + t, "".join(answer) + a


def test_the_analysis_channel_is_thinking_and_the_final_channel_the_answer() -> None:
    assert split([REPLY]) == ("User asks weather.", "Sunny.")


def test_thinking_the_prompt_opened_ends_at_its_end_marker() -> None:
    prefix = "<|start|>assistant<|channel|>analysis<|message|>"
    assert split(["Hmm.<|end|><|start|>assistant<|channel|>final<|message|>Yes."], prefix=prefix) == ("Hmm.", "Yes.")


def test_a_reply_straight_to_the_final_channel_has_no_thinking() -> None:
    assert split(["<|channel|>final<|message|>Paris."]) == ("", "Paris.")


def test_a_reply_cut_while_thinking_has_no_answer() -> None:
    assert split(["<|channel|>analysis<|message|>Let me see. First"]) == ("Let me see. First", "")


def test_several_analysis_messages_are_all_thinking_and_a_preamble_is_answer() -> None:
    text = (
        "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c"
    )
    assert split([text]) == ("ab", "Checking.c")


def test_a_reply_that_writes_no_header_is_all_answer_as_written() -> None:
    assert split(['{"city": "Paris"}']) == ("", '{"city": "Paris"}')


def test_a_reply_to_a_prompt_without_a_start_keeps_its_spaces_in_whatever_pieces_they_come() -> None:
    # a template given in place of gpt-oss's own (--chat-template) leaves the reply outside any message
    assert split(["Hello", " ", "there", " \n", "friend."], prefix="") == ("", "Hello there \nfriend.")


def test_whitespace_between_messages_is_not_answer() -> None:
    text = "<|channel|>analysis<|message|>a<|end|>\n<|start|>assistant<|channel|>final<|message|>b"
    assert split([text[:36], text[36:38], text[38:]]) == ("a", "b")


def test_thinking_left_in_the_answer_keeps_its_markers_as_llama_server_does() -> None:
    assert split([REPLY], separate=False) == ("", "<|channel|>analysis<|message|>User asks weather.<|end|>Sunny.")


def test_a_header_names_its_role_channel_and_recipient_wherever_the_recipient_is() -> None:
    assert read_header("assistant<|channel|>commentary to=functions.f <|constrain|>json") == read_header(
        "assistant to=functions.f<|channel|>commentary json"
    )
    header = read_header("assistant to=functions.f<|channel|>commentary json")
    assert (header.role, header.channel, header.recipient) == ("assistant", "commentary", "functions.f")


@given(st.lists(st.integers(min_value=0, max_value=len(REPLY)), max_size=12))
def test_any_chunking_gives_the_same_split_and_no_piece_of_a_marker(cuts: list[int]) -> None:
    bounds = sorted({0, len(REPLY), *cuts})
    pieces = [REPLY[a:b] for a, b in itertools.pairwise(bounds)]
    splitter = HarmonySplitter("<|start|>assistant")
    sent = [splitter.feed(piece) for piece in pieces]
    assert not any("<|" in t or "|>" in t or "<|" in a or "|>" in a for t, a in sent)
    assert split(pieces) == ("User asks weather.", "Sunny.")


def run(texts: list[str], *, tools: tuple[Tool, ...] = (WEATHER,), separate: bool = True) -> list[TokenChunk]:
    """What ``split_harmony`` makes of a model that writes ``texts`` (one token each) after PROMPT."""
    chunks = [TokenChunk(t, tokens=(i,)) for i, t in enumerate(texts[:-1])]
    chunks.append(TokenChunk(texts[-1], tokens=(99,), finish_reason="stop", usage=Usage(10, len(texts))))

    async def source() -> TokenStream:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[TokenChunk]:
        return [c async for c in split_harmony(source(), PROMPT, separate=separate, tools=tools)]

    return asyncio.run(collect())


def test_a_call_on_the_commentary_channel_is_a_tool_call_and_no_text() -> None:
    out = run([CALL])
    assert out[-1].finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in out[-1].tool_calls] == [("get_weather", {"city": "Paris"})]
    assert "".join(c.text for c in out) == ""
    assert "".join(c.reasoning for c in out) == "Need the tool."


def test_a_call_of_a_tool_not_offered_is_dropped() -> None:
    out = run([CALL], tools=())
    assert (out[-1].finish_reason, out[-1].tool_calls, "".join(c.text for c in out)) == ("stop", (), "")


def test_usage_counts_the_tokens_of_the_thinking_not_its_markers() -> None:
    pieces = ["<|channel|>", "analysis", "<|message|>", "We", " think", ".", "<|end|>", "<|start|>", "assistant"]
    pieces += ["<|channel|>", "final", "<|message|>", "Yes", "."]
    assert run(pieces)[-1].usage == Usage(10, len(pieces), reasoning_tokens=3)


def test_every_chunk_still_comes_with_its_tokens() -> None:
    pieces = ["<|channel|>analysis<|message|>", "a", "<|end|>", "<|start|>assistant<|channel|>final<|message|>", "b"]
    assert [c.tokens for c in run(pieces)] == [(0,), (1,), (2,), (3,), (99,)]


def test_a_chat_reply_of_a_harmony_model_reads_calls_from_its_commentary() -> None:
    async def source() -> TokenStream:
        yield TokenChunk(CALL, finish_reason="stop", usage=Usage(5, 9))

    async def collect() -> list[TokenChunk]:
        reply = chat_reply(source(), HARMONY, thinking_open=False, separate=True, prompt=PROMPT, tools=(WEATHER,))
        return [c async for c in reply]

    out = asyncio.run(collect())
    assert [c.name for c in out[-1].tool_calls] == ["get_weather"]
    assert isinstance(out[-1].tool_calls[0], ToolCall)
