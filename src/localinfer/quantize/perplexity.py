"""Perplexity of a GGUF model on a text, and its KL divergence from a base model, in llama-perplexity's method.

The text is tokenized as llama-perplexity tokenizes it (the vocabulary's own BOS rule, special tokens read as
text) and cut into ``chunks`` chunks of ``ctx`` tokens. Each chunk is evaluated from an empty cache, with its
first token replaced by BOS when the vocabulary adds one; the second half of each chunk is scored: the logits at
position ``j`` (``ctx/2 <= j < ctx-1``) predict token ``j+1``. With a base model, the same positions give
``llama-perplexity --kl-divergence``'s statistics: KL(base || model) per position (terms where the base's log
probability is below -16 left out, as llama.cpp does), the share of positions where both models' top tokens are
the same, and the mean change of the correct token's probability.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from localinfer.errors import QuantizeError

DEFAULT_CTX = 512
_ROWS_PER_TASK = 16  # rows of logits a thread takes at once: a few MB, in cache
_LOG_FLOOR = -16.0  # base log probabilities below this are left out of the KL sum (llama-perplexity)


@dataclass(frozen=True)
class Divergence:
    base_ppl: float
    kld_mean: float
    kld_p99: float
    kld_max: float
    same_top: float  # share of positions, 0..1
    mean_delta_p: float  # mean of p(model) - p(base) of the correct token, -1..1


@dataclass(frozen=True)
class Positions:
    """A model's next-token distributions against a base's, one entry per position, in
    ``llama-perplexity --kl-divergence``'s terms: ``kld`` is KL(base || model) (terms where the base's log
    probability is below -16 left out), ``same_top`` whether both rank the same token first, ``delta_p`` the
    correct token's probability under the model minus under the base. ``compare_positions`` makes them;
    ``perplexity.measure`` and the ONNX conversion's check (``quality``) both sum them up here."""

    kld: np.ndarray[Any, np.dtype[np.float64]]
    same_top: np.ndarray[Any, np.dtype[np.bool_]]
    delta_p: np.ndarray[Any, np.dtype[np.float64]]

    @classmethod
    def concatenate(cls, parts: Sequence[Positions]) -> Positions:
        return cls(
            np.concatenate([p.kld for p in parts]),
            np.concatenate([p.same_top for p in parts]),
            np.concatenate([p.delta_p for p in parts]),
        )

    def __len__(self) -> int:
        return len(self.kld)

    @property
    def kld_mean(self) -> float:
        return float(self.kld.mean())

    @property
    def kld_p99(self) -> float:
        return float(np.percentile(self.kld, 99))

    @property
    def kld_max(self) -> float:
        return float(self.kld.max())

    @property
    def same_top_share(self) -> float:
        return float(self.same_top.mean())

    @property
    def mean_delta_p(self) -> float:
        return float(self.delta_p.mean())


def compare_positions(
    base_logp: np.ndarray[Any, np.dtype[np.float64]],
    logp: np.ndarray[Any, np.dtype[np.float64]],
    targets: np.ndarray[Any, np.dtype[np.int64]],
) -> Positions:
    """Compare the model's log-probabilities ``logp`` with the base's ``base_logp`` (rows: positions, columns: the
    vocabulary, as ``_log_probs`` gives them), where row ``i`` predicts ``targets[i]``."""
    rows = np.arange(len(targets))
    kept = base_logp > _LOG_FLOOR
    return Positions(
        kld=np.where(kept, np.exp(base_logp) * (base_logp - logp), 0.0).sum(axis=1),
        same_top=logp.argmax(axis=1) == base_logp.argmax(axis=1),
        delta_p=np.exp(logp[rows, targets]) - np.exp(base_logp[rows, targets]),
    )


@dataclass(frozen=True)
class Report:
    ppl: float
    ppl_error: float
    ctx: int
    chunks: int
    scored: int  # positions scored
    divergence: Divergence | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_text() -> str:
    """The text localinfer ships for perplexity: the Declaration of Independence and the Gettysburg Address
    (public domain), some 2,900 tokens for SmolLM2."""
    return resources.files("localinfer.quantize").joinpath("data/default.txt").read_text(encoding="utf-8")


def read_text(path: Path | None) -> str:
    """``path``'s text, or the default text. Raises QuantizeError for a file that cannot be read as UTF-8."""
    if path is None:
        return default_text()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuantizeError(f"cannot read the text {path}: {exc}", hint="pass a UTF-8 text file with --text") from exc


def _load(path: Path, ctx: int, threads: int | None) -> Any:
    from llama_cpp import Llama

    # flash_attn: llama-perplexity's default ("auto") turns it on for a CPU; the same kernels, the same figures.
    try:
        return Llama(
            str(path),
            n_ctx=ctx,
            n_batch=ctx,
            n_ubatch=min(ctx, 512),
            verbose=False,
            n_threads=threads,
            n_gpu_layers=0,
            flash_attn=True,
        )
    except (ValueError, RuntimeError) as exc:
        raise QuantizeError(f"cannot load {path}: {exc}", hint="is it a complete GGUF file?") from exc


def _chunk_logits(llm: Any, chunk: list[int], first: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The logits at positions ``first .. len(chunk)-2`` of a chunk decoded in one batch from an empty cache,
    with outputs asked for positions ``first`` on only, as llama-perplexity asks (the graph then drops the other
    rows before the last layer, and the matmul kernels see the same shapes). A view of llama.cpp's buffer: valid
    until the next decode of ``llm``."""
    import llama_cpp

    llm._ctx.kv_cache_clear()
    batch = llm._batch
    batch.set_batch(chunk, n_past=0, logits_all=False)
    for i in range(len(chunk)):
        batch.batch.logits[i] = i >= first
    llm._ctx.decode(batch)
    n_out = len(chunk) - first
    pointer = llama_cpp.llama_get_logits(llm._ctx.ctx)
    return np.ctypeslib.as_array(pointer, shape=(n_out, llm.n_vocab()))[:-1]


def cut_chunks(llm: Any, tokens: list[int], ctx: int, n_chunks: int) -> list[list[int]]:
    """The first ``n_chunks`` chunks of ``ctx`` tokens of ``tokens``, each starting with BOS when ``llm``'s
    vocabulary adds one (it replaces the chunk's first token), as llama-perplexity cuts them."""
    bos = llm.token_bos() if llm._model.add_bos_token() else None
    cut = [tokens[i * ctx : (i + 1) * ctx] for i in range(n_chunks)]
    return [[bos, *chunk[1:]] if bos is not None else chunk for chunk in cut]


def _log_normalizer(logits: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Each row's log of the sum of exponentials, as llama-perplexity computes it: exponentials in single
    precision after subtracting the row's maximum, summed in double. Blocks of rows go to one thread per core,
    as llama-perplexity spreads them (numpy releases the GIL; a 262k-token vocabulary makes this as slow as the
    decode otherwise)."""
    result = np.empty(len(logits), dtype=np.float64)

    def rows(start: int) -> None:
        block = logits[start : start + _ROWS_PER_TASK]
        top = block.max(axis=1, keepdims=True)
        shifted = block - top
        np.exp(shifted, out=shifted)
        result[start : start + len(block)] = top[:, 0] + np.log(shifted.sum(axis=1, dtype=np.float64))

    list(_pool().map(rows, range(0, len(logits), _ROWS_PER_TASK)))
    return result


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="localinfer-ppl")


def _log_probs(logits: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Every row's log-probabilities (for the divergence, which needs them all)."""
    result: np.ndarray[Any, np.dtype[np.float64]] = logits.astype(np.float64) - _log_normalizer(logits)[:, None]
    return result


def measure(
    model: Path,
    text: str,
    *,
    base: Path | None = None,
    ctx: int = DEFAULT_CTX,
    chunks: int | None = None,
    threads: int | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
) -> Report:
    """Perplexity of ``model`` on ``text`` (and its divergence from ``base``) over ``chunks`` chunks of ``ctx``
    tokens (all whole chunks when None). Raises QuantizeError for a text too short, models with different
    vocabularies, or a model that does not load."""
    if ctx < 8:
        raise QuantizeError(f"a context of {ctx} tokens is too small", hint="use --ctx 128 or more")
    llm = _load(model, ctx, threads)
    base_llm = _load(base, ctx, threads) if base is not None else None
    try:
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        if base_llm is not None and (
            base_llm.n_vocab() != llm.n_vocab()
            or base_llm.tokenize(text.encode("utf-8"), add_bos=True, special=False) != tokens
        ):
            raise QuantizeError(
                "the model and the base read the text as different tokens",
                hint="compare a model with the model it was quantized from (same vocabulary)",
            )
        available = len(tokens) // ctx
        if available < 2:
            raise QuantizeError(
                f"the text has {len(tokens)} tokens; a context of {ctx} needs at least {2 * ctx}",
                hint="pass a longer --text or a smaller --ctx",
            )
        n_chunks = available if chunks is None else max(1, min(chunks, available))
        first = ctx // 2
        nll: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        base_nll: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        compared: list[Positions] = []
        for i, chunk in enumerate(cut_chunks(llm, tokens, ctx, n_chunks)):
            targets = np.asarray(chunk[first + 1 :])
            rows = np.arange(len(targets))
            logits = _chunk_logits(llm, chunk, first)
            nll.append(_log_normalizer(logits) - logits[rows, targets])
            if base_llm is not None:
                logp = _log_probs(logits)
                base_logp = _log_probs(_chunk_logits(base_llm, chunk, first))
                base_nll.append(-base_logp[rows, targets])
                compared.append(compare_positions(base_logp, logp, targets))
            if on_chunk is not None:
                on_chunk(i + 1, n_chunks)
    finally:
        llm.close()
        if base_llm is not None:
            base_llm.close()
    all_nll = np.concatenate(nll)
    ppl, error = _ppl(all_nll)
    divergence = None
    if base_llm is not None:
        positions = Positions.concatenate(compared)
        divergence = Divergence(
            base_ppl=_ppl(np.concatenate(base_nll))[0],
            kld_mean=positions.kld_mean,
            kld_p99=positions.kld_p99,
            kld_max=positions.kld_max,
            same_top=positions.same_top_share,
            mean_delta_p=positions.mean_delta_p,
        )
    return Report(ppl, error, ctx, n_chunks, int(all_nll.size), divergence)


def _ppl(nll: np.ndarray[Any, np.dtype[np.float64]]) -> tuple[float, float]:
    """exp(mean nll) and its standard error, as llama-perplexity's "Final estimate" gives them."""
    mean = float(nll.mean())
    ppl = math.exp(mean)
    variance = float((nll**2).mean()) - mean * mean
    error = ppl * math.sqrt(variance / (nll.size - 1)) if variance > 0 and nll.size > 1 else 0.0
    return ppl, error
