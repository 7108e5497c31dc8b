"""What an engine process answered, read as it is relayed (never changed): each answer's outcome, the first token's
time and the usage the engine reports, for ``EngineMetrics.observe_relayed``.

An event stream (SSE) is read event by event: the first one carrying text (a completion's ``text``, a chat delta's
``content``, ``reasoning_content`` or tool calls) is the first token; ``finish_reason`` is the outcome; ``usage``
(sent in a stream when the client asked ``stream_options.include_usage``, as OpenAI does) the tokens; an
``error`` event makes it ``error``. A JSON answer is read whole (its first MAX_JSON bytes) at its end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from localinfer.types import Usage

MAX_JSON: Final = 8 << 20  # bytes of a JSON answer kept to read its usage; a longer one is counted without it


@dataclass
class RelayedReading:
    """What has been read of one relayed answer so far."""

    status: int
    is_sse: bool
    outcome: str = ""  # stop, length, error, invalid_request; "" while unknown
    usage: Usage | None = None
    first_token: bool = False  # set by ``feed`` when this chunk held the first token
    _pending: bytes = b""
    _json: list[bytes] = field(default_factory=list)
    _json_size: int = 0

    def __post_init__(self) -> None:
        if self.status in (400, 422):
            self.outcome = "invalid_request"
        elif self.status != 200:
            self.outcome = "error"

    def feed(self, chunk: bytes) -> bool:
        """Read ``chunk``; True when it held the answer's first token."""
        if self.status != 200:
            return False
        if not self.is_sse:
            if self._json_size < MAX_JSON:
                self._json.append(chunk)
                self._json_size += len(chunk)
            return False
        self._pending = (self._pending + chunk).replace(b"\r\n", b"\n")
        first = False
        while (end := self._pending.find(b"\n\n")) >= 0:
            event, self._pending = self._pending[:end], self._pending[end + 2 :]
            data = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if data and data != b"[DONE]":
                first = self._read(_loads(data)) or first
        return first

    def end(self) -> None:
        """The answer ended (read to its end): a JSON answer is read now."""
        if self.status == 200 and not self.is_sse and self._json_size <= MAX_JSON:
            self._read(_loads(b"".join(self._json)))
            if not self.outcome:
                self.outcome = "stop"  # an answer without choices (embeddings) that came whole

    def _read(self, payload: Any) -> bool:
        """Take what ``payload`` (one event, or the whole JSON answer) says; True when it held the first token."""
        if not isinstance(payload, dict):
            return False
        if payload.get("error"):
            self.outcome = "error"
            return False
        usage = payload.get("usage")
        if isinstance(usage, dict):
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            self.usage = Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), _int(cached))
        first = False
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if choice.get("text") or (isinstance(delta, dict) and _has_output(delta)):
                first = not self.first_token
                self.first_token = True
            reason = choice.get("finish_reason")
            if reason and self.outcome != "error":
                self.outcome = "length" if reason == "length" else "stop"
        return first


def _has_output(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
