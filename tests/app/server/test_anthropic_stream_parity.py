"""Anthropic's ``/v1/messages`` stream as llama-server sends it, compared with the real llama-server on the same
GGUF and the same request: the events in llama-server's order (``message_start``, a block's start, deltas and
stop, ``message_delta``, ``message_stop``; no ``ping``), ``message_start`` holding the prompt's counts and
``message_delta`` the output tokens only; the official anthropic client reading the same usage from both."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

ASK: list[MessageParam] = [{"role": "user", "content": "Write a short poem about the sea."}]
GREEDY = {"temperature": 0}
BODY = {"model": "smollm2", "messages": ASK, "max_tokens": 8, **GREEDY, "stream": True}


def raw_events(url: str) -> list[tuple[str, dict[str, Any]]]:
    """The stream's events, as (name, data)."""
    reply = httpx.post(f"{url}/v1/messages", json=BODY, timeout=300)
    assert reply.status_code == 200, reply.text
    events = []
    for block in (b for b in reply.text.split("\n\n") if b.strip()):
        name_line, data_line = block.strip().split("\n")
        events.append((name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return events


def client_usage(url: str) -> dict[str, Any]:
    """The usage the official client makes of the stream."""
    claude = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    with claude, claude.messages.stream(model="smollm2", messages=ASK, max_tokens=8, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    return final.usage.model_dump(include={"input_tokens", "cache_read_input_tokens", "output_tokens"})


def answers(url: str) -> dict[str, Any]:
    return {"first": raw_events(url), "again": raw_events(url), "client": client_usage(url)}


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1") as url:
        return answers(url)


@pytest.fixture(scope="module")
def ours(
    theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A fresh localinfer (nothing cached yet, as the fresh llama-server), started once llama-server is gone."""
    logs = tmp_path_factory.mktemp("serve-anthropic-stream")
    with serving(smollm2.name, test_home, logs, "--ctx-size", "2048", "--parallel", "1") as server:
        yield answers(server.url)


def order(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The events' names, each run of deltas as one."""
    return [name for name, _ in itertools.groupby(name for name, _ in events)]


def data_of(events: list[tuple[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    return next(data for event, data in events if event == name)


def test_the_events_come_in_llama_servers_order(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    expected = [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert order(ours["first"]) == order(theirs["first"]) == expected
    for events in (ours["first"], theirs["first"]):
        assert data_of(events, "content_block_start")["content_block"] == {"type": "text", "text": ""}
        assert all(data["type"] == name for name, data in events)


def test_message_start_holds_the_prompts_counts(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    mine, native = (data_of(a["first"], "message_start")["message"] for a in (ours, theirs))
    assert set(mine) == set(native)
    assert mine["usage"] == native["usage"]  # a fresh server: the whole prompt computed, nothing read from a cache
    assert native["usage"]["output_tokens"] == 0 and native["usage"]["input_tokens"] > 0
    assert (mine["content"], mine["stop_reason"], mine["stop_sequence"]) == ([], None, None)


def test_a_prompt_asked_again_is_read_from_the_cache_in_message_start(
    ours: dict[str, Any], theirs: dict[str, Any]
) -> None:
    first, again = (data_of(ours[n], "message_start")["message"]["usage"] for n in ("first", "again"))
    native_first, native_again = (data_of(theirs[n], "message_start")["message"]["usage"] for n in ("first", "again"))
    assert again["cache_read_input_tokens"] > 0 and native_again["cache_read_input_tokens"] > 0
    prompt = first["input_tokens"]
    assert again["input_tokens"] + again["cache_read_input_tokens"] == prompt
    assert native_again["input_tokens"] + native_again["cache_read_input_tokens"] == native_first["input_tokens"]


def test_message_delta_says_the_output_tokens_only(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for answer in (ours, theirs):
        delta = data_of(answer["first"], "message_delta")
        assert set(delta["usage"]) == {"output_tokens"}
        assert 0 < delta["usage"]["output_tokens"] <= 8
        assert set(delta["delta"]) == {"stop_reason", "stop_sequence"}


def test_the_client_reads_the_same_usage_from_both(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    mine, native = ours["client"], theirs["client"]
    prompt = data_of(theirs["first"], "message_start")["message"]["usage"]["input_tokens"]
    for usage in (mine, native):
        assert usage["input_tokens"] + (usage["cache_read_input_tokens"] or 0) == prompt
        assert 0 < usage["output_tokens"] <= 8
