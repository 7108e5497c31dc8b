"""Greedy text that does not depend on the cache (issue #42), through real servers on SmolLM2, over the fifty prompts
of tests/greedy_corpus.py (25 chats, 25 ``/completion`` prompts, 20 to 2,000 tokens): each is sent cold
(``cache_prompt`` false: the whole prompt computed) and then again cached (all but its last token served from the
slot), and the two texts must be the same, with speculation off and with the defaults. A cold prompt's last token is
computed in a step of its own, as a cached prompt's is; computed with the rest, as llama-server computes it, a
near-tie in the first logits can go another way on some CPUs. With that switched off (``--no-last-token-alone``),
localinfer writes what the real llama-server writes in the same configuration, cold and cached.

Every server has one slot of 2,560 tokens (``-c 2560 -np 1``), and each request asks for 8 tokens."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.greedy_corpus import Prompt, corpus
from tests.llama_cpp_tools import llama_server

# Each fixture sends the corpus twice to a server of its own (17k prompt tokens): a minute on two idle cores, several
# on busy ones, so the first test of each is given the time pytest-timeout's default (300 s) may not leave.
pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

SLOT = ("-c", "2560", "-np", "1")
MAX_TOKENS = 8
CORPUS = corpus()


@dataclass(frozen=True)
class Pair:
    """One prompt's text cold and cached, and how many of its tokens the cached request found in the cache."""

    cold: str
    cached: str
    prompt_tokens: int
    cached_tokens: int
    cold_drafts: tuple[int, int] = (0, 0)  # draft tokens fed and kept (timings' draft_n, draft_n_accepted)
    cached_drafts: tuple[int, int] = (0, 0)


class Answer(NamedTuple):
    text: str
    prompt_tokens: int
    cached_tokens: int
    drafts: tuple[int, int]  # draft_n and draft_n_accepted of its timings (0, 0 where there are none)


def drafts(timings: dict[str, Any] | None) -> tuple[int, int]:
    timings = timings or {}
    return timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)


def ask(url: str, model: str, prompt: Prompt, cache_prompt: bool) -> Answer:
    """The greedy text, the prompt's tokens, those served from the cache, and the drafts."""
    if prompt.kind == "chat":
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        with client:
            reply = client.chat.completions.create(
                model=model,
                messages=prompt.chat_messages(),  # type: ignore[arg-type]
                max_tokens=MAX_TOKENS,
                temperature=0,
                extra_body={"cache_prompt": cache_prompt},
            )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        details = reply.usage.prompt_tokens_details
        text = reply.choices[0].message.content or ""
        timings = (reply.model_extra or {}).get("timings")
        return Answer(text, reply.usage.prompt_tokens, details.cached_tokens or 0, drafts(timings))
    body = {"prompt": prompt.text, "n_predict": MAX_TOKENS, "temperature": 0, "cache_prompt": cache_prompt}
    answer = httpx.post(f"{url}/completion", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    timings = data["timings"]
    return Answer(data["content"], timings["prompt_n"] + timings["cache_n"], timings["cache_n"], drafts(timings))


def pairs(url: str, model: str) -> list[Pair]:
    out = []
    for prompt in CORPUS:
        cold = ask(url, model, prompt, cache_prompt=False)
        cached = ask(url, model, prompt, cache_prompt=True)
        out.append(Pair(cold.text, cached.text, cold.prompt_tokens, cached.cached_tokens, cold.drafts, cached.drafts))
    return out


def localinfer_pairs(smollm2: Manifest, home: Path, log_dir: Path, *flags: str) -> list[Pair]:
    with serving(smollm2.name, home, log_dir, *SLOT, *flags) as server:
        return pairs(server.url, smollm2.name)


@pytest.fixture(scope="module")
def spec_off(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Pair]:
    return localinfer_pairs(smollm2, test_home, tmp_path_factory.mktemp("greedy-spec-off"), "--spec", "off")


@pytest.fixture(scope="module")
def defaults(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Pair]:
    return localinfer_pairs(smollm2, test_home, tmp_path_factory.mktemp("greedy-defaults"))


@pytest.fixture(scope="module")
def switched_off(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Pair]:
    log_dir = tmp_path_factory.mktemp("greedy-switched-off")
    return localinfer_pairs(smollm2, test_home, log_dir, "--spec", "off", "--no-last-token-alone")


@pytest.fixture(scope="module")
def llama(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Pair]]:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("greedy-llama-server"), *SLOT) as url:
        yield pairs(url, smollm2.name)


def test_the_corpus_has_fifty_prompts_of_20_to_2000_tokens_in_both_routes(spec_off: list[Pair]) -> None:
    assert len(CORPUS) == 50
    assert {p.kind for p in CORPUS[::2]} == {"chat"} and {p.kind for p in CORPUS[1::2]} == {"completion"}
    sizes = [pair.prompt_tokens for pair in spec_off]
    assert min(sizes) >= 20 and max(sizes) <= 2200 and sum(size > 1000 for size in sizes) >= 5, sizes


def assert_cold_is_cached(found: list[Pair]) -> None:
    assert all(pair.cached_tokens == pair.prompt_tokens - 1 for pair in found), "the second request was not cached"
    # drafted alike (from the request's own text), so computed alike: a draft from the cold answer, verified in a
    # step of several tokens, is computed otherwise than the steps of one that wrote it, on some CPUs
    drafted_otherwise = [
        (i, pair.cold_drafts, pair.cached_drafts)
        for i, pair in enumerate(found)
        if pair.cold_drafts != pair.cached_drafts
    ]
    assert not drafted_otherwise, f"drafted otherwise cold and cached: {drafted_otherwise}"
    differ = [(i, pair.cold, pair.cached) for i, pair in enumerate(found) if pair.cold != pair.cached]
    assert not differ, f"{len(differ)} of {len(found)} prompts differ cold and cached: {differ}"


def test_greedy_text_is_the_same_cold_and_cached_with_speculation_off(spec_off: list[Pair]) -> None:
    assert_cold_is_cached(spec_off)


def test_greedy_text_is_the_same_cold_and_cached_with_the_defaults(defaults: list[Pair]) -> None:
    assert_cold_is_cached(defaults)


def test_with_the_switch_off_the_text_is_llama_servers_cold_and_cached(
    switched_off: list[Pair], llama: list[Pair]
) -> None:
    assert [pair.prompt_tokens for pair in switched_off] == [pair.prompt_tokens for pair in llama]
    both = enumerate(zip(switched_off, llama, strict=True))
    differ = [(i, ours, theirs) for i, (ours, theirs) in both if ours != theirs]
    assert not differ, f"{len(differ)} of {len(llama)} prompts differ from llama-server's: {differ}"
