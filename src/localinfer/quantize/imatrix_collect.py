"""Computing an importance matrix in llama-imatrix's method, through llama.cpp's graph evaluation callback.

The text is tokenized as ``llama-imatrix -f`` reads it (one trailing newline dropped, the vocabulary's own BOS
rule, special tokens read as text) and cut into ``chunks`` chunks of ``ctx`` tokens. Each chunk is decoded as one
batch of ``ctx`` tokens (``llama-imatrix -c CTX -b CTX``: one sequence per batch, micro-batches of up to 512) from
an empty memory, its first token replaced by BOS when the vocabulary adds one, every position asking for an
output (so the last layer sees every row, as in llama-imatrix). The context's ``cb_eval`` is asked about every
graph node; it wants each MUL_MAT whose weight is a ``blk.*`` tensor (and ``output.weight`` with
``process_output``) and whose F32 input has at least 16 rows, and on the data call adds the squares of every
input row into per-column float32 sums, row after row, and counts the rows (``IMatrixCollector::collect_imatrix``;
a 3-D input is folded onto the weight's matrices as it folds them). Mixture-of-experts weights (MUL_MAT_ID) are
refused: llama-imatrix routes their rows by expert, which this collector does not do.

Ctrl-C (or any error) inside the callback is kept, the rest of the graph runs without collecting, and it is
raised once the decode returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from localinfer.errors import QuantizeError
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress
from localinfer.quantize import ggml_tensor as gt
from localinfer.quantize.imatrix import Entry, F32Array, Matrix, save_imatrix

DEFAULT_CTX = 512  # llama-imatrix's default --ctx-size
MIN_ROWS = 16  # llama-imatrix ignores matrix products of fewer rows
_MAX_UBATCH = 512  # llama.cpp's default micro-batch
DEFAULT_TEXT_LABEL = "localinfer's default text"


@dataclass(frozen=True)
class Calibration:
    """What ``quantize --calibrate`` computes its importance matrix on: ``text`` (None: localinfer's default
    text), in ``chunks`` chunks (None: all the text holds) of ``ctx`` tokens."""

    text: Path | None = None
    ctx: int = DEFAULT_CTX
    chunks: int | None = None

    def label(self) -> str:
        return self.text.name if self.text is not None else DEFAULT_TEXT_LABEL


@dataclass
class _Collector:
    """The eval callback's state: sums and row counts per weight, and the first error raised in the callback."""

    process_output: bool
    sums: dict[str, F32Array] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    error: BaseException | None = None

    def on_node(self, address: int | None, ask: bool, _user_data: int | None) -> bool:
        """``ggml_backend_sched_eval_callback``: whether node ``address`` is wanted (``ask``), else collect it.
        Never raises: a C caller cannot take a Python exception."""
        if self.error is not None or not address:
            return False
        try:
            node = gt.GgmlTensor.from_address(address)
            if ask:
                return self.wants(node)
            self.collect(node)
            return True
        except BaseException as exc:  # Ctrl-C included: kept, and raised by compute_imatrix after the decode
            self.error = exc
            return False

    def wants(self, node: gt.GgmlTensor) -> bool:
        if node.op == gt.GGML_OP_MUL_MAT_ID:
            raise QuantizeError(
                "this is a mixture-of-experts model; localinfer computes importance matrices for dense models only",
                hint="compute one with llama-imatrix and pass it with --imatrix",
            )
        if node.op != gt.GGML_OP_MUL_MAT:
            return False
        weight, activations = gt.source(node, 0), gt.source(node, 1)
        if weight is None or activations is None:
            return False
        if activations.ne[1] < MIN_ROWS or activations.type != gt.GGML_TYPE_F32:
            return False
        name = gt.weight_name(weight)
        return name.startswith("blk.") or (self.process_output and name == "output.weight")

    def collect(self, node: gt.GgmlTensor) -> None:
        """Add the squared rows of the node's input to its weight's sums, matrix by matrix."""
        weight, activations = gt.GgmlTensor.from_address(node.src[0]), gt.GgmlTensor.from_address(node.src[1])
        name = gt.weight_name(weight)
        x = gt.read_f32(node.src[1], activations)
        n_cols = x.shape[3]
        w2, w3 = int(weight.ne[2]), int(weight.ne[3])
        sums = self.sums.setdefault(name, np.zeros(n_cols * w2 * w3, dtype=np.float32))
        if sums.size != n_cols * w2 * w3:
            raise QuantizeError(f"inconsistent activation size for {name} ({sums.size} vs {n_cols * w2 * w3})")
        for i3 in range(x.shape[0]):
            for i2 in range(x.shape[1]):
                at = ((i3 % w3) * w2 + (i2 % w2)) * n_cols
                rows = x[i3, i2]
                # row after row into the running sums, in float32, as collect_imatrix adds them
                stacked = np.concatenate([sums[None, at : at + n_cols], rows * rows])
                sums[at : at + n_cols] = np.add.reduce(stacked, axis=0)
        if not np.isfinite(sums).all():
            raise QuantizeError(f"non-finite activations in {name}", hint="check that the model answers sensibly")
        self.counts[name] = self.counts.get(name, 0) + x.shape[0] * x.shape[1] * x.shape[2] // (w2 * w3)

    def matrix(self, datasets: tuple[str, ...], chunk_size: int) -> Matrix:
        entries = {
            name: Entry(self.sums[name], np.full(1, self.counts[name], dtype=np.int64)) for name in sorted(self.sums)
        }
        chunk_count = max(self.counts.values(), default=0) // chunk_size
        return Matrix(entries, datasets, chunk_count, chunk_size)


def calibration_tokens(model: Any, text: str) -> list[int]:
    """``text`` as llama-imatrix reads and tokenizes a ``-f`` file: one trailing newline dropped, BOS by the
    vocabulary's rule, special tokens as text."""
    text = text.removesuffix("\n")
    tokens: list[int] = model.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    return tokens


def compute_imatrix(
    model_path: Path,
    text: str,
    *,
    dataset: str,
    ctx: int = DEFAULT_CTX,
    chunks: int | None = None,
    threads: int | None = None,
    process_output: bool = False,
    on_chunk: Callable[[int, int], None] | None = None,
) -> Matrix:
    """The importance matrix of ``model_path`` over ``chunks`` chunks of ``ctx`` tokens of ``text`` (all whole
    chunks when None); ``dataset`` names the text in the file. Raises QuantizeError (a context under 16 tokens, a
    text shorter than one chunk, a model that does not load, a mixture-of-experts model)."""
    from llama_cpp import llama_cpp as lc
    from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
    from llama_cpp._logger import set_verbose

    if ctx < MIN_ROWS:
        raise QuantizeError(f"a context of {ctx} tokens is too small", hint="use --ctx 128 or more")
    gt.check_layout()
    set_verbose(False)
    try:
        model = LlamaModel(path_model=str(model_path), params=lc.llama_model_default_params(), verbose=False)
    except ValueError as exc:
        raise QuantizeError(f"cannot load {model_path}: {exc}", hint="is it a complete GGUF file?") from exc
    collector = _Collector(process_output)
    callback = lc.ggml_backend_sched_eval_callback(collector.on_node)  # kept alive until the context is freed
    context = batch = None
    try:
        tokens = calibration_tokens(model, text)
        if len(tokens) < ctx:
            raise QuantizeError(
                f"the text has {len(tokens)} tokens; a context of {ctx} needs at least {ctx}",
                hint="pass a longer --text or a smaller --ctx",
            )
        n_chunks = len(tokens) // ctx if chunks is None else max(1, min(chunks, len(tokens) // ctx))
        context = LlamaContext(model=model, params=_context_params(ctx, threads, callback), verbose=False)
        batch = LlamaBatch(n_tokens=ctx, embd=0, n_seq_max=1, verbose=False)
        bos = model.token_bos() if model.add_bos_token() else None
        for i in range(n_chunks):
            chunk = tokens[i * ctx : (i + 1) * ctx]
            if bos is not None:
                chunk[0] = bos
            lc.llama_memory_clear(context.memory, True)
            batch.set_batch(chunk, n_past=0, logits_all=True)
            status = lc.llama_decode(context.ctx, batch.batch)
            if collector.error is not None:
                raise collector.error
            if status != 0:
                raise QuantizeError(f"llama.cpp could not decode chunk {i + 1} (status {status})")
            if on_chunk is not None:
                on_chunk(i + 1, n_chunks)
    finally:
        for resource in (batch, context, model):
            if resource is not None:
                resource.close()  # type: ignore[no-untyped-call]
        del callback
    return collector.matrix((dataset,), ctx)


def _context_params(ctx: int, threads: int | None, callback: Any) -> Any:
    """llama.cpp's default context parameters (as llama-imatrix's) for one sequence of ``ctx`` tokens decoded in
    one batch, with the collector as the eval callback."""
    from llama_cpp import llama_cpp as lc

    params = lc.llama_context_default_params()
    params.n_ctx = ctx
    params.n_batch = ctx
    params.n_ubatch = min(ctx, _MAX_UBATCH)
    params.n_seq_max = 1
    params.no_perf = True
    if threads:
        params.n_threads = threads
        params.n_threads_batch = threads
    params.cb_eval = callback
    params.cb_eval_user_data = None
    return params


def calibration_text(calibration: Calibration) -> str:
    """The text ``calibration`` names (or the default text). Raises QuantizeError for a file that cannot be read
    as UTF-8."""
    from localinfer.quantize.perplexity import default_text

    if calibration.text is None:
        return default_text()
    try:
        return calibration.text.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuantizeError(
            f"cannot read the calibration text {calibration.text}: {exc}",
            hint="pass a UTF-8 text file after --calibrate, or --calibrate alone for localinfer's default text",
        ) from exc


def calibrate(
    model_path: Path,
    calibration: Calibration,
    text: str,
    target: Path,
    *,
    threads: int | None = None,
    progress: ProgressSink = ignore_progress,
) -> dict[str, object]:
    """Compute the importance matrix of ``model_path`` on ``text`` (``calibration``'s) into ``target`` (GGUF),
    reporting chunks done; return what a lineage keeps of it. Raises QuantizeError as ``compute_imatrix`` does."""
    status = f"computing an importance matrix on {calibration.label()}"

    def on_chunk(done: int, total: int) -> None:
        progress(ProgressEvent(status, total=total, completed=done, unit="chunks"))

    progress(ProgressEvent(status))
    matrix = compute_imatrix(
        model_path,
        text,
        dataset=str(calibration.text) if calibration.text is not None else DEFAULT_TEXT_LABEL,
        ctx=calibration.ctx,
        chunks=calibration.chunks,
        threads=threads,
        on_chunk=on_chunk,
    )
    save_imatrix(matrix, target)
    return {
        "calibrated_on": calibration.label(),
        "chunks": matrix.chunk_count,
        "chunk_size": matrix.chunk_size,
        "entries": len(matrix.entries),
    }
