"""What an engine process answered, read as it is relayed (never changed): each answer's outcome, the first token's
time and the usage the engine reports, for ``EngineMetrics.observe_relayed``.

An event stream (SSE) is read event by event: the first one carrying text (a completion's ``text``, a chat delta's
``content``, ``reasoning_content`` or tool calls) is the first token; ``finish_reason`` is the outcome; ``usage``
(sent in a stream when the client asked ``stream_options.include_usage``, as OpenAI does) the tokens; an
``error`` event makes it ``error``. A JSON answer is read whole (its first MAX_JSON bytes) at its end.

The Responses API (``/v1/responses``) answers in its own shape: a stream of typed events, whose first non-empty
``response.*.delta`` (text, reasoning, a call's arguments) is the first token, and which ends with
``response.completed`` (``stop``), ``response.incomplete`` (``length`` when ``max_output_tokens`` cut it) or
``response.failed`` / ``error`` (``error``), the whole ``response`` with its ``usage`` (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``); a whole answer is that ``response`` object alone.

Metrics are labelled by ``relayed_route``: one of ``RELAYED_ROUTES``, never the client's own spelling of a path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote

from localinfer.types import Usage

MAX_JSON: Final = 8 << 20  # bytes of a JSON answer kept to read its usage; a longer one is counted without it
RELAYED_ROUTES: Final = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"})
OTHER_ROUTE: Final = "other"


def relayed_route(path: str) -> str:
    """The route a relayed request's ``path`` (as the client sent it: percent-escapes kept, maybe a query) matched,
    as a metric label: one of ``RELAYED_ROUTES``, else ``other``, so no client's spelling makes a new series."""
    route = unquote(path.partition("?")[0])
    return route if route in RELAYED_ROUTES else OTHER_ROUTE


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
        kind = payload.get("type")
        if isinstance(kind, str) and (kind.startswith("response.") or kind == "error"):
            return self._read_event(kind, payload)
        if payload.get("object") == "response":
            self._read_response(payload)
            return False
        if payload.get("error"):
            self.outcome = "error"
            return False
        self._read_usage(payload.get("usage"))
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

    def _read_event(self, kind: str, event: dict[str, Any]) -> bool:
        """One Responses API stream event; True when it held the first token."""
        if kind.endswith(".delta") and event.get("delta"):
            first = not self.first_token
            self.first_token = True
            return first
        if kind in ("response.completed", "response.incomplete", "response.failed", "error"):
            response = event.get("response")
            if isinstance(response, dict):
                self._read_response(response)
            if kind == "error":
                self.outcome = "error"
        return False

    def _read_response(self, response: dict[str, Any]) -> None:
        """A Responses API ``response`` object: its status is the outcome, its usage the tokens."""
        status = response.get("status")
        if status == "failed" or response.get("error"):
            self.outcome = "error"
        elif status == "incomplete" and self.outcome != "error":
            reason = (response.get("incomplete_details") or {}).get("reason")
            self.outcome = "length" if reason == "max_output_tokens" else "stop"
        elif status == "completed" and self.outcome != "error":
            self.outcome = "stop"
        self._read_usage(response.get("usage"))

    def _read_usage(self, usage: Any) -> None:
        """Chat and completions' ``prompt_tokens``/``completion_tokens``, or the Responses API's
        ``input_tokens``/``output_tokens``, with the cached prompt tokens of either."""
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else 0
        self.usage = Usage(_int(prompt), _int(completion), _int(cached))


def _has_output(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
