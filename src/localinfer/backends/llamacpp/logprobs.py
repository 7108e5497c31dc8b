"""Log-probabilities of sampled tokens, read from the logits llama.cpp computed for them, or from the candidates
a sampler chain leaves (llama-server's post_sampling_probs)."""

from __future__ import annotations

import ctypes

import llama_cpp.llama_cpp as lc
import numpy as np

from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import logits_at
from localinfer.types import TokenLogprob

# llama_token_data as numpy lays it out: one array of the whole vocabulary for llama_sampler_apply
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(lc.llama_token_data)


def token_logprob(model: LlamaModel, ctx: lc.llama_context_p, batch_index: int, token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-probability under the model's distribution at ``batch_index`` (the log-softmax of its raw
    logits), and the ``n_top`` most likely tokens there, most likely first."""
    logits = logits_at(ctx, batch_index, lc.llama_vocab_n_tokens(model.vocab))
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    best = np.zeros(0, dtype=np.intp)
    n_top = min(n_top, len(logits))
    if n_top > 0:
        best = np.argpartition(-logits, n_top - 1)[:n_top]
        best = best[np.argsort(-logits[best], kind="stable")]
    top = tuple(_entry(model, int(i), float(logits[i]) - log_total) for i in best)
    own = _entry(model, token, float(logits[token]) - log_total)
    return TokenLogprob(*own, top=top, id=token, top_ids=tuple(int(i) for i in best))


def sample_with_logprob(
    model: LlamaModel, ctx: lc.llama_context_p, sampler: lc.llama_sampler_p, batch_index: int, n_top: int
) -> tuple[int, TokenLogprob]:
    """Sample at ``batch_index`` with ``sampler`` (as llama_sampler_sample does: apply the chain to every token's
    logit, take the token it selects, accept it) and say the token's log-probability under the chain's own
    distribution: the softmax of the logits the chain leaves its candidates (a greedy chain's token is certain),
    with the ``n_top`` most likely candidates of non-zero probability, most likely first."""
    n_vocab = lc.llama_vocab_n_tokens(model.vocab)
    data = np.empty(n_vocab, dtype=_TOKEN_DATA)
    data["id"] = np.arange(n_vocab, dtype=np.int32)
    data["logit"] = logits_at(ctx, batch_index, n_vocab)
    data["p"] = 0.0
    array = lc.llama_token_data_array(
        data=data.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), size=n_vocab, selected=-1, sorted=False
    )
    lc.llama_sampler_apply(sampler, ctypes.byref(array))
    size, selected = int(array.size), int(array.selected)
    assert 0 <= selected < size, "the sampler chain selected no token"
    candidates = np.frombuffer(ctypes.string_at(array.data, size * _TOKEN_DATA.itemsize), dtype=_TOKEN_DATA)
    token = int(candidates["id"][selected])
    lc.llama_sampler_accept(sampler, token)
    probs = np.zeros(size, dtype=np.float64)
    last = lc.llama_sampler_chain_get(sampler, lc.llama_sampler_chain_n(sampler) - 1)
    if lc.llama_sampler_name(last) == b"greedy":
        probs[selected] = 1.0
    else:
        logits = candidates["logit"].astype(np.float64)
        finite = np.isfinite(logits)
        if finite.any():
            weights = np.where(finite, np.exp(logits - logits[finite].max()), 0.0)
            probs = weights / weights.sum()
    order = np.argsort(-probs, kind="stable")[:n_top]
    order = order[probs[order] > 0.0]
    top = tuple(_entry(model, int(candidates["id"][i]), _log(probs[i])) for i in order)
    own = _entry(model, token, _log(probs[selected]))
    return token, TokenLogprob(*own, top=top, id=token, top_ids=tuple(int(candidates["id"][i]) for i in order))


def _log(p: float) -> float:
    return float(np.log(p)) if p > 0.0 else -float(np.finfo(np.float32).max)


def _entry(model: LlamaModel, token: int, logprob: float) -> tuple[str, bytes, float]:
    data = model.token_bytes(token)
    return data.decode("utf-8", errors="replace"), data, min(logprob, 0.0)
