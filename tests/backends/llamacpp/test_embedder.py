"""The llama.cpp backend's embeddings, in process on the real SmolLM2 and on its copy that states last-token pooling.

SmolLM2 is causal: a token's last hidden state depends only on the tokens up to it. So SmolLM2 pooled by the
mean (what a generative model gets) must equal the mean of the last-pooled vectors of each prefix of the same
tokens, taken from ``smollm2-embed``: both poolings are checked against each other through the real contexts.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from localinfer.backends.base import EmbeddingInput, LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.embedder import fit
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelNotReady
from localinfer.models.store import Manifest

CTX = 512


async def _loaded(manifest: Manifest) -> LlamaCppBackend:
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=manifest.path, ctx_size=CTX, parallel=1, threads=2))
    return backend


@pytest.fixture
async def smollm2_backend(smollm2: Manifest) -> AsyncIterator[LlamaCppBackend]:
    backend = await _loaded(smollm2)
    try:
        yield backend
    finally:
        await backend.unload()


def norm(vector: tuple[float, ...]) -> float:
    return math.sqrt(math.fsum(x * x for x in vector))


def distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.mark.model
async def test_mean_pooling_of_a_generative_model_is_the_mean_of_the_stated_last_pooling_over_prefixes(
    smollm2_backend: LlamaCppBackend, smollm2_embed: Manifest
) -> None:
    tokens = await smollm2_backend.tokenize("The quick brown fox jumps", add_special=True, parse_special=True)
    assert len(tokens) >= 4
    mean = (await smollm2_backend.embed([tokens], normalize=False)).vectors[0]
    last_pooled = await _loaded(smollm2_embed)
    try:
        prefixes = (await last_pooled.embed([tokens[:n] for n in range(1, len(tokens) + 1)], normalize=False)).vectors
        whole = (await last_pooled.embed([tokens], normalize=False)).vectors[0]
    finally:
        await last_pooled.unload()
    averaged = tuple(math.fsum(column) / len(prefixes) for column in zip(*prefixes, strict=True))
    assert distance(mean, averaged) < 1e-3 * norm(mean)
    assert distance(whole, prefixes[-1]) < 1e-4 * norm(whole)  # the last token's state is the last prefix's
    assert distance(whole, mean) > 1e-2 * norm(mean)  # the copy is not pooled by the mean


@pytest.mark.model
async def test_inputs_embedded_together_equal_each_embedded_alone(smollm2_backend: LlamaCppBackend) -> None:
    texts = ["def add(a, b): return a + b", "The capital of France is Paris.", "x"] * 4
    together = (await smollm2_backend.embed(texts, normalize=True)).vectors
    assert len(together) == len(texts)
    for text, vector in zip(texts[:3], together[:3], strict=True):
        assert (await smollm2_backend.embed([text], normalize=True)).vectors[0] == vector  # bit for bit
    assert together[0] == together[3] == together[9]
    assert distance(together[0], together[1]) > 1e-2


@pytest.mark.model
async def test_normalised_vectors_have_norm_one_and_raw_ones_do_not(smollm2_backend: LlamaCppBackend) -> None:
    normalised = await smollm2_backend.embed(["hello world"], normalize=True)
    raw = await smollm2_backend.embed(["hello world"], normalize=False)
    assert len(normalised.vectors[0]) == 576  # SmolLM2-135M's embedding length
    assert normalised.n_tokens == raw.n_tokens == (2,)
    assert norm(normalised.vectors[0]) == pytest.approx(1.0, abs=1e-6)
    assert norm(raw.vectors[0]) > 2.0
    scaled = tuple(x / norm(raw.vectors[0]) for x in raw.vectors[0])
    assert distance(scaled, normalised.vectors[0]) < 1e-6


@pytest.mark.model
async def test_bad_inputs_are_refused_and_the_backend_keeps_embedding(smollm2_backend: LlamaCppBackend) -> None:
    bad_inputs: list[list[EmbeddingInput]] = [["ok", ""], [[]], [[1, 10**9]], [[-1]]]
    for bad in bad_inputs:
        with pytest.raises(InvalidRequest) as refused:
            await smollm2_backend.embed(bad, normalize=True)
        assert refused.value.param == "input"
    with pytest.raises(ContextLengthExceeded) as too_long:
        await smollm2_backend.embed(["word " * (CTX + 10)], normalize=True)
    assert too_long.value.param == "input" and too_long.value.n_ctx == CTX
    cut = await smollm2_backend.embed(["word " * (CTX + 10)], normalize=True, truncate=True)
    assert cut.n_tokens == (CTX,)
    assert len((await smollm2_backend.embed(["still here"], normalize=True)).vectors) == 1


@pytest.mark.model
async def test_an_unloaded_backend_embeds_no_more(smollm2: Manifest) -> None:
    backend = await _loaded(smollm2)
    await backend.embed(["warm the embedding context"], normalize=True)
    await backend.unload()
    with pytest.raises(ModelNotReady):
        await backend.embed(["after unload"], normalize=True)


def test_fit_cuts_to_the_context_keeping_the_closing_token_when_asked() -> None:
    assert fit([1, 2, 3], n_ctx=5, keep_last=True) == [1, 2, 3]
    assert fit([1, 2, 3, 4, 5, 9], n_ctx=4, keep_last=False) == [1, 2, 3, 4]
    assert fit([1, 2, 3, 4, 5, 9], n_ctx=4, keep_last=True) == [1, 2, 3, 9]
