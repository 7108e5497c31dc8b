"""The Responses API's streamed events with llama.cpp's telemetry, as llama-server sends them, compared with the real
llama-server on the same GGUF and the same request: ``timings`` on ``response.completed``; with
``timings_per_token`` the timings so far on each delta; with ``return_progress`` the prompt's progress in
``response.in_progress`` events (``prompt_progress``, and the timings so far)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.app.server.test_responses_api import events_of
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

BODY = {"model": "smollm2", "input": "What is the capital of France?", "temperature": 0, "max_output_tokens": 6}
ASKED = {"timings_per_token": True, "return_progress": True}
Events = list[tuple[str, dict[str, Any]]]


def streamed(url: str, body: dict[str, Any]) -> Events:
    reply = httpx.post(f"{url}/v1/responses", json={**body, "stream": True}, timeout=300)
    assert reply.status_code == 200, reply.text
    return events_of(reply.text)


def answers(url: str) -> dict[str, Events]:
    return {"plain": streamed(url, BODY), "telemetry": streamed(url, {**BODY, **ASKED, "cache_prompt": False})}


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Events]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1") as url:
        return answers(url)


@pytest.fixture(scope="module")
def ours(
    theirs: dict[str, Events], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Events]]:
    """localinfer without speculation, as llama-server runs by default (drafts add draft_n to the timings)."""
    logs = tmp_path_factory.mktemp("serve-responses-telemetry")
    extra = ("--ctx-size", "2048", "--parallel", "1", "--spec", "off")
    with serving(smollm2.name, test_home, logs, *extra) as server:
        yield answers(server.url)


def named(events: Events, name: str) -> list[dict[str, Any]]:
    return [data for event, data in events if event == name]


def progress_events(events: Events) -> list[dict[str, Any]]:
    return [data for data in named(events, "response.in_progress") if "prompt_progress" in data]


def test_the_closing_event_carries_llama_servers_timings(ours: dict[str, Events], theirs: dict[str, Events]) -> None:
    # llama-server's is response.completed; ours, cut by max_output_tokens, response.incomplete (docs/llama-server.md)
    mine, native = ours["plain"][-1][1], theirs["plain"][-1][1]
    assert mine["type"] in ("response.completed", "response.incomplete") and native["type"] == "response.completed"
    assert set(mine["timings"]) == set(native["timings"])
    assert mine["timings"]["predicted_n"] == mine["response"]["usage"]["output_tokens"]
    assert native["timings"]["predicted_n"] == native["response"]["usage"]["output_tokens"]


def test_without_asking_deltas_carry_no_timings_and_no_progress_comes(
    ours: dict[str, Events], theirs: dict[str, Events]
) -> None:
    for events in (ours["plain"], theirs["plain"]):
        assert not any("timings" in data for data in named(events, "response.output_text.delta"))
        assert not progress_events(events)


def test_timings_per_token_puts_the_timings_so_far_on_each_delta(
    ours: dict[str, Events], theirs: dict[str, Events]
) -> None:
    mine, native = (named(a["telemetry"], "response.output_text.delta") for a in (ours, theirs))
    assert mine and native
    assert all("timings" in data for data in mine) and all("timings" in data for data in native)
    assert set(mine[0]["timings"]) == set(native[0]["timings"])
    for deltas in (mine, native):  # each delta's timings count the tokens generated so far
        counts = [data["timings"]["predicted_n"] for data in deltas]
        assert counts == sorted(counts) and counts[0] >= 1


def test_return_progress_sends_the_prompts_progress_in_in_progress_events(
    ours: dict[str, Events], theirs: dict[str, Events]
) -> None:
    mine, native = progress_events(ours["telemetry"]), progress_events(theirs["telemetry"])
    assert mine and native
    assert set(mine[-1]["prompt_progress"]) == set(native[-1]["prompt_progress"])
    for events in (mine, native):
        last = events[-1]["prompt_progress"]
        assert last["processed"] == last["total"]  # the whole prompt computed (nothing cached: cache_prompt off)
        assert events[-1]["response"]["status"] == "in_progress"
        assert "timings" in events[-1]  # timings_per_token too: the prompt's timings so far
    assert mine[-1]["prompt_progress"]["total"] == native[-1]["prompt_progress"]["total"]
    assert set(mine[-1]["timings"]) == set(native[-1]["timings"])
