"""A chat's last turn continued (llama-server's ``continue_final_message``, and a last assistant turn given as a
prefill), as llama.cpp builds the prompt: the turns before it without the generation prompt, the generation prompt,
then the turn's text; for a template that thinks, the turn's thinking first, between the template's own reasoning
tags.

llama.cpp finds those tags by rendering the template on probe conversations (its autoparser), whatever the model's
vocabulary holds; ``reasoning_tags`` finds them the same way, in the three shapes templates write them:

- an assistant turn's thinking written before its text (Qwen3: ``<think>\\n`` and ``\\n</think>\\n\\n``);
- a generation prompt that opens the thinking and, with ``enable_thinking`` off, closes it (QwQ, DeepSeek-R1:
  ``<think>`` and ``</think>``);
- a generation prompt that, with ``enable_thinking`` off, writes an empty block (Command-R7B:
  ``<|START_THINKING|>`` and ``<|END_THINKING|>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from localinfer.types import ChatMessage

# render(messages, enable_thinking, generation_prompt) -> the template's text
Render = Callable[[tuple[ChatMessage, ...], bool, bool], str]

_USER = ChatMessage("user", "User probe message")
_REASONING = "Reasoning probe text"
_CONTENT = "Content probe text"
_TAG = re.compile(r"^\s*(<[^<>]+>)\s*(<[^<>]+>)\s*$")  # two tags, the block an empty thinking is written as


def generation_prompt(closed: str, opened: str) -> str:
    """What the generation prompt adds: ``opened`` past the text it shares with ``closed`` (as llama.cpp cuts it)."""
    shared = 0
    for a, b in zip(closed, opened, strict=False):
        if a != b:
            break
        shared += 1
    return opened[shared:]


def reasoning_tags(render: Render) -> tuple[str, str] | None:
    """The tags a template writes around an assistant turn's thinking, found by rendering probes; None when it
    writes none (or fails on the probes)."""
    try:
        closed = render((_USER,), True, False)
        header = generation_prompt(closed, render((_USER,), True, True))
        turn = render((_USER, ChatMessage("assistant", _CONTENT, reasoning=_REASONING)), True, False)
        at_reasoning, at_content = turn.find(_REASONING), turn.find(_CONTENT)
        lead = closed + header
        if 0 <= at_reasoning < at_content and turn.startswith(lead):
            start, end = turn[len(lead) : at_reasoning], turn[at_reasoning + len(_REASONING) : at_content]
            if start.strip() and end.strip():
                return start, end
        thinking = header
        not_thinking = generation_prompt(closed, render((_USER,), False, True))
    except Exception:  # a template that refuses a probe: it has no tags we can find
        return None
    if not_thinking.startswith(thinking) and not_thinking != thinking:
        added = not_thinking[len(thinking) :]
        opener = re.search(r"(<[^<>]+>)\s*$", thinking)
        if opener is not None and added.strip().startswith("</"):
            return opener.group(1), added.strip()
        pair = _TAG.match(added)
        if pair is not None:
            return pair.group(1), pair.group(2)
    return None


def continued(closed: str, opened: str, last: ChatMessage, tags: tuple[str, str] | None) -> tuple[str, bool]:
    """The prompt that continues ``last``: the turns before it (``closed``, without the generation prompt), the
    generation prompt (what ``opened`` adds), then ``last``'s text; with reasoning ``tags``, the generation prompt
    up to its opening tag, the tag, ``last``'s thinking, and (unless it has thinking and no text yet, which it
    then goes on thinking) the closing tag. Also whether the prompt ends inside the thinking."""
    generation = generation_prompt(closed, opened)
    if tags is None:
        return closed + generation + last.content, False
    start, end = tags
    at = generation.find(start)
    generation = (generation if at < 0 else generation[:at]) + start + (last.reasoning or "")
    if last.reasoning and not last.content:
        return closed + generation, True
    return closed + generation + end + last.content, False
