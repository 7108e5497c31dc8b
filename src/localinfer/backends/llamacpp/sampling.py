"""Per-request sampler chains (llama.cpp's C samplers), with an output constraint first when one is asked, and the
greedy token read straight from the logits where the chain would be the greedy sampler alone."""

from __future__ import annotations

from typing import cast

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localinfer.backends.llamacpp.constraint import Constraint
from localinfer.types import SamplingParams


def build_sampler(
    n_vocab: int,
    params: SamplingParams,
    constraint: Constraint | None = None,
    *,
    vocab: lc.llama_vocab_p | None = None,
) -> lc.llama_sampler_p:
    """A sampler chain: the constraint's mask, penalties, then greedy (temperature 0) or
    top-k/top-p/min-p/infill/temperature/dist. The infill sampler (``params.infill``) needs the model's ``vocab``.

    The caller owns the chain and frees it with ``lc.llama_sampler_free``, which frees the constraint's sampler.
    """
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if constraint is not None:
        lc.llama_sampler_chain_add(chain, constraint.new_sampler())
    if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
        lc.llama_sampler_chain_add(
            chain,
            lc.llama_sampler_init_penalties(
                n_vocab,
                params.repeat_last_n,
                params.repeat_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            ),
        )
    if params.temperature <= 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return cast("lc.llama_sampler_p", chain)
    if params.top_k > 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(params.min_p, 1))
    if params.infill:
        if vocab is None:
            raise ValueError("the infill sampler needs the model's vocabulary")
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_infill(vocab))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
    seed = lc.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed))
    return cast("lc.llama_sampler_p", chain)


def is_greedy_alone(chain: lc.llama_sampler_p) -> bool:
    """Whether ``chain`` is llama.cpp's greedy sampler and nothing else (no constraint's mask, no penalties before
    it), so that greedy_token takes the token it would sample. Read from the chain itself, so that a sampler added
    to build_sampler's greedy chain one day takes the chain's way again."""
    if lc.llama_sampler_chain_n(chain) != 1:
        return False
    return bool(lc.llama_sampler_name(lc.llama_sampler_chain_get(chain, 0)) == b"greedy")


def greedy_token(ctx: lc.llama_context_p, batch_index: int, n_vocab: int) -> int:
    """The token of highest logit at ``batch_index``, the first of equals: what llama.cpp's greedy sampler alone
    picks, without the candidate array of the whole vocabulary that llama_sampler_sample builds first (the time it
    saves: docs/benchmarks.md). One difference: of logits that include NaN, this picks the first NaN, where
    llama.cpp's comparison passes over any NaN but one at index 0."""
    return int(logits_at(ctx, batch_index, n_vocab).argmax())


def logits_at(ctx: lc.llama_context_p, batch_index: int, n_vocab: int) -> npt.NDArray[np.float32]:
    """The raw logits llama.cpp computed at ``batch_index`` of the last decode, as a view (valid until the next)."""
    return np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, batch_index), shape=(n_vocab,))
