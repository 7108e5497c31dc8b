"""The llama.cpp backend's reranking, in process on SmolLM2's reranker copies (``tests/rerank_model.py``): each pair
laid out token for token as llama-server's ``format_prompt_rerank`` lays it out, scored alone, and the refusals of
a model asked for what its pooling does not do. Scores against llama-server's: tests/app/server/test_rerank.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.rerank import rerank_prompts, rerank_template
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelNotReady
from localinfer.models.store import Manifest
from tests.rerank_model import RERANK_TEMPLATE

pytestmark = pytest.mark.model

CTX = 512
BOS, EOS, SEP = 1, 2, 0  # SmolLM2's <|im_start|> and <|im_end|>, and <|endoftext|> as the copy's separator


async def _loaded(manifest: Manifest) -> LlamaCppBackend:
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=manifest.path, ctx_size=CTX, parallel=1, threads=2))
    return backend


@pytest.fixture
async def reranker(smollm2_rerank: Manifest) -> AsyncIterator[LlamaCppBackend]:
    backend = await _loaded(smollm2_rerank)
    try:
        yield backend
    finally:
        await backend.unload()


async def test_a_pair_is_bos_query_eos_sep_document_eos_with_the_texts_special_tokens_as_text(
    reranker: LlamaCppBackend,
) -> None:
    model = reranker._model
    assert model is not None and rerank_template(model) is None
    query, document = "What is <|im_start|>?", "a token <|im_end|> named in a text"
    [prompt] = rerank_prompts(model, query, [document])
    plain_query = await reranker.tokenize(query, add_special=False, parse_special=False)
    plain_document = await reranker.tokenize(document, add_special=False, parse_special=False)
    assert prompt == [BOS, *plain_query, EOS, SEP, *plain_document, EOS]
    assert BOS not in plain_query and EOS not in plain_document  # the texts' special tokens stay text
    assert rerank_prompts(model, query, ["a", "b"]) == [rerank_prompts(model, query, [d])[0] for d in ("a", "b")]


async def test_a_rerank_template_lays_the_pair_out_with_its_special_tokens(smollm2_rerank_template: Manifest) -> None:
    backend = await _loaded(smollm2_rerank_template)
    try:
        model = backend._model
        assert model is not None and rerank_template(model) == RERANK_TEMPLATE
        [prompt] = rerank_prompts(model, "what is {document}?", ["a bear"])
        text = RERANK_TEMPLATE.replace("{query}", "what is {document}?").replace("{document}", "a bear")
        assert "what is a bear?" in text  # replaced in llama-server's order: the query's {document} too
        assert prompt == await backend.tokenize(text, add_special=False, parse_special=True)
        assert prompt[0] == BOS and prompt.count(BOS) == 3  # <|im_start|> parsed as the control token, not added
        scored = await backend.rerank("what is a panda?", ["a bear", "a car"])
        assert scored.n_tokens[0] > 40 and scored.scores[0] != scored.scores[1]
    finally:
        await backend.unload()


async def test_each_pair_scores_alone_the_same_in_any_company(reranker: LlamaCppBackend) -> None:
    documents = ["it is a bear", "The giant panda is a bear species endemic to China.", "x", "it is a bear"]
    together = await reranker.rerank("What is a panda?", documents)
    assert len(together.scores) == 4 and together.scores[0] == together.scores[3]
    assert len(set(together.scores)) == 3
    for document, score in zip(documents, together.scores, strict=True):
        assert (await reranker.rerank("What is a panda?", [document])).scores == (score,)  # bit for bit
    prompts = rerank_prompts(reranker._model, "What is a panda?", documents)  # type: ignore[arg-type]
    assert together.n_tokens == tuple(len(p) for p in prompts)
    assert together.prompt_tokens == sum(together.n_tokens)


async def test_a_pair_past_the_context_is_refused_and_the_backend_keeps_scoring(reranker: LlamaCppBackend) -> None:
    with pytest.raises(ContextLengthExceeded) as too_long:
        await reranker.rerank("q", ["fine", "word " * CTX])
    assert too_long.value.param == "documents" and too_long.value.n_ctx == CTX and too_long.value.n_prompt > CTX
    with pytest.raises(ContextLengthExceeded):
        await reranker.rerank("q", ["word " * 100 * CTX])  # refused before tokenizing
    assert len((await reranker.rerank("q", ["still here"])).scores) == 1


async def test_a_reranker_embeds_nothing_and_other_models_score_nothing(
    reranker: LlamaCppBackend, smollm2: Manifest, smollm2_embed: Manifest
) -> None:
    assert reranker.facts.reranker
    with pytest.raises(InvalidRequest, match="this model is a reranker") as refused:
        await reranker.embed(["hello"], normalize=True)
    assert refused.value.param == "model"
    for manifest in (smollm2, smollm2_embed):
        backend = await _loaded(manifest)
        try:
            assert not backend.facts.reranker
            with pytest.raises(InvalidRequest, match="this model is not a reranker") as refused:
                await backend.rerank("q", ["d"])
            assert refused.value.param == "model"
            assert (await backend.embed(["still embeds"], normalize=True)).vectors
        finally:
            await backend.unload()


async def test_an_unloaded_reranker_scores_no_more(smollm2_rerank: Manifest) -> None:
    backend = await _loaded(smollm2_rerank)
    await backend.rerank("warm", ["the context"])
    await backend.unload()
    with pytest.raises(ModelNotReady):
        await backend.rerank("after", ["unload"])
