"""The thinking of a reasoning model taken out of its answer (engine/thinking_split.py): examples of what models write,
and the property that matters for streaming: however the text is cut into chunks, the same thinking and answer
come out, and no piece of a marker ever reaches the answer."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from localinfer.engine.thinking_split import ReasoningSplitter, chat_reply, split_reasoning, trimmed
from localinfer.types import ThinkingMarkers, TokenChunk, TokenStream, Tool, Usage

THINK = ThinkingMarkers("<think>", "</think>")


def split(pieces: list[str], *, inside: bool, markers: ThinkingMarkers = THINK) -> tuple[str, str]:
    splitter = ReasoningSplitter(markers, inside=inside)
    thinking, answer = [], []
    for piece in pieces:
        t, a = splitter.feed(piece)
        thinking.append(t)
        answer.append(a)
    t, a = splitter.finish()
    return "".join(thinking) + t, "".join(answer) + a


def test_thinking_the_model_opens_is_taken_out_of_the_answer() -> None:
    assert split(["<think>\nLet me see.\n</think>\n\nParis."], inside=False) == ("\nLet me see.", "\n\nParis.")


def test_thinking_the_prompt_opened_ends_at_the_closing_marker() -> None:
    assert split(["Let me see.\n</think>\n\nParis."], inside=True) == ("Let me see.", "\n\nParis.")


def test_a_reply_without_thinking_is_all_answer_as_written() -> None:
    assert split(["  Paris is <think> the capital."], inside=False) == ("", "  Paris is <think> the capital.")


def test_a_reply_cut_while_thinking_has_no_answer() -> None:
    assert split(["Let me see. First, the"], inside=True) == ("Let me see. First, the", "")


def test_an_empty_thinking_block_gives_only_the_answer() -> None:
    assert split(["<think>\n\n</think>\n\nParis."], inside=False) == ("", "\n\nParis.")


def test_only_the_first_block_is_thinking() -> None:
    text = "<think>a</think>b <think>c</think>"
    assert split([text], inside=False) == ("a", "b <think>c</think>")


def test_other_markers_split_the_same_way() -> None:
    markers = ThinkingMarkers("[THINK]", "[/THINK]")
    assert split(["[THINK]hmm[/THI", "NK]yes"], inside=False, markers=markers) == ("hmm", "yes")


def test_a_marker_cut_between_chunks_never_reaches_either_part() -> None:
    splitter = ReasoningSplitter(THINK, inside=True)
    assert splitter.feed("So it is Paris.</thi") == ("So it is Paris.", "")
    assert splitter.feed("nk>Paris") == ("", "Paris")


@given(
    thinking=st.text(alphabet="ab <>/\n", max_size=20),
    answer=st.text(alphabet="ab <>/\n", max_size=20),
    opened_by_prompt=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=8),
)
def test_any_cut_into_chunks_splits_as_the_whole_does(
    thinking: str, answer: str, opened_by_prompt: bool, cuts: list[int]
) -> None:
    text = ("" if opened_by_prompt else "<think>") + thinking.replace("</think>", "") + "</think>" + answer
    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    assert split(pieces, inside=opened_by_prompt) == split([text], inside=opened_by_prompt)
    whole_thinking, whole_answer = split([text], inside=opened_by_prompt)
    assert whole_answer == answer
    assert "</think>" not in whole_thinking


def test_ollama_trims_the_space_that_starts_the_thinking_and_the_answer() -> None:
    chunks = [TokenChunk("", reasoning="\n"), TokenChunk("", reasoning="Hmm\n"), TokenChunk("\n\nYes\n")]

    async def source() -> TokenStream:
        for chunk in chunks:
            yield chunk

    async def run() -> list[TokenChunk]:
        return [chunk async for chunk in trimmed(source())]

    out = asyncio.run(run())
    assert ["".join(c.reasoning for c in out), "".join(c.text for c in out)] == ["Hmm\n", "Yes\n"]


def test_the_stream_keeps_every_chunk_and_counts_the_thinking_tokens_but_not_the_closing_marker() -> None:
    chunks = [
        TokenChunk("Hmm", tokens=(1,)),
        TokenChunk(" ok", tokens=(2,)),
        TokenChunk("</think>", tokens=(3,)),
        TokenChunk("\n\nYes", tokens=(4, 5)),
        TokenChunk(".", finish_reason="stop", usage=Usage(10, 6), tokens=(6,)),
    ]

    async def source() -> TokenStream:
        for chunk in chunks:
            yield chunk

    async def run() -> list[TokenChunk]:
        return [chunk async for chunk in split_reasoning(source(), THINK, inside=True)]

    out = asyncio.run(run())
    assert [c.tokens for c in out] == [c.tokens for c in chunks]
    assert "".join(c.reasoning for c in out) == "Hmm ok"
    assert "".join(c.text for c in out) == "\n\nYes."
    assert out[-1].usage == Usage(10, 6, reasoning_tokens=2)


def _reply(texts: list[str], *, inside: bool) -> list[TokenChunk]:
    """What ``chat_reply`` makes of a model that writes ``texts``, with a weather tool offered."""
    chunks = [TokenChunk(t) for t in texts[:-1]] + [TokenChunk(texts[-1], finish_reason="stop", usage=Usage(5, 9))]

    async def source() -> TokenStream:
        for chunk in chunks:
            yield chunk

    async def run() -> list[TokenChunk]:
        reply = chat_reply(source(), THINK, thinking_open=inside, separate=True, prompt="", tools=[WEATHER])
        return [chunk async for chunk in reply]

    return asyncio.run(run())


WEATHER = Tool("get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_a_call_the_model_quotes_while_thinking_is_not_taken_for_a_call() -> None:
    out = _reply(["I could write ", CALL, " but no.</think>", "It is sunny."], inside=True)
    assert out[-1].finish_reason == "stop" and out[-1].tool_calls == ()
    assert CALL in "".join(c.reasoning for c in out)
    assert "".join(c.text for c in out) == "It is sunny."


def test_a_call_written_after_the_thinking_is_read() -> None:
    out = _reply(["Paris, so", "</think>\n\n", CALL], inside=True)
    assert out[-1].finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in out[-1].tool_calls] == [("get_weather", {"city": "Paris"})]
    assert "".join(c.reasoning for c in out) == "Paris, so" and "".join(c.text for c in out) == ""
