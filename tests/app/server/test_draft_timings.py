"""``timings`` when drafting ran, as llama-server reports them: ``draft_n`` (tokens drafted) and ``draft_n_accepted``
(those kept) beside the usual figures, and ``predicted_per_second`` counted over the tokens after the first (each
step may keep several). Checked against the real llama-server on the same GGUF, both drafting by n-gram lookup
(``--spec-type ngram-simple`` given to both: localinfer's own lookup, ``--spec ngram``) on a prompt whose reply a
grammar forces to copy a line the prompt holds, so both draft from it and keep the drafts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

SPEC = ("--spec-type", "ngram-simple")  # the same flag to both: localinfer reads it as its --spec ngram
LINE = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20"
BODY = {
    "prompt": f"Copy: {LINE}\nCopy: {LINE}\nCopy:",
    "grammar": f'root ::= " {LINE}"',  # the reply is the line again, whatever the CPU's arithmetic
    "n_predict": 96,
    "temperature": 0,
    "cache_prompt": False,
}


def complete(url: str, **extra: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/completion", json={**BODY, **extra}, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = ("-c", "1024", "-np", "1", *SPEC)
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), *settings) as url:
        return complete(url)


@pytest.fixture(scope="module")
def ours(theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    logs = tmp_path_factory.mktemp("serve-draft")
    with serving(smollm2.name, test_home, logs, "--ctx-size", "1024", "--parallel", "1", *SPEC) as s:
        return complete(s.url)


@pytest.fixture(params=["ours", "theirs"])
def answer(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each server's answer: every assertion below holds for llama-server and for localinfer alike."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_the_reply_copies_the_line(answer: dict[str, Any]) -> None:
    assert answer["content"] == f" {LINE}"


def test_timings_say_how_many_tokens_were_drafted_and_kept(answer: dict[str, Any]) -> None:
    timings = answer["timings"]
    assert timings["draft_n"] >= timings["draft_n_accepted"] > 0, timings


def test_the_timings_have_llama_servers_fields(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours["timings"]) == set(theirs["timings"])


def test_the_decode_rate_counts_the_tokens_after_the_first(answer: dict[str, Any]) -> None:
    timings = answer["timings"]
    after_first = timings["predicted_n"] - 1
    assert timings["predicted_per_second"] == pytest.approx(after_first * 1000 / timings["predicted_ms"], rel=0.01)
    assert timings["predicted_per_token_ms"] == pytest.approx(timings["predicted_ms"] / after_first, rel=0.01)
