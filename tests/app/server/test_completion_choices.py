"""Several completions from one ``/completion`` request, as llama-server answers them: a list of prompts, and
``n_cmpl`` (or ``n``) completions of each. The same requests go to llama-server and to ``localinfer serve`` on
SmolLM2 with the same flags (``-c 4096 -np 4``), and the answers are compared: a list of answers naming their
``index``, a stream whose events name theirs, the same greedy text, the same fields."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

FLAGS = ("-c", "4096", "-np", "4")
TWO_PROMPTS = ["The sky is", "Grass is"]
ASKS: dict[str, dict[str, Any]] = {
    "n_cmpl": {"prompt": "The sky is", "n_predict": 4, "temperature": 0, "n_cmpl": 2},
    "prompts": {"prompt": TWO_PROMPTS, "n_predict": 4, "temperature": 0},
    "streamed": {"prompt": TWO_PROMPTS, "n_predict": 3, "temperature": 0, "n": 2, "stream": True},
    "no_completion": {"prompt": "The sky is", "n_predict": 4, "n_cmpl": 0},
    "no_prompt": {"prompt": [], "n_predict": 4},
}


def answer(url: str, body: dict[str, Any]) -> Any:
    """The JSON answer, or for a stream the list of its events' JSON (llama-server's ``null`` event left out)."""
    reply = httpx.post(f"{url}/completion", json=body, timeout=120)
    if not body.get("stream"):
        return {"status": reply.status_code, "body": reply.json()}
    assert reply.status_code == 200, reply.text
    blocks = [block[len("data: ") :] for block in reply.text.split("\n\n") if block.startswith("data: ")]
    return [event for event in (json.loads(block) for block in blocks) if event is not None]


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), *FLAGS) as url:
        return {name: answer(url, body) for name, body in ASKS.items()}


@pytest.fixture(scope="module")
def server(
    theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-cmpl"), *FLAGS) as running:
        yield running


def by_index(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        grouped[event["index"]].append(event)
    return dict(grouped)


def test_n_cmpl_gives_a_list_of_completions_with_llama_servers_fields(server: Server, theirs: dict[str, Any]) -> None:
    ours = answer(server.url, ASKS["n_cmpl"])
    expected = theirs["n_cmpl"]["body"]
    assert ours["status"] == 200 and isinstance(ours["body"], list)
    assert [a["index"] for a in ours["body"]] == [a["index"] for a in expected] == [0, 1]
    assert [a["content"] for a in ours["body"]] == [a["content"] for a in expected]
    assert [set(a) for a in ours["body"]] == [set(a) for a in expected]


def test_each_completion_names_the_slot_it_ran_in(server: Server) -> None:
    ours = answer(server.url, ASKS["n_cmpl"])["body"]
    slots = [a["id_slot"] for a in ours]
    assert len(set(slots)) == 2 and all(0 <= slot < 4 for slot in slots)


def test_a_list_of_prompts_gives_one_completion_of_each_in_order(server: Server, theirs: dict[str, Any]) -> None:
    ours = answer(server.url, ASKS["prompts"])["body"]
    expected = theirs["prompts"]["body"]
    assert [a["prompt"] for a in ours] == TWO_PROMPTS
    assert [(a["index"], a["content"], a["tokens_evaluated"]) for a in ours] == [
        (a["index"], a["content"], a["tokens_evaluated"]) for a in expected
    ]


def test_prompt_objects_and_texts_mix_in_a_list_of_prompts(server: Server, theirs: dict[str, Any]) -> None:
    body = {**ASKS["prompts"], "prompt": [{"prompt_string": TWO_PROMPTS[0]}, TWO_PROMPTS[1]]}
    ours = answer(server.url, body)["body"]
    assert [a["content"] for a in ours] == [a["content"] for a in theirs["prompts"]["body"]]


def test_a_stream_of_several_completions_names_each_ones_index(server: Server, theirs: dict[str, Any]) -> None:
    ours, expected = by_index(answer(server.url, ASKS["streamed"])), by_index(theirs["streamed"])
    assert sorted(ours) == sorted(expected) == [0, 1, 2, 3]
    for index, events in ours.items():
        assert "".join(e["content"] for e in events) == "".join(e["content"] for e in expected[index])
        assert [e["stop"] for e in events] == [e["stop"] for e in expected[index]]  # one last event, at the end
        assert events[-1]["prompt"] == TWO_PROMPTS[index // 2]


def test_streamed_pieces_carry_llama_servers_counts(server: Server, theirs: dict[str, Any]) -> None:
    ours, expected = by_index(answer(server.url, ASKS["streamed"])), by_index(theirs["streamed"])
    for index, events in ours.items():
        pieces, their_pieces = events[:-1], expected[index][:-1]
        assert [set(p) for p in pieces] == [set(p) for p in their_pieces]
        assert [(p["id_slot"], p["tokens_predicted"], p["tokens_evaluated"]) for p in pieces] == [
            (p["id_slot"], p["tokens_predicted"], p["tokens_evaluated"]) for p in their_pieces
        ]
        assert events[-1]["id_slot"] in range(4)


@pytest.mark.parametrize("name", ["no_completion", "no_prompt"])
def test_no_completion_or_no_prompt_is_a_400_as_llama_servers(
    server: Server, theirs: dict[str, Any], name: str
) -> None:
    ours = answer(server.url, ASKS[name])
    assert ours["status"] == theirs[name]["status"] == 400
    assert ours["body"]["error"]["type"] == theirs[name]["body"]["error"]["type"] == "invalid_request_error"


def test_more_completions_than_a_request_may_run_is_a_400_naming_the_field(server: Server) -> None:
    reply = httpx.post(f"{server.url}/completion", json={"prompt": ["a", "b"], "n_cmpl": 100}, timeout=60)
    assert reply.status_code == 400
    assert "n_cmpl" in reply.json()["error"]["message"]
