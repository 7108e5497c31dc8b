"""engine/metrics.py: what a token stream counts, by outcome, in a registry of its own per engine."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from localinfer.backends.base import SlotUsage
from localinfer.engine.metrics import IN_PROCESS, EngineMetrics, set_route
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.types import Timings, TokenChunk, TokenStream, Usage


def value(metrics: EngineMetrics, sample: str, **labels: str) -> float:
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    return 0.0


async def chunks(*items: TokenChunk | Exception) -> TokenStream:
    for item in items:
        if isinstance(item, Exception):
            raise item
        yield item


LAST = TokenChunk("!", finish_reason="length", usage=Usage(7, 3, 2), timings=Timings(1.0, 2.0, 5, 2))


async def drain(stream: TokenStream) -> None:
    async with aclosing(stream):
        async for _ in stream:
            pass


async def test_a_finished_stream_counts_its_request_tokens_and_latencies() -> None:
    metrics = EngineMetrics(dict)
    await drain(metrics.observe("m", chunks(TokenChunk("a"), TokenChunk("b"), LAST), started=time.perf_counter()))
    assert value(metrics, "localinfer_requests_total", model="m", route=IN_PROCESS, outcome="length") == 1
    assert value(metrics, "localinfer_prompt_tokens_total", model="m") == 7
    assert value(metrics, "localinfer_prompt_tokens_cached_total", model="m") == 2
    assert value(metrics, "localinfer_generated_tokens_total", model="m") == 3
    assert value(metrics, "localinfer_time_to_first_token_seconds_count", model="m") == 1
    assert value(metrics, "localinfer_time_per_output_token_seconds_count", model="m") == 2


@pytest.mark.parametrize(
    "failure,outcome", [(InvalidRequest("bad", param="x"), "invalid_request"), (GenerationFailed("boom"), "error")]
)
async def test_a_failed_stream_counts_as_refused_or_failed(failure: Exception, outcome: str) -> None:
    metrics = EngineMetrics(dict)
    with pytest.raises(type(failure)):
        await drain(metrics.observe("m", chunks(failure), started=time.perf_counter()))
    assert value(metrics, "localinfer_requests_total", model="m", route=IN_PROCESS, outcome=outcome) == 1


async def test_a_stream_closed_before_its_end_is_cancelled() -> None:
    metrics = EngineMetrics(dict)
    stream = metrics.observe("m", chunks(TokenChunk("a"), TokenChunk("b"), LAST), started=time.perf_counter())
    assert (await anext(stream)).text == "a"
    await stream.aclose()
    assert value(metrics, "localinfer_requests_total", model="m", route=IN_PROCESS, outcome="cancelled") == 1
    assert value(metrics, "localinfer_generated_tokens_total", model="m") == 0


async def test_the_route_named_for_the_task_labels_its_requests() -> None:
    metrics = EngineMetrics(dict)

    async def request() -> None:
        set_route("/completion")
        await drain(metrics.observe("m", chunks(LAST), started=time.perf_counter()))

    await asyncio.create_task(request())  # its own context, as each HTTP request has
    assert value(metrics, "localinfer_requests_total", model="m", route="/completion", outcome="length") == 1
    assert value(metrics, "localinfer_requests_total", model="m", route=IN_PROCESS, outcome="length") == 0


def test_gauges_are_read_from_the_backends_when_scraped() -> None:
    usage = {"m": SlotUsage(processing=1, idle=3, waiting=2)}
    metrics = EngineMetrics(lambda: usage)
    assert value(metrics, "localinfer_slots_busy", model="m") == 1
    assert value(metrics, "localinfer_requests_waiting", model="m") == 2
    assert value(metrics, "localinfer_slots", model="m") == 4
    usage["m"] = SlotUsage(processing=0, idle=4, waiting=0)
    assert value(metrics, "localinfer_slots_busy", model="m") == 0


async def test_two_engines_count_apart() -> None:
    first, second = EngineMetrics(dict), EngineMetrics(dict)
    await drain(first.observe("m", chunks(LAST), started=time.perf_counter()))
    assert value(first, "localinfer_generated_tokens_total", model="m") == 3
    assert value(second, "localinfer_generated_tokens_total", model="m") == 0
