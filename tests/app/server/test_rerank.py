"""llama-server's reranking routes (/v1/rerank, /rerank, /v1/reranking, /reranking) on a real server with SmolLM2
stated as a reranker (``tests/rerank_model.py``): the scores llama-server gives for the same file, the Jina/Cohere
and TEI shapes, a pair's score whatever else is sent with it, and the 400s in llama-server's error shape.

The parity check runs llama-server (the one bench/build-llama-cpp builds from the llama.cpp llama-cpp-python
vendors) with ``--reranking`` on each copy, with the context and slots localinfer is started with and flash
attention on: llama.cpp's default ("auto") turns it on in the contexts our backend creates, while llama-server's
"auto" leaves it off on a CPU, and with it off the same pairs score up to ~0.07 apart (measured), enough to swap
two documents. With it on both score bit for bit the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.app.server.core.dialect import Dialect, dialect_for
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

CTX = 512
PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")
PANDA = {
    "query": "What is a panda?",
    "documents": [
        "hi",
        "it is a bear",
        "The giant panda (Ailuropoda melanoleuca), sometimes called a panda bear, is a bear species endemic to China.",
        "Pandas are the fastest cars in Italy.",
    ],
}
REQUESTS: list[dict[str, Any]] = [
    PANDA,
    {
        "query": "how do I sort a list in Python?",
        "documents": [
            "Use sorted(xs) for a new list or xs.sort() to sort in place.",
            "def add(a, b):\n    return a + b\n",
            "The capital of France is Paris.",
            "",  # an empty document is a pair too, as llama-server scores it
            "Sorting <|im_start|> with special text in it",
        ],
    },
    {"query": "", "documents": ["a query may be empty", "x"]},
]
TOLERANCE = 1e-4  # the scores are bit for bit llama-server's here; this leaves room for another CPU's kernels


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=json.dumps(body).encode(), timeout=120)


def assert_llamacpp_error(response: httpx.Response, status: int = 400) -> str:
    """The response is llama-server's error shape with ``status``; returns its message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "type"} and error["code"] == status and error["message"]
    return str(error["message"])


def ranked_scores(answer: dict[str, Any]) -> dict[int, float]:
    return {result["index"]: result["relevance_score"] for result in answer["results"]}


@pytest.fixture(scope="module")
def rerankers(smollm2_rerank: Manifest, smollm2_rerank_template: Manifest, smollm2: Manifest) -> list[Manifest]:
    """Both reranker copies, registered in the test home (and SmolLM2 itself, the model that is no reranker)."""
    return [smollm2_rerank, smollm2_rerank_template]


@pytest.fixture(scope="module")
def llama_server_answers(rerankers: list[Manifest], tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """llama-server's /v1/rerank answers to REQUESTS, by model; each llama-server runs only while it is asked."""
    answers: dict[str, list[Any]] = {}
    for manifest in rerankers:
        settings = ("--reranking", "-c", str(CTX), "-np", "1", "-fa", "on")
        with llama_server(manifest.path, tmp_path_factory.mktemp("llama-server"), *settings) as url:
            answers[manifest.name] = []
            for body in REQUESTS:
                reply = httpx.post(f"{url}/v1/rerank", json=body, timeout=300)
                assert reply.status_code == 200, reply.text
                answers[manifest.name].append(reply.json())
    return answers


@pytest.fixture(scope="module")
def rerank_server(
    rerankers: list[Manifest], test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """localinfer serving ``smollm2-rerank`` by default (the other models load when named, and a name nobody serves
    is a 404), with llama-server's context."""
    log_dir = tmp_path_factory.mktemp("serve-rerank")
    flags = ("--ctx-size", str(CTX), "--parallel", "1", "--strict-model-names")
    with serving(rerankers[0].name, test_home, log_dir, *flags) as server:
        yield server


# --- parity with llama-server ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["smollm2-rerank", "smollm2-rerank-template"])
@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_scores_and_order_are_llama_servers(
    rerank_server: Server, llama_server_answers: dict[str, list[Any]], model: str, index: int
) -> None:
    theirs = llama_server_answers[model][index]
    reply = post(rerank_server, "/v1/rerank", {"model": model, **REQUESTS[index]})
    assert reply.status_code == 200, reply.text
    ours = reply.json()
    assert ours["usage"] == theirs["usage"]  # the same pairs, token for token
    assert [r["index"] for r in ours["results"]] == [r["index"] for r in theirs["results"]]
    mine, llama = ranked_scores(ours), ranked_scores(theirs)
    assert max(abs(mine[i] - llama[i]) for i in llama) <= TOLERANCE, (mine, llama)


# --- the answer's shape ------------------------------------------------------------------------------------------


def test_results_are_sorted_by_score_and_index_into_the_documents(rerank_server: Server) -> None:
    answer = post(rerank_server, "/v1/rerank", {"model": "smollm2-rerank", **PANDA}).json()
    assert answer["object"] == "list" and answer["model"] == "smollm2-rerank"
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] > len(PANDA["documents"])
    scores = [r["relevance_score"] for r in answer["results"]]
    assert scores == sorted(scores, reverse=True)
    assert sorted(r["index"] for r in answer["results"]) == list(range(len(PANDA["documents"])))
    assert len(set(scores)) == len(scores)  # different pairs, different scores
    assert all(set(r) == {"index", "relevance_score"} for r in answer["results"])  # no documents unless asked
    for result in answer["results"]:  # each index is its own document's: scored alone, it gets the same number
        alone = post(
            rerank_server, "/v1/rerank", {"query": PANDA["query"], "documents": [PANDA["documents"][result["index"]]]}
        )
        assert alone.json()["results"][0]["relevance_score"] == result["relevance_score"]


def test_top_n_keeps_the_best_ones(rerank_server: Server) -> None:
    every = post(rerank_server, "/v1/rerank", PANDA).json()
    for top_n in (1, 2, len(PANDA["documents"]) + 5):
        cut = post(rerank_server, "/v1/rerank", {**PANDA, "top_n": top_n}).json()
        assert cut["results"] == every["results"][:top_n]
        assert cut["usage"] == every["usage"]  # every pair was scored
    assert post(rerank_server, "/v1/rerank", {**PANDA, "top_n": 0}).json()["results"] == []  # as llama-server


@pytest.mark.parametrize("flag", ["return_documents", "return_text"])
def test_documents_come_back_when_asked(rerank_server: Server, flag: str) -> None:
    answer = post(rerank_server, "/v1/rerank", {**PANDA, flag: True, "top_n": 2}).json()
    assert len(answer["results"]) == 2
    for result in answer["results"]:
        assert result["document"] == {"text": PANDA["documents"][result["index"]]}


def test_texts_get_teis_shape(rerank_server: Server) -> None:
    jina = post(rerank_server, "/v1/rerank", PANDA).json()["results"]
    tei = post(rerank_server, "/rerank", {"query": PANDA["query"], "texts": PANDA["documents"], "return_text": True})
    assert tei.status_code == 200, tei.text
    assert tei.json() == [
        {"index": r["index"], "score": r["relevance_score"], "text": PANDA["documents"][r["index"]]} for r in jina
    ]


def test_every_path_answers_the_same(rerank_server: Server) -> None:
    answers = [post(rerank_server, path, PANDA).json() for path in PATHS]
    assert all(answer == answers[0] for answer in answers)
    assert all(dialect_for(path) is Dialect.LLAMACPP for path in PATHS)


def test_a_pair_scores_the_same_alone_and_among_others(rerank_server: Server) -> None:
    pair = ("What is a panda?", "it is a bear")
    alone = post(rerank_server, "/v1/rerank", {"query": pair[0], "documents": [pair[1]]}).json()
    crowd = ["first", pair[1], "x " * 200, "The giant panda is a bear.", pair[1]]
    among = post(rerank_server, "/v1/rerank", {"query": pair[0], "documents": crowd}).json()
    score = alone["results"][0]["relevance_score"]
    assert ranked_scores(among)[1] == ranked_scores(among)[4] == score  # bit for bit


# --- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"documents": ["a"]}, '"query" must be provided'),
        ({"query": 3, "documents": ["a"]}, '"query" must be a string'),
        ({"query": None, "documents": ["a"]}, '"query" must be a string'),
        ({"query": "q"}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": []}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": "a"}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": ["a", 3]}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": [["a"]]}, '"documents" must be a non-empty string array'),
        ({"query": "q", "texts": []}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
        ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    ],
)
def test_bad_input_is_a_400_in_llama_servers_shape_and_the_server_keeps_serving(
    rerank_server: Server, body: dict[str, Any], says: str
) -> None:
    assert says in assert_llamacpp_error(post(rerank_server, "/v1/rerank", body))
    assert post(rerank_server, "/v1/rerank", PANDA).status_code == 200


def test_a_pair_past_the_context_is_a_400_with_the_numbers(rerank_server: Server) -> None:
    for body in ({"query": "q", "documents": ["ok", "word " * CTX]}, {"query": "word " * CTX, "documents": ["ok"]}):
        reply = post(rerank_server, "/v1/rerank", body)
        assert_llamacpp_error(reply)
        error = reply.json()["error"]
        assert error["type"] == "exceed_context_size_error"
        assert error["n_prompt_tokens"] > CTX and error["n_ctx"] == CTX
    huge = post(rerank_server, "/v1/rerank", {"query": "q", "documents": ["word " * 200_000]})  # refused untokenized
    assert huge.json()["error"]["type"] == "exceed_context_size_error"
    assert post(rerank_server, "/v1/rerank", PANDA).status_code == 200


def test_a_model_that_is_no_reranker_is_a_400_naming_it(rerank_server: Server, smollm2: Manifest) -> None:
    message = assert_llamacpp_error(post(rerank_server, "/v1/rerank", {"model": smollm2.name, **PANDA}))
    assert f"'{smollm2.name}'" in message and "is not a reranker" in message


def test_an_unknown_model_is_a_404_in_llama_servers_shape(rerank_server: Server) -> None:
    assert_llamacpp_error(post(rerank_server, "/rerank", {"model": "no-such-model", **PANDA}), 404)


def test_a_reranker_asked_to_embed_or_generate_is_a_400_saying_so(rerank_server: Server) -> None:
    model = "smollm2-rerank"
    asks: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/embeddings", {"model": model, "input": "hello"}, "does not embed texts"),
        ("/api/embed", {"model": model, "input": "hello"}, "does not embed texts"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}]}, "generate"),
        ("/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 4}, "does not generate text"),
        ("/completion", {"model": model, "prompt": "hi", "n_predict": 4}, "does not generate text"),
        ("/api/generate", {"model": model, "prompt": "hi", "stream": False}, "does not generate text"),
    ]
    for path, body, says in asks:
        reply = post(rerank_server, path, body)
        assert reply.status_code == 400, (path, reply.text)
        error = reply.json()["error"]
        message = error if isinstance(error, str) else error["message"]
        assert f"model '{model}' is a reranker" in message and says in message, (path, message)


# --- a model that states no rank pooling, served with --reranking --------------------------------------------------


def test_reranking_flag_reranks_with_the_model_served_as_llama_server_does(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    settings = ("--reranking", "-c", str(CTX), "-np", "1")
    with llama_server(smollm2.path, tmp_path, *settings, "-fa", "on") as url:
        theirs = httpx.post(f"{url}/v1/rerank", json=PANDA, timeout=300).json()
    with serving(smollm2.name, test_home, tmp_path, *settings) as server:
        reply = post(server, "/v1/rerank", PANDA)
        assert reply.status_code == 200, reply.text
        assert "names no rank head" in server.output()
    ours = reply.json()
    assert ours["usage"] == theirs["usage"]
    assert [r["index"] for r in ours["results"]] == [r["index"] for r in theirs["results"]]
    mine, llama = ranked_scores(ours), ranked_scores(theirs)
    assert max(abs(mine[i] - llama[i]) for i in llama) <= TOLERANCE, (mine, llama)
