"""The greedy token read straight from the logits (greedy_token) against llama.cpp's own greedy sampler, on real
logits of both models, ties included; which chains are the greedy sampler alone; and that the backend takes the
logits' way for those requests only."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import llama_cpp.llama_cpp as lc
import numpy as np
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.constraint import ConstraintCompiler
from localinfer.backends.llamacpp.sampling import build_sampler, greedy_token, is_greedy_alone, logits_at, token_bias
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, ResponseFormat, SamplingParams
from tests.backends.llamacpp.raw_decode import decode_with_logits

pytestmark = pytest.mark.model

TEXT = b"The quick brown fox jumps over the lazy dog. Then it runs home, where"


class Decoded:
    """A model's context after one decode of TEXT with logits at every position."""

    def __init__(self, manifest: Manifest) -> None:
        lc.llama_backend_init()
        params = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(manifest.path).encode(), params)
        assert self.model
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        ctx_params = lc.llama_context_default_params()
        ctx_params.n_ctx = 256
        ctx_params.n_threads = ctx_params.n_threads_batch = 2
        self.ctx = lc.llama_init_from_model(self.model, ctx_params)
        assert self.ctx
        tokens = (lc.llama_token * 128)()
        n = lc.llama_tokenize(self.vocab, TEXT, len(TEXT), tokens, 128, True, False)
        assert n > 10
        self.n_tokens = n
        batch = lc.llama_batch_init(n, 0, 1)
        decode_with_logits(self.ctx, batch, tokens[:n])
        lc.llama_batch_free(batch)

    def close(self) -> None:
        lc.llama_free(self.ctx)
        lc.llama_model_free(self.model)


@pytest.fixture(params=["smollm2", "gemma3"], scope="module")
def decoded(request: pytest.FixtureRequest) -> Iterator[Decoded]:
    result = Decoded(request.getfixturevalue(request.param))
    yield result
    result.close()


def greedy_sampled(decoded: Decoded, index: int) -> int:
    chain = build_sampler(decoded.n_vocab, SamplingParams(temperature=0))
    try:
        return int(lc.llama_sampler_sample(chain, decoded.ctx, index))
    finally:
        lc.llama_sampler_free(chain)


def test_greedy_token_is_the_greedy_samplers_at_every_position(decoded: Decoded) -> None:
    picked = [greedy_token(decoded.ctx, i, decoded.n_vocab) for i in range(decoded.n_tokens)]
    assert picked == [greedy_sampled(decoded, i) for i in range(decoded.n_tokens)]
    assert len(set(picked)) > 3  # real, varied logits: not one token everywhere


def test_of_tied_logits_greedy_token_takes_the_first_as_the_greedy_sampler_does(decoded: Decoded) -> None:
    index = decoded.n_tokens - 1
    logits = logits_at(decoded.ctx, index, decoded.n_vocab)  # a view of llama.cpp's buffer: written for the tie
    top = float(logits.max()) + 1.0
    low, high = 7, decoded.n_vocab - 3
    logits[high] = top
    logits[low] = top
    assert greedy_token(decoded.ctx, index, decoded.n_vocab) == low
    assert greedy_sampled(decoded, index) == low


def test_greedy_token_with_logit_biases_is_the_biased_greedy_chains_at_every_position(decoded: Decoded) -> None:
    """Each position's top token banned, the runner-up pushed down, a third token pushed up by less than it takes
    to win, and an id given twice (its biases add up, as llama.cpp's logit-bias sampler adds them)."""
    for index in range(decoded.n_tokens):
        logits = logits_at(decoded.ctx, index, decoded.n_vocab)
        first, second, third = (int(t) for t in logits.argsort()[::-1][:3])
        biases = ((first, -math.inf), (second, -0.5), (third, 0.25), (second, -0.25))
        params = SamplingParams(temperature=0, logit_bias=biases)
        chain = build_sampler(decoded.n_vocab, params)
        try:
            assert is_greedy_alone(chain)
            raw = logits.copy()
            picked = greedy_token(decoded.ctx, index, decoded.n_vocab, token_bias(params))
            assert np.array_equal(logits, raw)  # biased in place, then put back: log-probabilities read the raw ones
            assert picked == int(lc.llama_sampler_sample(chain, decoded.ctx, index))
            assert picked != first
        finally:
            lc.llama_sampler_free(chain)


@pytest.mark.parametrize(
    ("params", "alone"),
    [
        (SamplingParams(temperature=0), True),
        (SamplingParams(temperature=-1), True),
        (SamplingParams(temperature=0, top_k=1, top_p=0.5), True),  # greedy ignores the truncations
        (SamplingParams(temperature=0, infill=True), True),  # the infill sampler is for sampled replies
        (SamplingParams(temperature=0, repeat_penalty=1.1), False),
        (SamplingParams(temperature=0, presence_penalty=0.5), False),
        (SamplingParams(temperature=0, frequency_penalty=0.5), False),
        (SamplingParams(temperature=0.7, seed=1), False),
    ],
)
def test_a_chain_is_greedy_alone_only_when_build_sampler_adds_nothing_to_the_greedy_sampler(
    decoded: Decoded, params: SamplingParams, alone: bool
) -> None:
    chain = build_sampler(decoded.n_vocab, params, vocab=decoded.vocab)
    try:
        assert is_greedy_alone(chain) is alone
        assert (lc.llama_sampler_chain_n(chain) == 1) is alone
    finally:
        lc.llama_sampler_free(chain)


def test_a_constrained_greedy_chain_is_not_greedy_alone(decoded: Decoded) -> None:
    constraint = ConstraintCompiler(decoded.vocab).compile(ResponseFormat("json_object"))
    assert constraint is not None
    chain = build_sampler(decoded.n_vocab, SamplingParams(temperature=0), constraint)
    try:
        assert not is_greedy_alone(chain)
    finally:
        lc.llama_sampler_free(chain)


async def test_the_backend_samples_only_what_is_not_plain_greedy_through_llama_cpps_sampler(
    smollm2: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    sample = lc.llama_sampler_sample

    def counted(*args: Any) -> int:
        nonlocal calls
        calls += 1
        return int(sample(*args))

    monkeypatch.setattr(lc, "llama_sampler_sample", counted)
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=512, parallel=1, threads=2))

    async def generated(sampling: SamplingParams, **options: Any) -> str:
        request = GenerationRequest("test", "Count: 1, 2, 3,", GenerationOptions(sampling=sampling, **options))
        return "".join([chunk.text async for chunk in backend.generate(request)])

    try:
        greedy = await generated(SamplingParams(temperature=0), max_tokens=12, ignore_eos=True)
        assert greedy and calls == 0
        await generated(SamplingParams(temperature=0.7, seed=3), max_tokens=12, ignore_eos=True)
        assert calls == 12
        barely_penalized = SamplingParams(temperature=0, repeat_penalty=1.0001)
        penalized = await generated(barely_penalized, max_tokens=12, ignore_eos=True)
        assert calls == 24
        assert penalized == greedy  # a penalty too small to move a token: the chain's greedy pick is the argmax's
        json_object = ResponseFormat("json_object")
        await generated(SamplingParams(temperature=0), max_tokens=4, response_format=json_object)
        assert calls > 24
    finally:
        await backend.unload()
