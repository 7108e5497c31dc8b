"""Reading a relayed answer for the metrics: outcome, first token and usage, from the bytes as they pass."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from localinfer.engine.metrics import EngineMetrics
from localinfer.engine.relay_metrics import RelayedReading, relayed_route
from localinfer.types import Usage
from tests.app.server.test_llamacpp_routes import metric


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


def response_event(kind: str, **fields: object) -> bytes:
    """One Responses API stream event as OpenAI (and localinfer) write it: its name, then its data."""
    return f"event: {kind}\n".encode() + event({"type": kind, **fields})


def test_a_responses_stream_gives_its_first_token_once_its_outcome_and_its_usage() -> None:
    usage = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 2, "total_tokens": 14}
    done = {"object": "response", "status": "completed", "error": None, "incomplete_details": None, "usage": usage}
    stream = (
        response_event("response.created", response={"object": "response", "status": "in_progress", "usage": None})
        + response_event("response.output_item.added", output_index=0, item={"type": "message", "content": []})
        + response_event("response.output_text.delta", output_index=0, content_index=0, delta="Hi")
        + response_event("response.output_text.delta", output_index=0, content_index=0, delta="!")
        + response_event("response.output_text.done", output_index=0, content_index=0, text="Hi!")
        + response_event("response.completed", response=done)
    )
    reading = RelayedReading(200, is_sse=True)
    firsts = [reading.feed(stream[i : i + 11]) for i in range(0, len(stream), 11)]
    reading.end()
    assert firsts.count(True) == 1
    assert (reading.outcome, reading.usage) == ("stop", Usage(12, 2, 3))


def test_a_responses_stream_cut_by_max_output_tokens_is_length_and_a_failed_one_is_an_error() -> None:
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": {
        "input_tokens": 5, "output_tokens": 4}}  # fmt: skip
    reading = RelayedReading(200, is_sse=True)
    reading.feed(
        response_event("response.reasoning_text.delta", delta="Hm")
        + response_event("response.incomplete", response=cut)
    )
    assert (reading.first_token, reading.outcome, reading.usage) == (True, "length", Usage(5, 4, 0))
    failed = RelayedReading(200, is_sse=True)
    failed.feed(response_event("response.failed", response={"status": "failed", "error": {"code": "server_error"}}))
    assert failed.outcome == "error"


def test_a_whole_responses_answer_is_read_at_its_end() -> None:
    body = {"object": "response", "status": "completed", "error": None, "output": [{"type": "message", "content": [
        {"type": "output_text", "text": "Paris"}]}], "usage": {"input_tokens": 9, "output_tokens": 1,
        "input_tokens_details": {"cached_tokens": 4}, "total_tokens": 10}}  # fmt: skip
    reading = RelayedReading(200, is_sse=False)
    reading.feed(json.dumps(body).encode())
    reading.end()
    assert (reading.outcome, reading.usage) == ("stop", Usage(9, 1, 4))


def test_a_relayed_path_is_labelled_by_the_route_it_matched_never_by_its_spelling() -> None:
    assert relayed_route("/v1/chat/c%6fmpletions") == "/v1/chat/completions"
    assert relayed_route("/v1/responses?stream=true") == "/v1/responses"
    assert relayed_route("/v1/%2e%2e/anything-a-client-sends") == "other"


@dataclass
class Answer:
    """An engine's answer as a relay returns it (a unit test's stand-in for the proxy's)."""

    status: int
    headers: list[tuple[str, str]]
    body: AsyncIterator[bytes]

    async def aclose(self) -> None:
        pass


async def test_a_whole_answer_is_counted_before_its_last_bytes_are_passed_on() -> None:
    whole = json.dumps({"choices": [{"text": "Paris", "finish_reason": "stop"}], "usage": {
        "prompt_tokens": 5, "completion_tokens": 1}}).encode()  # fmt: skip

    async def engine_body() -> AsyncIterator[bytes]:
        yield whole[:20]
        yield whole[20:]

    metrics = EngineMetrics(dict)
    answer = Answer(200, [("content-type", "application/json")], engine_body())
    passed = b""
    counted_when_whole = -1.0
    async for chunk in metrics.observe_relayed("m", "/v1/completions", answer, started=0.0):
        passed += chunk
        if passed == whole:  # what a client holds once it has read the Content-Length the engine sent
            counted_when_whole = metric(metrics.render().decode(), "localinfer_requests_total", outcome="stop")
    assert passed == whole
    assert counted_when_whole == 1
