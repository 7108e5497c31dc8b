"""Reading a relayed answer for the metrics: outcome, first token and usage, from the bytes as they pass."""

from __future__ import annotations

import json

from localinfer.engine.relay_metrics import RelayedReading
from localinfer.types import Usage


def event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def test_a_chat_stream_split_anywhere_gives_its_first_token_once_its_finish_and_its_usage() -> None:
    stream = (
        event({"choices": [{"delta": {"role": "assistant"}}]})
        + event({"choices": [{"delta": {"content": "Hi"}}]})
        + event({"choices": [{"delta": {"content": "!"}, "finish_reason": "length"}]})
        + event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
        + b"data: [DONE]\n\n"
    )
    reading = RelayedReading(200, is_sse=True)
    firsts = [reading.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)]
    reading.end()
    assert firsts.count(True) == 1
    assert (reading.outcome, reading.usage) == ("length", Usage(5, 2, 0))


def test_a_stream_ended_by_an_error_event_is_an_error() -> None:
    reading = RelayedReading(200, is_sse=True)
    reading.feed(event({"choices": [{"text": "a"}]}) + event({"error": {"code": "engine_unavailable"}}))
    assert reading.outcome == "error"


def test_a_whole_json_answer_is_read_at_its_end() -> None:
    body = {"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}], "usage": {
        "prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}}}  # fmt: skip
    reading = RelayedReading(200, is_sse=False)
    data = json.dumps(body).encode()
    assert not reading.feed(data[:10]) and not reading.feed(data[10:])
    reading.end()
    assert (reading.outcome, reading.usage) == ("stop", Usage(9, 1, 4))


def test_refusals_and_failures_are_known_by_their_status() -> None:
    assert RelayedReading(400, is_sse=False).outcome == "invalid_request"
    assert RelayedReading(422, is_sse=False).outcome == "invalid_request"  # TGI's
    assert RelayedReading(502, is_sse=False).outcome == "error"
