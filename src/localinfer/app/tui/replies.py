"""What the chat asks for a reply (``chat_request``) and what it measures of the reply as it streams
(``ReplyTiming``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from localinfer.app.tui.attachments import Attachment, with_markers
from localinfer.app.tui.conversations import ConversationSettings, StoredMessage
from localinfer.types import (
    ChatMessage,
    ChatRequest,
    GenerationOptions,
    SamplingParams,
    Thinking,
    TokenChunk,
    ToolCall,
)


def chat_request(
    model: str,
    settings: ConversationSettings,
    history: list[StoredMessage],
    attachments: Mapping[int, tuple[Attachment, ...]] | None = None,
) -> ChatRequest:
    """The request for the next reply: the system prompt, then every message that was not an error (a reply with
    its thinking given back, for the model's template to keep or drop; a message's images, ``attachments`` by
    message id, as its media parts, a marker each before its text), with the conversation's think switch and
    thinking budget."""
    messages = [ChatMessage("system", settings.system_prompt)] if settings.system_prompt else []
    messages += history_messages(history, attachments)
    sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p)
    return ChatRequest(
        model,
        tuple(messages),
        GenerationOptions(sampling=sampling, max_tokens=settings.max_tokens),
        thinking=Thinking(enabled=settings.think, budget=settings.thinking_budget),
    )


def history_messages(
    history: list[StoredMessage], attachments: Mapping[int, tuple[Attachment, ...]] | None = None
) -> list[ChatMessage]:
    """The turns of ``history`` the model sees again: every message that was not an error, a reply with its
    thinking, a message's images (``attachments`` by message id) as its media parts, a marker each before its text,
    and a reply's tool calls (kept in the tool turns after it) with their results."""
    attached = attachments or {}
    out: list[ChatMessage] = []
    for m in history:
        if m.state == "error":
            continue
        if m.role != "tool":
            images = attached.get(m.id, ())
            media = tuple(a.part() for a in images)
            out.append(ChatMessage(m.role, with_markers(m.content, images), reasoning=m.reasoning or None, media=media))
            continue
        record = json.loads(m.tool or "{}")
        call = ToolCall(record.get("call_id", ""), record.get("name", ""), record.get("arguments", {}))
        last = next((i for i in range(len(out) - 1, -1, -1) if out[i].role == "assistant"), None)
        if last is None:
            continue  # a tool turn without the reply that made it is not given back
        out[last] = dataclasses.replace(out[last], tool_calls=(*out[last].tool_calls, call))
        out.append(ChatMessage("tool", m.content, tool_call_id=call.id, name=call.name))
    return [m for m in out if m.content or m.tool_calls or m.role == "tool"]


@dataclass
class ReplyTiming:
    """A reply's times on the app's clock (seconds, read once a piece): its first token, and how long a reasoning
    model thought, from its first piece of thinking to the first piece of its answer (or to the end, when no
    answer came); and what the engine reports at the end: the decoding speed and the tokens it thought in."""

    started: float
    ttft_ms: float | None = None
    thinking_since: float | None = None
    thinking_ms: float | None = None
    tokens_per_second: float | None = None
    reasoning_tokens: int | None = None

    def observe(self, chunk: TokenChunk, now: float) -> None:
        """Take in ``chunk``, which came at ``now``."""
        if self.ttft_ms is None:
            self.ttft_ms = (now - self.started) * 1000
        if chunk.reasoning and self.thinking_since is None:
            self.thinking_since = now
        if chunk.text and self.thinking_since is not None and self.thinking_ms is None:
            self.thinking_ms = (now - self.thinking_since) * 1000
        if chunk.timings is not None:
            self.tokens_per_second = chunk.timings.predicted_per_second or None
        if chunk.usage is not None and chunk.usage.reasoning_tokens:
            self.reasoning_tokens = chunk.usage.reasoning_tokens

    def end(self, now: float) -> None:
        """The reply ended at ``now``: a model that thought to the end thought until then."""
        if self.thinking_since is not None and self.thinking_ms is None:
            self.thinking_ms = (now - self.thinking_since) * 1000
