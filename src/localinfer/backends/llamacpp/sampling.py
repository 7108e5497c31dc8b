"""Per-request sampler chains (llama.cpp's C samplers) and grammars for constrained output."""

from __future__ import annotations

import json
from typing import cast

import llama_cpp.llama_cpp as lc
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from localinfer.errors import InvalidRequest
from localinfer.types import ResponseFormat, SamplingParams


def grammar_for(response_format: ResponseFormat) -> str | None:
    """GBNF that only admits output of the asked format, or None for free text.

    Raises InvalidRequest when a JSON schema cannot be turned into a grammar.
    """
    if response_format.type == "json_object":
        return JSON_GBNF
    if response_format.type == "json_schema":
        schema = response_format.schema or {}
        try:
            return cast(str, json_schema_to_gbnf(json.dumps(schema)))
        except Exception as exc:  # the converter raises plain exceptions of several kinds
            raise InvalidRequest(
                f"the JSON schema cannot be enforced: {exc}", param="response_format.json_schema.schema"
            ) from exc
    return None


def build_sampler(
    vocab: lc.llama_vocab_p, n_vocab: int, params: SamplingParams, grammar: str | None
) -> lc.llama_sampler_p:
    """A sampler chain: grammar, penalties, then greedy (temperature 0) or top-k/top-p/min-p/temperature/dist.

    The caller owns the chain and frees it with ``lc.llama_sampler_free``. Raises InvalidRequest for a
    grammar that llama.cpp cannot parse.
    """
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if grammar is not None:
        grammar_sampler = lc.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not grammar_sampler:
            lc.llama_sampler_free(chain)
            raise InvalidRequest("the grammar for response_format could not be parsed", param="response_format")
        lc.llama_sampler_chain_add(chain, grammar_sampler)
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
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
    seed = lc.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed))
    return cast("lc.llama_sampler_p", chain)
