"""llama-server's ``n_probs`` on ``/completion`` and ``/infill`` against a real ``localinfer serve`` with SmolLM2 and
the real llama-server on the same file: ``completion_probabilities``, each generated token's id, text, bytes and
log-probability with its ``top_logprobs``; with ``post_sampling_probs`` its ``prob`` and ``top_probs`` after the
sampler chain; streamed, each piece carrying its own tokens'.

llama-server is the one bench/build-llama-cpp builds from the llama.cpp source llama-cpp-python vendors, started
with flash attention on as our contexts have it (see test_infill_parity.py); each request computes its whole prompt.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

# a chat turn SmolLM2 answers in a few tokens and ends with its end token: "Hello.", the text held to it (another
# CPU's greedy word may be another), after which the model ends it (0.71) rather than write the space the grammar
# also allows. The grammar must not end there itself: a grammar that is complete ends localinfer's reply without the
# end token that llama-server samples and counts.
SHORT_REPLY = "<|im_start|>user\nReply with one word: hello.<|im_end|>\n<|im_start|>assistant\n"
GREEDY: dict[str, Any] = {"prompt": SHORT_REPLY, "n_predict": 8, "temperature": 0, "cache_prompt": False}
ONE_WORD: dict[str, Any] = {"grammar": 'root ::= "Hello." " "?'}
CASES: dict[str, dict[str, Any]] = {
    "greedy, ended by the model": {"n_probs": 3, **ONE_WORD},
    "greedy, cut by n_predict": {"prompt": "The capital of France is", "n_predict": 6, "n_probs": 5},
    "greedy, after the sampler chain": {"n_probs": 3, "post_sampling_probs": True},
    "sampled, after top-k and temperature": {
        "temperature": 0.8,
        "top_k": 5,
        "seed": 1,
        "n_probs": 8,
        "post_sampling_probs": True,
    },
}
TOLERANCE = 1e-3


def completion(url: str, **fields: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/completion", json={**GREEDY, **fields}, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def streamed(url: str, **fields: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/completion", json={**GREEDY, **fields, "stream": True}, timeout=300) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events


@pytest.fixture(scope="module")
def llama(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """llama-server's answers to every case; it runs only while asked."""
    with llama_server(
        smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1", "-fa", "on"
    ) as url:
        return {name: completion(url, **body) for name, body in CASES.items()}


@pytest.fixture(scope="module")
def ours(llama: dict[str, dict[str, Any]], smollm2_server: Server) -> dict[str, dict[str, Any]]:
    """localinfer's answers to the same cases (asked once llama-server is gone)."""
    return {name: completion(smollm2_server.url, **body) for name, body in CASES.items()}


def assert_same_probabilities(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    """The same tokens, texts and bytes, in the same order, with the same (log-)probabilities to TOLERANCE."""
    assert [p["id"] for p in ours] == [p["id"] for p in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        value = "prob" if "prob" in other else "logprob"
        assert set(mine) == set(other), (mine, other)
        assert (mine["token"], mine["bytes"]) == (other["token"], other["bytes"])
        assert math.isclose(mine[value], other[value], abs_tol=TOLERANCE), (mine, other)
        top_key = "top_probs" if value == "prob" else "top_logprobs"
        assert [(t["id"], t["token"], t["bytes"]) for t in mine[top_key]] == [
            (t["id"], t["token"], t["bytes"]) for t in other[top_key]
        ]
        for a, b in zip(mine[top_key], other[top_key], strict=True):
            assert set(a) == set(b) == {"id", "token", "bytes", value}
            assert math.isclose(a[value], b[value], abs_tol=TOLERANCE), (a, b)


@pytest.mark.parametrize("case", list(CASES))
def test_completion_probabilities_are_llama_servers(
    case: str, llama: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]
) -> None:
    assert ours[case]["content"] == llama[case]["content"]
    assert_same_probabilities(ours[case]["completion_probabilities"], llama[case]["completion_probabilities"])


def test_the_end_token_has_its_probabilities_as_on_llama_server(ours: dict[str, dict[str, Any]]) -> None:
    answer = ours["greedy, ended by the model"]
    assert answer["stop_type"] == "eos"
    last = answer["completion_probabilities"][-1]
    assert (last["token"], last["bytes"]) == ("", [])
    assert len(answer["completion_probabilities"]) == answer["tokens_predicted"]


def test_greedy_post_sampling_probs_make_the_token_certain(ours: dict[str, dict[str, Any]]) -> None:
    for entry in ours["greedy, after the sampler chain"]["completion_probabilities"]:
        assert entry["prob"] == 1.0
        assert entry["top_probs"] == [{k: entry[k] for k in ("id", "token", "bytes", "prob")}]


def test_post_sampling_probs_are_those_top_k_leaves(ours: dict[str, dict[str, Any]]) -> None:
    for entry in ours["sampled, after top-k and temperature"]["completion_probabilities"]:
        top = entry["top_probs"]
        assert 1 <= len(top) <= 5
        assert sum(t["prob"] for t in top) == pytest.approx(1.0, abs=1e-5)
        assert [t["prob"] for t in top] == sorted((t["prob"] for t in top), reverse=True)
        assert entry["prob"] == next(t["prob"] for t in top if t["id"] == entry["id"])


def test_generation_settings_show_n_probs_as_llama_server_does(
    llama: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]
) -> None:
    for case in CASES:
        for key in ("n_probs", "post_sampling_probs"):
            assert ours[case]["generation_settings"][key] == llama[case]["generation_settings"][key]


def test_without_n_probs_there_are_no_probabilities(smollm2_server: Server) -> None:
    answer = completion(smollm2_server.url)
    assert "completion_probabilities" not in answer
    assert answer["generation_settings"]["n_probs"] == 0


def test_each_streamed_piece_carries_its_own_tokens_probabilities(
    smollm2_server: Server, ours: dict[str, dict[str, Any]]
) -> None:
    case = "greedy, ended by the model"
    events = streamed(smollm2_server.url, **CASES[case])
    pieces, last = events[:-1], events[-1]
    assert last["stop"] is True
    assert "completion_probabilities" not in last  # as llama-server: the pieces carried them
    for piece in pieces:
        assert [p["id"] for p in piece["completion_probabilities"]] == piece["tokens"]
    every = [p for piece in pieces for p in piece["completion_probabilities"]]
    assert_same_probabilities(every, ours[case]["completion_probabilities"])


def test_infill_answers_n_probs(smollm2_server: Server, smollm2_fim: Manifest) -> None:
    reply = httpx.post(
        f"{smollm2_server.url}/infill",
        json={
            "model": "smollm2-fim",
            "input_prefix": "def add(a, b):\n    return ",
            "input_suffix": "\n",
            "n_predict": 4,
            "temperature": 0,
            "n_probs": 2,
        },
        timeout=300,
    )
    assert reply.status_code == 200, reply.text
    probs = reply.json()["completion_probabilities"]
    assert len(probs) == reply.json()["tokens_predicted"]
    assert all(len(p["top_logprobs"]) == 2 and p["logprob"] <= 0.0 for p in probs)


def test_logprobs_is_n_probs_other_name(smollm2_server: Server, ours: dict[str, dict[str, Any]]) -> None:
    answer = completion(smollm2_server.url, logprobs=3, **ONE_WORD)
    assert answer["generation_settings"]["n_probs"] == 3
    assert_same_probabilities(
        answer["completion_probabilities"], ours["greedy, ended by the model"]["completion_probabilities"]
    )


def test_a_logprobs_that_is_not_a_number_is_a_400_naming_it(smollm2_server: Server) -> None:
    reply = httpx.post(f"{smollm2_server.url}/completion", json={**GREEDY, "logprobs": True}, timeout=300)
    assert reply.status_code == 400
    assert "logprobs" in reply.json()["error"]["message"]


def test_more_n_probs_than_100_is_a_400_naming_it(smollm2_server: Server) -> None:
    for field in ("n_probs", "logprobs"):
        reply = httpx.post(
            f"{smollm2_server.url}/completion", json={"prompt": "Hi", "n_predict": 1, field: 101}, timeout=120
        )
        assert reply.status_code == 400, reply.text
        assert field in reply.json()["error"]["message"]
