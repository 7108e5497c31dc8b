"""Embeddings for a loaded llama.cpp model: a context of its own with ``embeddings`` on, made on first use.

The pooling is the one the GGUF states (``<arch>.pooling_type``, read by llama.cpp); a model that states none (a
generative model) is pooled by the mean of its tokens' last hidden states, as llama-server's ``--pooling mean``
does. llama-server refuses such a model on its OpenAI route unless started with ``--pooling``; Ollama embeds with
any model, and so does localinfer. A reranker (``rank`` pooling) gets a context pooled by rank, whose output for a
query and document pair (laid out by ``rerank.py``) is the pair's relevance score, read as llama-server reads it
(the first number of the pooled output): it embeds no texts, and a model of another pooling scores no pairs.

A pooled vector is read once its whole sequence sits in one micro-batch, so the context's batch is as long as its
context: any input that fits the context is embedded in one decode. Each input gets a decode of its own: llama.cpp
computes a batch of more tokens by other kernels, whose rounding moves a vector by up to ~3e-3 (measured on
SmolLM2), so packing inputs together would make a text's vector depend on what else was sent with it. Alone, the
same text always gets the same vector, and a pair the same score. Only one thread at a time may use an ``Embedder``
(its lock sees to it); it runs beside the step loop's context on the same weights.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as lc
import numpy as np

from localinfer.backends.checks import not_a_reranker, reranker_refusal
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.errors import GenerationFailed, InvalidRequest, ModelLoadError, ModelNotReady

log = logging.getLogger(__name__)

POOLING_NAMES = {
    lc.LLAMA_POOLING_TYPE_NONE: "none",
    lc.LLAMA_POOLING_TYPE_MEAN: "mean",
    lc.LLAMA_POOLING_TYPE_CLS: "cls",
    lc.LLAMA_POOLING_TYPE_LAST: "last",
    lc.LLAMA_POOLING_TYPE_RANK: "rank",
}


class Embedder:
    """An embedding context on ``model``'s weights, ``model.n_ctx`` tokens long."""

    def __init__(self, model: LlamaModel) -> None:
        self._model = model
        self._ctx: lc.llama_context_p | None = None
        self._batch: Any = None  # an lc.llama_batch, whose stubs mistype its arrays
        self.pooling = ""
        self.n_embd = 0
        self._lock = threading.Lock()  # held while decoding: ``free`` waits for a decode whose requester left
        self._closed = False
        self.is_reranker = model.stated_pooling() == lc.LLAMA_POOLING_TYPE_RANK  # its context scores pairs
        if self.is_reranker and not model.has_rank_head():
            log.warning(
                "served as a reranker (rank pooling) though its metadata names no rank head: each pair's score is "
                "the first number of its last token's output, as llama-server scores it"
            )

    def _open(self) -> lc.llama_context_p:
        """The context, made on first use with the model's pooling: the one asked for (``--pooling``), else the
        stated one, else mean; a model stated as pooling none is pooled by the mean too, unless none was asked for
        (then each token keeps its vector). Raises ModelLoadError when llama.cpp cannot make it."""
        if self._ctx is not None:
            return self._ctx
        pooling = self._model.stated_pooling()
        if pooling is None or (pooling == lc.LLAMA_POOLING_TYPE_NONE and not self._model.pooling):
            pooling = lc.LLAMA_POOLING_TYPE_MEAN
        ctx = self._context(pooling)
        self.pooling = POOLING_NAMES.get(pooling, str(pooling))
        assert self._model.model is not None
        self.n_embd = int(lc.llama_model_n_embd(self._model.model))
        self._batch = lc.llama_batch_init(self._model.n_ctx, 0, 1)
        self._ctx = ctx
        log.debug(
            "embedding context: %d tokens, %s pooling, %d dimensions", self._model.n_ctx, self.pooling, self.n_embd
        )
        return ctx

    def _context(self, pooling: int) -> lc.llama_context_p:
        model = self._model
        params = lc.llama_context_default_params()
        params.n_ctx = model.n_ctx
        params.n_batch = model.n_ctx  # a pooled vector needs its whole sequence in one micro-batch
        params.n_ubatch = model.n_ctx
        params.n_seq_max = 1
        params.n_threads = model.threads
        params.n_threads_batch = model.threads
        params.embeddings = True
        params.pooling_type = pooling
        params.no_perf = True
        ctx: lc.llama_context_p = lc.llama_init_from_model(model.model, params)
        if not ctx:
            raise ModelLoadError(
                f"llama.cpp could not create an embedding context of {model.n_ctx} tokens",
                hint="try a smaller context with --ctx-size",
            )
        return ctx

    def embed(self, prompt: Sequence[int], *, normalize: bool) -> tuple[float, ...]:
        """``prompt``'s vector; it holds 1 to ``n_ctx`` valid token ids. Raises GenerationFailed when llama.cpp
        fails, ModelNotReady once freed, InvalidRequest for a reranker."""
        if self.is_reranker:
            raise reranker_refusal("this model", "embed texts")
        with self._lock:
            if self._closed:
                raise ModelNotReady("the model was unloaded")
            pooled = self._pooled(self._open(), prompt)
            vector = np.ctypeslib.as_array(pooled, shape=(self.n_embd,)).astype(np.float64)
        return _normalized(vector) if normalize else tuple(vector.astype(np.float32).tolist())

    def embed_tokens(self, prompt: Sequence[int]) -> tuple[tuple[float, ...], ...]:
        """Each of ``prompt``'s tokens' vectors, for a model served with pooling none (llama-server's per-token
        embeddings, which it leaves unnormalised); ``prompt`` holds 1 to ``n_ctx`` valid ids. Raises as
        ``embed``."""
        if self.is_reranker:
            raise reranker_refusal("this model", "embed texts")
        with self._lock:
            if self._closed:
                raise ModelNotReady("the model was unloaded")
            ctx = self._open()
            self._decode(ctx, prompt)
            rows = []
            for i in range(len(prompt)):
                pointer = lc.llama_get_embeddings_ith(ctx, i)
                if not pointer:
                    raise GenerationFailed(f"llama.cpp gave no output for token {i} of the input")
                rows.append(np.ctypeslib.as_array(pointer, shape=(self.n_embd,)).astype(np.float64))
        return tuple(tuple(row.astype(np.float32).tolist()) for row in rows)

    def score(self, prompt: Sequence[int]) -> float:
        """The relevance score of a query and document pair laid out as ``prompt`` (1 to ``n_ctx`` valid token
        ids): the first number of the rank-pooled output, as llama-server reads it. Raises GenerationFailed when
        llama.cpp fails, ModelNotReady once freed, InvalidRequest for a model that is no reranker."""
        if not self.is_reranker:
            raise not_a_reranker("this model")
        with self._lock:
            if self._closed:
                raise ModelNotReady("the model was unloaded")
            return float(self._pooled(self._open(), prompt)[0])

    def _pooled(self, ctx: lc.llama_context_p, prompt: Sequence[int]) -> Any:
        """Decode ``prompt`` alone; llama.cpp's pooled output for it (a float pointer, valid until the next
        decode: read it under the lock)."""
        self._decode(ctx, prompt)
        pointer = lc.llama_get_embeddings_seq(ctx, 0)
        if not pointer:
            raise GenerationFailed("llama.cpp gave no pooled output for the input")
        return pointer

    def _decode(self, ctx: lc.llama_context_p, prompt: Sequence[int]) -> None:
        """Decode ``prompt`` alone, every token's output kept."""
        batch = self._batch
        assert 0 < len(prompt) <= self._model.n_ctx
        lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
        for pos, token in enumerate(prompt):
            batch.token[pos] = token
            batch.pos[pos] = pos
            batch.n_seq_id[pos] = 1
            batch.seq_id[pos][0] = 0
            batch.logits[pos] = True  # pooling reads every token's output
        batch.n_tokens = len(prompt)
        status = lc.llama_decode(ctx, batch)
        if status != 0:
            raise GenerationFailed(f"llama.cpp could not decode the input (llama_decode returned {status})")

    def free(self) -> None:
        """Free the context, once a decode under way has ended; later calls to ``embed`` raise ModelNotReady."""
        with self._lock:
            self._closed = True
            self._free()

    def _free(self) -> None:
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            lc.llama_free(self._ctx)
            self._ctx = None


def _normalized(vector: np.ndarray[Any, Any]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (L2), as float32 numbers."""
    scaled = vector / max(float(np.sqrt(np.dot(vector, vector))), 1e-12)
    return tuple(scaled.astype(np.float32).tolist())


def fit(prompt: list[int], *, n_ctx: int, keep_last: bool) -> list[int]:
    """``prompt`` cut to ``n_ctx`` tokens; ``keep_last`` keeps its last token (the EOS or SEP the tokenizer
    appends, which a model pooling by it needs)."""
    if len(prompt) <= n_ctx:
        return prompt
    return prompt[: n_ctx - 1] + prompt[-1:] if keep_last else prompt[:n_ctx]


def check_prompt(prompt: Sequence[int], n_vocab: int, *, index: int) -> None:
    """Refuse an empty prompt or an id outside the vocabulary (llama.cpp would read past its tables)."""
    where = f"input[{index}]"
    if not prompt:
        raise InvalidRequest(f"{where} is empty", param="input")
    bad = next((token for token in prompt if not 0 <= token < n_vocab), None)
    if bad is not None:
        raise InvalidRequest(
            f"{where}: token id {bad} is not in the model's vocabulary (0 to {n_vocab - 1})", param="input"
        )
