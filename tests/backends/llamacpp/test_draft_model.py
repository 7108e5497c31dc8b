"""Speculative decoding with a draft model (``--spec draft``), on the real step loop.

No second model of SmolLM2's or Gemma 3's family is on PyPI, so each model drafts for itself: the check the issue
names for correctness and overhead. A model drafting for itself proposes its own greedy continuation, so every
drafted token is kept, and greedy output is the output without speculation, alone and inside a batch of four. A
seeded sampled reply is the same too. SmolLM2 and Gemma 3 have different vocabularies, which is the refusal case.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.draft_model import DraftModel
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.config import Settings
from localinfer.errors import ModelLoadError
from localinfer.hardware.model_profile import from_path
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, SamplingParams
from tests.app.server.conftest import Server, serving
from tests.backends.llamacpp.test_speculation import (
    EDIT_REPLY,
    alike_drafts,
    alone_and_in_a_batch_of_four,
    edit_case,
    greedy,
    loaded,
    replies,
    reply,
    within_alike_cells,
)

pytestmark = pytest.mark.model

__all__ = ["edit_case"]  # the fixture, shared with the prompt lookup tests


async def drafting_for_itself(manifest: Manifest) -> LlamaCppBackend:
    return await loaded(manifest, speculation="draft", draft_path=manifest.path, **alike_drafts(manifest))


async def test_a_model_drafting_for_itself_keeps_every_draft_and_the_greedy_text(
    edit_case: tuple[Manifest, str],
) -> None:
    manifest, prompt = edit_case
    [expected] = await replies(manifest, [prompt], greedy(EDIT_REPLY), speculation="off")
    backend = await drafting_for_itself(manifest)
    try:
        text, timings = await reply(backend, prompt, greedy(EDIT_REPLY))
    finally:
        await backend.unload()
    assert within_alike_cells(timings), timings
    assert text == expected and text.strip()
    assert timings.draft_n >= 48, timings  # most of the reply was drafted...
    assert timings.draft_n_accepted == timings.draft_n  # ...and every drafted token was the model's own pick


async def test_greedy_output_with_a_draft_model_inside_a_batch_of_four_is_the_output_alone(
    edit_case: tuple[Manifest, str],
) -> None:
    manifest, prompt = edit_case
    alone, together = await alone_and_in_a_batch_of_four(
        manifest, prompt, speculation="draft", draft_path=manifest.path
    )
    assert [text for text, _ in together] == alone
    drafted = sum(timings.draft_n for _, timings in together)
    assert drafted >= 40 and sum(timings.draft_n_accepted for _, timings in together) == drafted


async def test_a_seeded_sampled_reply_is_the_same_with_a_draft_model(edit_case: tuple[Manifest, str]) -> None:
    manifest, prompt = edit_case
    options = GenerationOptions(
        sampling=SamplingParams(temperature=0.7, top_k=40, top_p=0.95, seed=1234), max_tokens=64, ignore_eos=True
    )
    [without] = await replies(manifest, [prompt], options, speculation="off")
    [with_draft] = await replies(
        manifest, [prompt], options, speculation="draft", draft_path=manifest.path, **alike_drafts(manifest)
    )
    assert with_draft == without and without.strip()


async def test_the_draft_cache_follows_the_conversation(smollm2: Manifest) -> None:
    """A second turn extends the first: the draft model's sequence keeps the first turn and computes only the
    rest, and its drafts are still the model's own picks."""
    first = "<|im_start|>user\nList the days of the week, one per line.<|im_end|>\n<|im_start|>assistant\n"
    backend = await drafting_for_itself(smollm2)
    try:
        answer, _ = await reply(backend, first, greedy(48))
        second = (
            first + answer + "<|im_end|>\n<|im_start|>user\nNow list them again.<|im_end|>\n<|im_start|>assistant\n"
        )
        _, timings = await reply(backend, second, greedy(48))
    finally:
        await backend.unload()
    assert timings.draft_n > 0 and timings.draft_n_accepted == timings.draft_n


def load_target(manifest: Manifest) -> tuple[LoadSpec, LlamaModel]:
    spec = LoadSpec(path=manifest.path, ctx_size=512, parallel=1, threads=2)
    return spec, LlamaModel.load(spec)


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_draft_model_proposes_the_text_it_is_sure_of(name: str, request: pytest.FixtureRequest) -> None:
    """A sentence said three times and begun again: the draft is the rest of it, as far as the draft model is
    sure of each token (SmolLM2 135M is sure of two; Gemma 3 of the whole sentence on the machine this was written
    on), and after part of a draft is kept, the next one goes on from there."""
    manifest: Manifest = request.getfixturevalue(name)
    spec, target = load_target(manifest)
    try:
        draft = DraftModel.load(dataclasses.replace(spec, draft_path=manifest.path), target)
        try:
            prompt = target.tokenize(SENTENCE * 3 + "The quick", add_special=True, parse_special=False)
            rest = target.tokenize(" brown fox jumps over the lazy dog.", add_special=False, parse_special=False)
            source = draft.source(prompt, 0)
            proposal = source.propose(8)
            assert len(proposal) >= 2 and proposal == rest[: len(proposal)]
            source.extend(rest[:1])  # one drafted token kept: what the draft model computed past it is dropped
            assert source.propose(1) == rest[1:2]
            assert source.propose(0) == []
        finally:
            draft.free()
    finally:
        target.free()


SENTENCE = "The quick brown fox jumps over the lazy dog. "


def test_a_draft_model_of_another_vocabulary_is_refused(smollm2: Manifest, gemma3: Manifest) -> None:
    spec, target = load_target(smollm2)
    try:
        with pytest.raises(ModelLoadError) as refused:
            DraftModel.load(dataclasses.replace(spec, draft_path=gemma3.path), target)
    finally:
        target.free()
    assert "cannot draft for" in refused.value.message and "tokenizer is of another kind" in refused.value.message
    assert refused.value.hint and "same family" in refused.value.hint


async def test_a_backend_whose_draft_model_is_refused_loads_nothing(smollm2: Manifest, gemma3: Manifest) -> None:
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError, match="cannot draft for"):
        await backend.load(
            LoadSpec(path=smollm2.path, ctx_size=512, threads=2, speculation="draft", draft_path=gemma3.path)
        )
    assert backend.slots() == []  # no step loop was started; the target was freed


# --- through the server -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def draft_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    extra = ("--parallel", "1", "--ctx-size", "2048", "--draft", str(smollm2.path))
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("draft"), *extra) as server:
        yield server


def test_serve_with_draft_answers_and_reports_the_drafts(draft_server: Server) -> None:
    body = {"prompt": "One, two, three, four, five, six, seven, eight,", "n_predict": 24, "temperature": 0}
    answer = httpx.post(f"{draft_server.url}/completion", json=body, timeout=120).json()
    assert answer["content"].strip()
    timings = answer["timings"]
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"], timings


def loaded_model(server: Server) -> tuple[dict[str, Any], dict[str, Any]]:
    """The served model as /api/ps and as localinfer's own status describe it."""
    [ps] = httpx.get(f"{server.url}/api/ps", timeout=30).json()["models"]
    [status] = httpx.get(f"{server.url}/api/localinfer/status", timeout=30).json()["loaded"]
    return ps, status


def test_api_ps_and_the_memory_estimate_count_the_draft_model(
    draft_server: Server, smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    extra = ("--parallel", "1", "--ctx-size", "2048")
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("no-draft"), *extra) as plain:
        alone_ps, alone = loaded_model(plain)
    with_draft_ps, with_draft = loaded_model(draft_server)
    assert with_draft_ps["size"] == 2 * alone_ps["size"] > 0  # the draft's weights beside the model's (the same)
    # and, in what the scheduler counts before loading another model, its KV cache: one slot of 2048 f16 tokens
    draft = from_path(smollm2.path)
    assert draft.kv_bytes_per_token
    assert with_draft["memory_bytes"] - alone["memory_bytes"] == draft.size_bytes + 2048 * draft.kv_bytes_per_token


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_spec_draft_without_a_draft_model_is_a_one_line_error(tmp_path: Path) -> None:
    answer = cli("serve", "--spec", "draft", home=tmp_path)
    assert answer.returncode == 1
    assert "--spec draft needs a draft model" in answer.stderr and "--draft MODEL" in answer.stderr
    assert "Traceback" not in answer.stderr


def test_a_draft_model_that_is_not_there_is_a_one_line_error(tmp_path: Path) -> None:
    answer = cli("serve", "--draft", "no-such-draft", home=tmp_path)
    assert answer.returncode == 1 and "no-such-draft" in answer.stderr
    assert "Traceback" not in answer.stderr


def test_naming_a_draft_model_turns_draft_speculation_on_unless_spec_says_otherwise() -> None:
    assert Settings(spec=None, draft=None).speculation == "ngram"
    assert Settings(spec=None, draft="qwen-0.5b").speculation == "draft"
    assert Settings(spec="off", draft="qwen-0.5b").speculation == "off"
    assert Settings(spec="ngram", draft="qwen-0.5b").speculation == "ngram"


def test_serve_with_a_draft_of_another_vocabulary_stops_at_start_in_one_line(
    smollm2: Manifest, gemma3: Manifest, tmp_path: Path
) -> None:
    """Found from the two vocabularies before any weights load: the server does not start, rather than answer
    every request with a load failure."""
    answer = cli("serve", str(smollm2.path), "--draft", str(gemma3.path), home=tmp_path)
    assert answer.returncode == 1, answer.stderr
    message, hint = answer.stderr.strip().splitlines()[-2:]  # after llama.cpp's own warnings, if any
    assert message.startswith("localinfer: the draft model") and "its tokenizer is of another kind" in message
    assert hint.startswith("hint: pick a smaller model of the same family") and "Traceback" not in answer.stderr
