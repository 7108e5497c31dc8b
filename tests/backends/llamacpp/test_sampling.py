"""The greedy token read straight from the logits (greedy_token) against llama.cpp's own greedy sampler, on real
logits of both models, ties included; and which requests take that way (the chain would be greedy alone)."""

from __future__ import annotations

from collections.abc import Iterator

import llama_cpp.llama_cpp as lc
import pytest

from localinfer.backends.llamacpp.constraint import ConstraintCompiler
from localinfer.backends.llamacpp.sampling import build_sampler, greedy_token, is_plain_greedy, logits_at
from localinfer.models.store import Manifest
from localinfer.types import ResponseFormat, SamplingParams

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
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tokens[i], i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, True
        batch.n_tokens = n
        assert lc.llama_decode(self.ctx, batch) == 0
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


@pytest.mark.parametrize(
    ("params", "plain"),
    [
        (SamplingParams(temperature=0), True),
        (SamplingParams(temperature=0, top_k=1, top_p=0.5), True),  # greedy ignores the truncations
        (SamplingParams(temperature=0, repeat_penalty=1.1), False),
        (SamplingParams(temperature=0, presence_penalty=0.5), False),
        (SamplingParams(temperature=0, frequency_penalty=0.5), False),
        (SamplingParams(temperature=0.7, seed=1), False),
    ],
)
def test_a_request_is_plain_greedy_only_where_its_chain_is_the_greedy_sampler_alone(
    params: SamplingParams, plain: bool
) -> None:
    chain = build_sampler(49152, params)
    try:
        assert (lc.llama_sampler_chain_n(chain) == 1) is plain
    finally:
        lc.llama_sampler_free(chain)
    assert is_plain_greedy(params, None) is plain


def test_a_constrained_greedy_request_is_not_plain_greedy(decoded: Decoded) -> None:
    constraint = ConstraintCompiler(decoded.vocab).compile(ResponseFormat("json_object"))
    assert constraint is not None
    assert not is_plain_greedy(SamplingParams(temperature=0), constraint)
