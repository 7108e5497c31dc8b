"""What a llama-server client can ask of a ``/completion`` stream: ``timings_per_token`` (every piece carries the
timings so far), ``return_progress`` (events with the prompt's ``prompt_progress`` while it is computed) and
``response_fields`` (the last event holds only the fields named, as the answer not streamed does); and of a
``/v1/chat/completions`` stream, the first two, as llama.cpp's web UI asks them. The same requests go to llama-server
on the same file and to ``localinfer serve``, and the events are compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

PROMPT = "Here is a list of ten fruits, one per line:\n" * 20  # long enough for the prompt to take a few steps
BASE: dict[str, Any] = {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "stream": True, "cache_prompt": False}
ASKS: dict[str, dict[str, Any]] = {
    "timings": {**BASE, "timings_per_token": True},
    "progress": {**BASE, "return_progress": True, "n_predict": 2},
    "fields": {**BASE, "response_fields": ["content", "timings/predicted_n", "stop_type"]},
}
CHAT: dict[str, Any] = {
    "messages": [{"role": "user", "content": PROMPT + "Name one."}],
    "max_tokens": 4,
    "temperature": 0,
    "stream": True,
    "cache_prompt": False,
    "timings_per_token": True,
    "return_progress": True,
}
FLAGS = ("-c", "2048", "-np", "1", "-b", "64", "-ub", "64")  # prompts computed 64 tokens a step


def events(url: str, body: dict[str, Any], path: str = "/completion") -> list[dict[str, Any]]:
    reply = httpx.post(f"{url}{path}", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    blocks = [block[len("data: ") :] for block in reply.text.split("\n\n") if block.startswith("data: ")]
    return [json.loads(block) for block in blocks if block != "[DONE]"]


@pytest.fixture(scope="module")
def llama_server_events(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), *FLAGS) as url:
        answers = {name: events(url, body) for name, body in ASKS.items()}
        return {**answers, "chat": events(url, CHAT, "/v1/chat/completions")}


@pytest.fixture(scope="module")
def server(
    llama_server_events: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--ctx-size", "2048", "--parallel", "1", "-b", "64", "-ub", "64", "--spec", "off")
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve"), *flags) as server:
        yield server


def test_timings_per_token_puts_the_timings_so_far_on_every_piece(
    server: Server, llama_server_events: dict[str, Any]
) -> None:
    theirs = [e for e in llama_server_events["timings"] if not e["stop"]]
    ours = [e for e in events(server.url, ASKS["timings"]) if not e["stop"]]
    assert theirs and ours and all("timings" in e for e in theirs + ours)
    assert set(ours[0]["timings"]) >= set(theirs[0]["timings"]) - {"draft_n", "draft_n_accepted"}
    counts = [e["timings"]["predicted_n"] for e in ours]
    assert counts == sorted(counts) and counts[-1] == theirs[-1]["timings"]["predicted_n"]
    assert "".join(e["content"] for e in ours) == "".join(e["content"] for e in theirs)
    assert all(e["timings"]["prompt_n"] == theirs[0]["timings"]["prompt_n"] for e in ours)
    without = [e for e in events(server.url, BASE) if not e["stop"]]
    assert without and not any("timings" in e for e in without)  # only when asked


def test_return_progress_streams_the_prompts_progress_first(
    server: Server, llama_server_events: dict[str, Any]
) -> None:
    theirs = [e["prompt_progress"] for e in llama_server_events["progress"] if "prompt_progress" in e]
    stream = events(server.url, ASKS["progress"])
    ours = [e["prompt_progress"] for e in stream if "prompt_progress" in e]
    assert set(ours[0]) == set(theirs[0]) == {"total", "cache", "processed", "time_ms"}
    assert ours[0]["processed"] == theirs[0]["processed"] == 0  # the first says the request has started
    assert ours[-1]["processed"] == ours[-1]["total"] == theirs[-1]["processed"] == theirs[-1]["total"]
    assert len(ours) > 2  # one per step of the prompt
    done = [p["processed"] for p in ours]
    assert done == sorted(done)
    first_text = next(i for i, e in enumerate(stream) if e.get("content"))
    assert all("prompt_progress" in e for e in stream[:first_text])  # the progress comes before the text
    plain = events(server.url, {**BASE, "n_predict": 2})
    assert not any("prompt_progress" in e for e in plain)


def test_response_fields_keep_only_the_named_fields_of_the_last_event(
    server: Server, llama_server_events: dict[str, Any]
) -> None:
    theirs = llama_server_events["fields"][-1]
    ours = events(server.url, ASKS["fields"])[-1]
    assert set(ours) == set(theirs) == {"content", "timings/predicted_n", "stop_type"}
    assert ours["stop_type"] == theirs["stop_type"] == "limit"
    assert ours["timings/predicted_n"] == theirs["timings/predicted_n"] == 6
    answer = httpx.post(f"{server.url}/completion", json={**ASKS["fields"], "stream": False}, timeout=120).json()
    assert set(answer) == set(theirs)


def test_a_chat_stream_carries_progress_and_timings_as_llama_servers_does(
    server: Server, llama_server_events: dict[str, Any]
) -> None:
    theirs = llama_server_events["chat"]
    ours = events(server.url, CHAT, "/v1/chat/completions")
    for stream in (theirs, ours):
        progress = [e for e in stream if "prompt_progress" in e]
        assert progress and progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]
        assert all(e["choices"][0]["delta"] == {"role": "assistant", "content": None} for e in progress)
        texts = [e for e in stream if e["choices"] and e["choices"][0]["delta"].get("content")]
        assert texts and all("timings" in e for e in texts)
    assert [e["prompt_progress"]["total"] for e in ours if "prompt_progress" in e][-1] == next(
        e["prompt_progress"]["total"] for e in theirs if "prompt_progress" in e
    )
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in ours if e["choices"])
    assert text == "".join(e["choices"][0]["delta"].get("content") or "" for e in theirs if e["choices"])


@pytest.mark.parametrize("route", ["completion", "chat"])
def test_progress_events_carry_the_timings_so_far_when_asked_as_llama_servers_do(
    route: str, server: Server, llama_server_events: dict[str, Any]
) -> None:
    theirs = [e for e in llama_server_events["progress" if route == "completion" else "chat"] if "prompt_progress" in e]
    asked = (ASKS["progress"], "/completion") if route == "completion" else (CHAT, "/v1/chat/completions")
    ours = [e for e in events(server.url, *asked) if "prompt_progress" in e]
    if route == "completion":  # not asked for timings_per_token: no timings, as there
        assert not any("timings" in e for e in theirs) and not any("timings" in e for e in ours)
        ours = [
            e for e in events(server.url, {**ASKS["progress"], "timings_per_token": True}) if "prompt_progress" in e
        ]
    else:
        assert all("timings" in e for e in theirs)
        assert set(ours[-1]["timings"]) == set(theirs[-1]["timings"])
    assert all("timings" in e for e in ours)
    for event in ours:
        timings, progress = event["timings"], event["prompt_progress"]
        assert timings["cache_n"] == progress["cache"] and timings["predicted_n"] == 0
        assert timings["prompt_n"] == progress["processed"] - progress["cache"]
