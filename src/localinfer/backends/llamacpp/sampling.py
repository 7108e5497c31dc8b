"""Per-request sampler chains (llama.cpp's C samplers), with an output constraint first when one is asked."""

from __future__ import annotations

from typing import cast

import llama_cpp.llama_cpp as lc

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
