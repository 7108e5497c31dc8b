"""gpt-oss's reply in OpenAI's harmony format, taken apart as it streams: thinking, answer and tool calls.

A harmony model writes messages, each ``<|start|>ROLE<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>
TEXT<|end|>``; its last one ends with ``<|return|>`` or, for a call, ``<|call|>`` (both end the generation, so
neither reaches the text). The prompt ends inside the first message (``<|start|>assistant``, or further when the
template opened a channel), so the reply is read from there. A message on ``analysis`` is thinking; on ``final``,
or ``commentary`` to nobody (a preamble), answer; one addressed ``to=functions.NAME`` is a call of ``NAME`` with
its text as the JSON arguments (on any channel, as llama.cpp and Ollama read it), when such a tool was offered
(other recipients, gpt-oss's built-in browser and python, are dropped, as llama.cpp drops them). Reasoning kept in
the answer (``separate`` False, llama-server's ``reasoning_format: none``) keeps each analysis message there as
written, ``<|channel|>analysis<|message|>`` to ``<|end|>``. What may still be a marker is held until it is known,
so no marker reaches a client in pieces. A reply that does not follow the format (text where the first header
should be: JSON a constraint forced) is all answer, as written.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any, Final

from localinfer.engine.thoughts import ThoughtCounter
from localinfer.engine.tools import new_call_id
from localinfer.types import TokenStream, Tool, ToolCall

log = logging.getLogger(__name__)

START: Final = "<|start|>"
CHANNEL: Final = "<|channel|>"
MESSAGE: Final = "<|message|>"
END: Final = "<|end|>"
CONSTRAIN: Final = "<|constrain|>"
HEADER_STARTS: Final = (CHANNEL, " to=", CONSTRAIN, " " + CONSTRAIN)  # what may follow a role


class _Part(enum.Enum):
    BETWEEN = "between"  # after a message's end: the next <|start|> (or stray text)
    HEADER = "header"  # after <|start|>: up to <|message|>
    BODY = "body"  # up to <|end|>
    LOOSE = "loose"  # not harmony: everything else is answer


@dataclasses.dataclass(frozen=True)
class Header:
    """What a message's header says: its role, channel and recipient (empty where it names none)."""

    role: str = ""
    channel: str = ""
    recipient: str = ""


def read_header(text: str) -> Header:
    """The header of a message, ``text`` being what comes between ``<|start|>`` and ``<|message|>``."""
    text = text.split(CONSTRAIN, 1)[0]
    channel = ""
    if CHANNEL in text:
        before, after = text.split(CHANNEL, 1)
        words = after.split()
        channel = words[0] if words else ""
        text = " ".join([before, *words[1:]])
    words = text.split()
    recipient = next((w[len("to=") :] for w in words if w.startswith("to=")), "")
    role = next((w for w in words if not w.startswith("to=")), "")
    return Header(role, channel, recipient)


class HarmonySplitter:
    """Splits a harmony reply into thinking, answer and calls as it comes: ``feed`` each piece of text, then
    ``finish``; each returns the ``(thinking, answer)`` text that is sure by then. ``prefix``: the end of the
    prompt from its last ``<|start|>``, read first and never returned. ``names``: the tools that may be called."""

    def __init__(self, prefix: str, *, separate: bool = True, names: frozenset[str] = frozenset()) -> None:
        self._separate = separate
        self._names = names
        self._part = _Part.BETWEEN
        self._held = ""
        self._header = Header()
        self._model_header = False  # the model has written some of the current header itself
        self._position = 0  # where ``_held`` starts in all the text fed
        self._calls: list[tuple[str, str]] = []  # (name, arguments as written)
        self._body_start = 0
        self.spans: list[tuple[int, int | None]] = []  # where thinking ran, in all the text fed (end None: open)
        self._given = 0  # of a header held, the length the prompt gave
        self._pending = self._read(prefix, model=False)  # what the prompt's part says, sent with the first piece
        self._given = len(self._held) if self._part is _Part.HEADER else 0

    @property
    def thinking(self) -> bool:
        """The text now is thinking."""
        return self._part is _Part.BODY and self._is_thinking()

    def feed(self, text: str) -> tuple[str, str]:
        thinking, answer = self._read(text, model=True)
        if self._pending != ("", ""):
            (thinking_before, answer_before), self._pending = self._pending, ("", "")
            thinking, answer = thinking_before + thinking, answer_before + answer
        return thinking, answer

    def finish(self) -> tuple[str, str, tuple[ToolCall, ...]]:
        """The text still held, as ``(thinking, answer)``, and the calls the reply made."""
        thinking, answer = [self._pending[0]], [self._pending[1]]
        held, self._held, self._pending = self._held, "", ("", "")
        if self._part is _Part.BODY:
            self._close_body(held, thinking, answer, ended=False)
        elif self._part is _Part.LOOSE:
            answer.append(held)
        return "".join(thinking), "".join(answer), self._made_calls()  # a header cut short is no text

    def _read(self, text: str, *, model: bool) -> tuple[str, str]:
        self._held += text
        thinking: list[str] = []
        answer: list[str] = []
        while self._step(thinking, answer, model=model):
            pass
        return "".join(thinking), "".join(answer)

    def _step(self, thinking: list[str], answer: list[str], *, model: bool) -> bool:
        """Reads what it can of the held text; True while there may be more to read at once."""
        held = self._held
        if self._part is _Part.LOOSE:
            answer.append(held)
            self._drop(len(held))
            return False
        if self._part is _Part.BETWEEN:
            at = held.find(START)
            if at >= 0:
                if held[:at].strip():  # stray text between messages: answer, as written
                    answer.append(held[:at])
                self._drop(at + len(START))
                self._part, self._header, self._model_header, self._given = _Part.HEADER, Header(), model, 0
                return True
            sure = _before_partial(held, START)
            if sure.strip():  # stray text, with the whitespace held before it
                answer.append(sure)
                self._drop(len(sure))
            return False  # whitespace is held: dropped before a <|start|>, kept before stray text
        if self._part is _Part.HEADER:
            at = held.find(MESSAGE)
            if model and not self._model_header:
                written = held[self._given :]
                if not any(s.startswith(written) or written.startswith(s) for s in HEADER_STARTS):
                    self._part = _Part.LOOSE  # the model writes no header: not harmony
                    self._drop(self._given)
                    return True
                self._model_header = any(written.startswith(s) for s in HEADER_STARTS)
            if at < 0:
                return False
            self._header = read_header(held[:at])
            self._drop(at + len(MESSAGE))
            self._part, self._body_start = _Part.BODY, self._position
            if self._is_thinking():
                self.spans.append((self._position, None))
                if not self._separate:
                    answer.append(CHANNEL + "analysis" + MESSAGE)
            return True
        end = held.find(END)
        if end >= 0:
            self._close_body(held[:end], thinking, answer, ended=True)
            self._drop(end + len(END))
            self._part = _Part.BETWEEN
            return True
        sure = _before_partial(held, END)
        if not self._header.recipient:  # a call's text is read whole at its end
            self._emit_body(sure, thinking, answer)
            self._drop(len(sure))
        return False

    def _is_thinking(self) -> bool:
        return self._header.channel == "analysis" and not self._header.recipient

    def _emit_body(self, text: str, thinking: list[str], answer: list[str]) -> None:
        if self._is_thinking() and self._separate:
            thinking.append(text)
        else:
            answer.append(text)

    def _close_body(self, text: str, thinking: list[str], answer: list[str], *, ended: bool) -> None:
        recipient = self._header.recipient
        if recipient:
            name = recipient.removeprefix("functions.")
            if recipient.startswith("functions.") and name in self._names:
                self._calls.append((name, text))
            else:
                log.info("a harmony message to %s was dropped: no such tool was offered", recipient)
            return
        self._emit_body(text, thinking, answer)
        if self._is_thinking():
            self.spans[-1] = (self.spans[-1][0], self._position + len(text))
            if ended and not self._separate:
                answer.append(END)

    def _drop(self, n: int) -> None:
        self._held = self._held[n:]
        self._position += n

    def _made_calls(self) -> tuple[ToolCall, ...]:
        calls = []
        for name, written in self._calls:
            try:
                arguments: Any = json.loads(written)
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                log.info("a harmony call of %s was dropped: its arguments are not a JSON object", name)
                continue
            calls.append(ToolCall(new_call_id(), name, arguments))
        return tuple(calls)


def _before_partial(text: str, marker: str) -> str:
    """``text`` without a tail that could be the start of ``marker``."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return text[:-length]
    return text


def prompt_tail(prompt: str) -> str:
    """The end of a harmony prompt from its last ``<|start|>``: the message the reply goes on with."""
    at = prompt.rfind(START)
    return prompt[at:] if at >= 0 else ""


async def split_harmony(chunks: TokenStream, prompt: str, *, separate: bool, tools: Sequence[Tool] = ()) -> TokenStream:
    """``chunks`` of a harmony model's reply to ``prompt``, the thinking moved from ``text`` to ``reasoning``
    (``separate``), calls of ``tools`` on the last chunk (``finish_reason`` ``tool_calls``). Every chunk still
    comes, with its tokens and log-probabilities; the last one's usage counts the tokens thought in."""
    tail = prompt_tail(prompt)
    splitter = HarmonySplitter(tail, separate=separate, names=frozenset(t.name for t in tools))
    counter = ThoughtCounter(len(tail))
    async with aclosing(chunks):
        async for chunk in chunks:
            counter.add(chunk)
            reasoning, text = splitter.feed(chunk.text)
            if chunk.finish_reason is None:
                yield dataclasses.replace(chunk, text=text, reasoning=chunk.reasoning + reasoning)
                continue
            more_reasoning, more_text, calls = splitter.finish()
            usage = counter.counted(chunk.usage, splitter.spans)
            yield dataclasses.replace(
                chunk,
                text=text + more_text,
                reasoning=chunk.reasoning + reasoning + more_reasoning,
                usage=usage,
                tool_calls=chunk.tool_calls + calls,
                finish_reason="tool_calls" if calls else chunk.finish_reason,
            )
