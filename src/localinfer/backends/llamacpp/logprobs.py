"""Log-probabilities of sampled tokens, read from the logits llama.cpp computed for them."""

from __future__ import annotations

import llama_cpp.llama_cpp as lc
import numpy as np

from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import logits_at
from localinfer.types import TokenLogprob


def token_logprob(model: LlamaModel, ctx: lc.llama_context_p, batch_index: int, token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-probability under the model's distribution at ``batch_index`` (the log-softmax of its raw
    logits), and the ``n_top`` most likely tokens there, most likely first."""
    logits = logits_at(ctx, batch_index, lc.llama_vocab_n_tokens(model.vocab))
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    top: tuple[tuple[str, bytes, float], ...] = ()
    if n_top > 0:
        best = np.argpartition(-logits, n_top - 1)[:n_top]
        best = best[np.argsort(-logits[best], kind="stable")]
        top = tuple(_entry(model, int(i), float(logits[i]) - log_total) for i in best)
    return TokenLogprob(*_entry(model, token, float(logits[token]) - log_total), top=top)


def _entry(model: LlamaModel, token: int, logprob: float) -> tuple[str, bytes, float]:
    data = model.token_bytes(token)
    return data.decode("utf-8", errors="replace"), data, min(logprob, 0.0)
