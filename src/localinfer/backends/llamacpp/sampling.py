"""Per-request sampler chains (llama.cpp's C samplers), with an output constraint first when one is asked, then the
request's logit biases; and the greedy token read straight from the (biased) logits where the chain would be the
greedy sampler alone after those biases."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localinfer.backends.llamacpp.constraint import Constraint
from localinfer.errors import InvalidRequest
from localinfer.types import SamplingParams

FLOAT32_MAX = float(np.finfo(np.float32).max)


def resolve_logit_bias(
    params: SamplingParams, *, tokenize: Callable[[str], list[int]], n_vocab: int, banned: Sequence[int] = ()
) -> SamplingParams:
    """``params`` with its logit biases as token ids, as llama-server reads them: a text's every token gets the
    text's bias (``tokenize`` is the model's, without BOS or control tokens), and each of ``banned`` (the
    end-of-generation tokens of an ``ignore_eos`` request) gets -inf after them.

    Raises InvalidRequest naming ``logit_bias`` for an id outside the vocabulary or a bias a float cannot hold
    (llama-server drops such an entry without a word; a client that sent it meant something).
    """
    if not params.logit_bias and not banned:
        return params
    resolved: list[tuple[int, float]] = []
    for key, bias in params.logit_bias:
        if not (math.isfinite(bias) and abs(bias) <= FLOAT32_MAX) and bias != -math.inf:
            raise InvalidRequest(f"logit_bias: {bias} is not a bias a model can take", param="logit_bias")
        if isinstance(key, str):
            resolved.extend((token, bias) for token in tokenize(key))
        elif 0 <= key < n_vocab:
            resolved.append((key, bias))
        else:
            raise InvalidRequest(
                f"logit_bias names token {key}, outside the model's vocabulary of {n_vocab} tokens (0 to "
                f"{n_vocab - 1})",
                param="logit_bias",
            )
    resolved.extend((token, -math.inf) for token in banned)
    return dataclasses.replace(params, logit_bias=tuple(resolved))


@dataclass(frozen=True)
class TokenBias:
    """Resolved logit biases as arrays: the token ids, and what each adds to its logit (an id met twice gets both)."""

    ids: npt.NDArray[np.intp]
    amounts: npt.NDArray[np.float32]


def token_bias(params: SamplingParams) -> TokenBias | None:
    """``params``' logit biases (resolved: ids only) as arrays for greedy_token; None when there are none."""
    if not params.logit_bias:
        return None
    ids = [_token_id(key) for key, _ in params.logit_bias]
    return TokenBias(np.asarray(ids, dtype=np.intp), np.asarray([b for _, b in params.logit_bias], dtype=np.float32))


def _token_id(key: int | str) -> int:
    if isinstance(key, str):
        raise ValueError("logit biases must be resolved to token ids first (resolve_logit_bias)")
    return key


def build_sampler(
    n_vocab: int,
    params: SamplingParams,
    constraint: Constraint | None = None,
    *,
    vocab: lc.llama_vocab_p | None = None,
) -> lc.llama_sampler_p:
    """A sampler chain: the constraint's mask, the logit biases (resolved: resolve_logit_bias), penalties, then
    greedy (temperature 0) or top-k/top-p/min-p/infill/temperature/dist. The infill sampler (``params.infill``)
    needs the model's ``vocab``.

    The caller owns the chain and frees it with ``lc.llama_sampler_free``, which frees the constraint's sampler.
    """
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if constraint is not None:
        lc.llama_sampler_chain_add(chain, constraint.new_sampler())
    if params.logit_bias:  # llama-server's place for them: before every other sampler
        entries = [lc.llama_logit_bias(_token_id(key), bias) for key, bias in params.logit_bias]
        array = (lc.llama_logit_bias * len(entries))(*entries)  # copied by llama.cpp
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(n_vocab, len(entries), array))
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
    """Whether ``chain`` is llama.cpp's greedy sampler after nothing but logit biases (no constraint's mask, no
    penalties), so that greedy_token, given the chain's biases (token_bias of its params), takes the token it would
    sample. Read from the chain itself, so that a sampler added to build_sampler's greedy chain one day takes the
    chain's way again."""
    names = [
        lc.llama_sampler_name(lc.llama_sampler_chain_get(chain, i)) for i in range(lc.llama_sampler_chain_n(chain))
    ]
    return names in ([b"greedy"], [b"logit-bias", b"greedy"])


def greedy_token(ctx: lc.llama_context_p, batch_index: int, n_vocab: int, bias: TokenBias | None = None) -> int:
    """The token of highest logit at ``batch_index`` (``bias`` added), the first of equals: what llama.cpp's greedy
    sampler picks after the logit-bias sampler, without the candidate array of the whole vocabulary that
    llama_sampler_sample builds first (the time it saves: docs/benchmarks.md). One difference: of logits that
    include NaN, this picks the first NaN, where llama.cpp's comparison passes over any NaN but one at index 0."""
    logits = logits_at(ctx, batch_index, n_vocab)
    if bias is None:
        return int(logits.argmax())
    # Biased in place and put back after, so the raw logits stay as they are (for log-probabilities): a copy of the
    # whole vocabulary's logits each token cost more than the argmax, and numpy lets go of the GIL while it copies.
    raw = logits[bias.ids]
    np.add.at(logits, bias.ids, bias.amounts)
    try:
        return int(logits.argmax())
    finally:
        logits[bias.ids] = raw


def logits_at(ctx: lc.llama_context_p, batch_index: int, n_vocab: int) -> npt.NDArray[np.float32]:
    """The raw logits llama.cpp computed at ``batch_index`` of the last decode, as a view (valid until the next)."""
    return np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, batch_index), shape=(n_vocab,))
