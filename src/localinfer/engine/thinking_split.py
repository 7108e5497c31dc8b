"""A reasoning model's thinking, taken out of its answer once, as it streams, for every dialect and the app.

A reasoning model writes ``<think> thinking </think> answer`` (its own markers: ``ModelFacts.thinking``). Its
template may open the block in the prompt (DeepSeek-R1, Qwen3's thinking models), so the text starts inside it; or
the model opens it itself. Thinking comes only first: once the model writes anything else, or closes the block,
the rest is answer, markers and all. What may still turn into a marker (a ``<thi`` at the end of a chunk) is held
back until it is known, so no marker ever reaches a client in pieces. Whitespace at the end of the thinking is
dropped and the rest kept as written, as llama-server keeps it; Ollama also drops the whitespace that starts the
thinking and the answer after it (``trimmed``). A reply cut while thinking has an empty answer.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from contextlib import aclosing

from localinfer.engine.harmony import split_harmony
from localinfer.engine.thoughts import ThoughtCounter
from localinfer.engine.tools import read_tool_calls
from localinfer.types import Thinking, ThinkingMarkers, TokenStream, Tool


class _Part(enum.Enum):
    START = "start"  # nothing but whitespace yet: the model may still open its thinking
    THINKING = "thinking"
    ANSWER = "answer"


class ReasoningSplitter:
    """Splits a reply into thinking and answer as it comes: ``feed`` each piece of text, then ``finish``; each
    returns the ``(thinking, answer)`` text that is sure by then."""

    def __init__(self, markers: ThinkingMarkers, *, inside: bool) -> None:
        self._markers = markers
        self._part = _Part.THINKING if inside else _Part.START
        self._held = ""
        self._position = 0  # where ``_held`` starts in all the text fed
        self.spans: list[tuple[int, int | None]] = [(0, None)] if inside else []  # where thinking ran (None: on)

    @property
    def thinking(self) -> bool:
        """The text now is thinking."""
        return self._part is _Part.THINKING

    def feed(self, text: str) -> tuple[str, str]:
        self._held += text
        thinking: list[str] = []
        answer: list[str] = []
        while True:
            if self._part is _Part.START:
                opened = self._held.lstrip()
                if opened.startswith(self._markers.open):
                    self._drop(len(self._held) - len(opened) + len(self._markers.open))
                    self._part = _Part.THINKING
                    self.spans.append((self._position, None))
                    continue
                if self._markers.open.startswith(opened):  # whitespace, or a marker begun: wait and see
                    break
                self._part = _Part.ANSWER  # no thinking: the answer as written
                continue
            if self._part is _Part.THINKING:
                end = self._held.find(self._markers.close)
                if end >= 0:
                    thinking.append(self._held[:end].rstrip())
                    self.spans[-1] = (self.spans[-1][0], self._position + end)
                    self._drop(end + len(self._markers.close))
                    self._part = _Part.ANSWER
                    continue
                sure = _before_partial(self._held, self._markers.close).rstrip()  # trailing spaces: wait and see
                thinking.append(sure)
                self._drop(len(sure))
                break
            answer.append(self._held)
            self._drop(len(self._held))
            break
        return "".join(thinking), "".join(answer)

    def _drop(self, n: int) -> None:
        self._held = self._held[n:]
        self._position += n

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        if self._part is _Part.THINKING:
            return held.rstrip(), ""
        return "", held


def _before_partial(text: str, marker: str) -> str:
    """``text`` without a tail that could be the start of ``marker``."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return text[:-length]
    return text


async def split_reasoning(chunks: TokenStream, markers: ThinkingMarkers, *, inside: bool) -> TokenStream:
    """``chunks`` with the thinking moved from ``text`` to ``reasoning`` (``inside``: the prompt opened it). Every
    chunk still comes, with its tokens and log-probabilities; the last one's usage counts the tokens thought in
    (``ThoughtCounter``)."""
    splitter = ReasoningSplitter(markers, inside=inside)
    counter = ThoughtCounter()
    async with aclosing(chunks):
        async for chunk in chunks:
            counter.add(chunk)
            reasoning, text = splitter.feed(chunk.text)
            if chunk.finish_reason is not None:
                more_reasoning, more_text = splitter.finish()
                reasoning, text = reasoning + more_reasoning, text + more_text
            usage = counter.counted(chunk.usage, splitter.spans)
            yield dataclasses.replace(chunk, text=text, reasoning=chunk.reasoning + reasoning, usage=usage)


async def trimmed(chunks: TokenStream) -> TokenStream:
    """``chunks`` (split already) without the whitespace that starts the thinking, nor the whitespace that starts
    the answer after thinking, as Ollama sends them."""
    thought = thinking_begun = answer_begun = False
    async with aclosing(chunks):
        async for chunk in chunks:
            reasoning, text = chunk.reasoning, chunk.text
            thought = thought or bool(reasoning)
            if not thinking_begun and reasoning:
                reasoning = reasoning.lstrip()
                thinking_begun = bool(reasoning)
            if thought and not answer_begun and text:
                text = text.lstrip()
            answer_begun = answer_begun or bool(text)
            yield dataclasses.replace(chunk, reasoning=reasoning, text=text)


async def opened_with(chunks: TokenStream, opening: str) -> TokenStream:
    """``chunks`` with ``opening`` (the thinking's start the prompt wrote: ``<think>\n``) before the first text,
    for thinking left in the answer: the answer then reads as the model's whole turn, as llama-server sends it."""
    async with aclosing(chunks):
        async for chunk in chunks:
            if opening and (chunk.text or chunk.finish_reason is not None):
                chunk, opening = dataclasses.replace(chunk, text=opening + chunk.text), ""
            yield chunk


def honoured(thinking: Thinking, markers: ThinkingMarkers | None) -> Thinking:
    """``thinking`` as a model of ``markers`` can honour it: gpt-oss (harmony) always thinks, so thinking turned
    off there is as if nothing were asked (its budget still holds), as llama-server and Ollama serve it."""
    if markers is not None and markers.harmony and thinking.enabled is False:
        return dataclasses.replace(thinking, enabled=None)
    return thinking


def chat_reply(
    chunks: TokenStream,
    markers: ThinkingMarkers | None,
    *,
    thinking_open: bool,
    separate: bool,
    prompt: str,
    tools: Sequence[Tool],
) -> TokenStream:
    """A chat's generated ``chunks`` (the reply to ``prompt``) as its reply: a reasoning model's (of ``markers``)
    thinking taken out first (``separate``), or left in the answer, opened as the prompt opened it (when
    ``thinking_open``); then the calls to ``tools`` read from the answer alone, so JSON the model quotes while
    thinking is never taken for a call. A harmony model's reply is read by engine/harmony.py, its calls too."""
    if markers is not None and markers.harmony:
        chunks = split_harmony(chunks, prompt, separate=separate, tools=tools)
    elif markers is not None and separate:
        chunks = split_reasoning(chunks, markers, inside=thinking_open)
    elif markers is not None and thinking_open:
        chunks = opened_with(chunks, prompt[prompt.rfind(markers.open) :])
    return read_tool_calls(chunks, tools) if tools else chunks
