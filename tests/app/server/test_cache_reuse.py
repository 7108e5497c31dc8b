"""KV cache reuse by shifting (``--cache-reuse``) and context shift (``--context-shift``), on real servers.

Runs of the old cache that a new prompt has again further on are moved there rather than computed again. Where
tokens were removed (a chat trimmed at its start), localinfer moves them as llama-server does, and the same
requests give the same counts and the same text on both. Where tokens were inserted (a character typed in an
editor), llama-server computes everything from the insertion on; localinfer with one slot computes only the new
tokens. The tests send the same requests to llama-server (built from the same vendored llama.cpp) and to
``localinfer serve`` on SmolLM2, each with one slot and ``--cache-reuse 64``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

FUNCTIONS = "".join(
    f"def helper_{i}(values, scale={i}):\n    mean = sum(values) / len(values)\n"
    f"    return [v * scale for v in values if v > mean]\n\n"
    for i in range(12)
)
BEFORE = "# file\nimport math\n\n" + FUNCTIONS + "def norm(values):\n    return math.sq"
AFTER = "\n\n\ndef other(x):\n    return x * 2\n" + FUNCTIONS.replace("helper", "tool")
TRIMMED = [BEFORE + AFTER, BEFORE[200:] + AFTER, BEFORE[400:] + AFTER]  # a chat losing its oldest turns
TYPED = [BEFORE + AFTER, BEFORE + "r" + AFTER, BEFORE + "rt" + AFTER, BEFORE + "rt(" + AFTER]  # keystrokes
ONE_SLOT = ("-c", "4096", "-np", "1", "--cache-reuse", "64")


def complete(url: str, prompt: str, **fields: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0, **fields}
    reply = httpx.post(f"{url}/completion", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def figures(answer: dict[str, Any]) -> tuple[int, int, str]:
    return answer["timings"]["cache_n"], answer["timings"]["prompt_n"], answer["content"]


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), *ONE_SLOT) as url:
        trimmed = [complete(url, p) for p in TRIMMED]
        typed = [complete(url, p) for p in TYPED]
    return {"trimmed": trimmed, "typed": typed}


@pytest.fixture(scope="module")
def server(
    theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-reuse"), *ONE_SLOT, "--spec", "off") as s:
        yield s


def test_a_prompt_trimmed_at_its_start_is_moved_back_as_llama_server_moves_it(
    server: Server, theirs: dict[str, Any]
) -> None:
    ours = [complete(server.url, p) for p in TRIMMED]
    assert [figures(a) for a in ours] == [figures(a) for a in theirs["trimmed"]]
    assert ours[1]["timings"]["prompt_n"] < 10 and ours[1]["timings"]["cache_shifted_n"] > 500


def test_a_keystroke_computes_only_the_new_tokens_where_llama_server_computes_the_rest_again(
    server: Server, theirs: dict[str, Any]
) -> None:
    ours = [complete(server.url, p) for p in TYPED]
    for answer, their in zip(ours[1:], theirs["typed"][1:], strict=True):
        evaluated = answer["tokens_evaluated"]
        assert answer["timings"]["prompt_n"] <= 4
        assert answer["timings"]["cache_n"] == evaluated - answer["timings"]["prompt_n"]
        assert their["timings"]["prompt_n"] > evaluated // 3  # from the cursor on


def test_typing_the_same_keystrokes_again_gives_the_same_replies(server: Server) -> None:
    def session() -> list[str]:
        complete(server.url, "Something else entirely.", cache_prompt=False)  # the cache holds another text now
        return [complete(server.url, p)["content"] for p in TYPED]

    assert session() == session()


def test_shifted_tokens_are_counted_in_metrics(server: Server) -> None:
    def shifted() -> float:
        lines = httpx.get(f"{server.url}/metrics", timeout=30).text.splitlines()
        name = "localinfer_prompt_tokens_shifted_total"
        return sum(float(line.split()[-1]) for line in lines if line.startswith(name))

    before = shifted()
    moved = [complete(server.url, p)["timings"].get("cache_shifted_n", 0) for p in TYPED[:2]]
    assert moved[1] > 0 and shifted() - before == sum(moved)


def test_with_several_slots_removed_tokens_are_moved_and_inserted_ones_are_not(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    flags = ("-c", "4096", "-np", "2", "--cache-reuse", "64")
    with serving(smollm2.name, test_home, tmp_path, *flags) as several:
        complete(several.url, TRIMMED[0])
        assert complete(several.url, TRIMMED[1])["timings"]["cache_shifted_n"] > 500
        complete(several.url, TYPED[0])
        assert "cache_shifted_n" not in complete(several.url, TYPED[1])["timings"]


def test_cache_reuse_0_moves_nothing(smollm2: Manifest, test_home: Path, tmp_path: Path) -> None:
    with serving(smollm2.name, test_home, tmp_path, "-c", "4096", "-np", "1", "--cache-reuse", "0") as off:
        complete(off.url, TRIMMED[0])
        answer = complete(off.url, TRIMMED[1])
        assert "cache_shifted_n" not in answer["timings"] and answer["timings"]["cache_n"] == 0


def test_a_model_whose_cache_cannot_shift_says_why_and_computes_the_prompt(
    gemma3: Manifest, test_home: Path, tmp_path: Path
) -> None:
    with serving(gemma3.name, test_home, tmp_path, *ONE_SLOT) as sliding:
        complete(sliding.url, TRIMMED[0])
        assert "cache_shifted_n" not in complete(sliding.url, TRIMMED[1])["timings"]
        log = sliding.log.read_text()
    assert "cache reuse by shifting is off for this model: its attention has a sliding window" in log


CONTEXT = ("-c", "256", "-np", "1")
LONG = {"n_predict": 400, "ignore_eos": True, "n_keep": 8}


def test_context_shift_lets_a_generation_run_past_the_context_as_llama_servers_does(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    prompt = "Here is a long story about a cat and a dog.\n"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    with llama_server(smollm2.path, tmp_path / "theirs", *CONTEXT, "--context-shift") as url:
        their = complete(url, prompt, **LONG)
    with serving(smollm2.name, test_home, tmp_path / "ours", *CONTEXT, "--context-shift", "--spec", "off") as s:
        ours = complete(s.url, prompt, **LONG)
    assert ours["tokens_predicted"] == their["tokens_predicted"] == 400
    assert ours["truncated"] is their["truncated"] is True
    assert ours["content"] == their["content"]


def test_without_context_shift_a_generation_ends_when_the_context_is_full(server: Server, tmp_path: Path) -> None:
    answer = complete(server.url, "Once upon a time", n_predict=5000, ignore_eos=True, cache_prompt=False)
    assert answer["stop_type"] == "limit" and answer["truncated"] is False
    assert answer["tokens_evaluated"] + answer["tokens_predicted"] == 4096
