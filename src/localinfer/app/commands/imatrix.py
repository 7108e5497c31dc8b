"""``localinfer imatrix MODEL -o OUT``: an importance matrix in llama-imatrix's method and GGUF format, for
``quantize --imatrix`` here or ``llama-quantize --imatrix``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.errors import QuantizeError
from localinfer.progress import ProgressEvent

if TYPE_CHECKING:
    from localinfer.config import Settings

_DEFAULT_CTX = 512  # llama-imatrix's; imatrix_collect.DEFAULT_CTX, not imported here to keep numpy out of --help


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "imatrix",
        help="compute an importance matrix for quantizing a GGUF model",
        description="Compute an importance matrix of a GGUF model (a name from 'localinfer ls' or a .gguf path) "
        "as llama-imatrix computes it: the sums of the squared activations entering each weight matrix, per "
        "column, over chunks of --ctx tokens of a text. Written in llama.cpp's GGUF imatrix format, for "
        "'localinfer quantize --imatrix' or llama-quantize.",
    )
    p.add_argument("model", help="a model name or a .gguf file (F16, BF16 or F32 is best)")
    p.add_argument("--text", type=Path, help="a UTF-8 calibration text (default: a text that ships with localinfer)")
    p.add_argument("--ctx", type=int, default=_DEFAULT_CTX, help=f"tokens per chunk (default {_DEFAULT_CTX})")
    p.add_argument("--chunks", type=int, help="chunks to use (default: all the text holds)")
    p.add_argument("--threads", type=int, help="threads (default: llama.cpp's choice)")
    p.add_argument("--process-output", action="store_true", help="also collect the output head (llama-imatrix's flag)")
    p.add_argument("-o", "--output", type=Path, help="the file to write (default: MODEL.imatrix.gguf, here)")
    p.set_defaults(run=run)


def check_writable(path: Path) -> None:
    """Raise QuantizeError unless ``path`` can be created or replaced (checked before the work, not after)."""
    hint = "pass -o with a file path in a folder you can write to"
    if path.is_dir():
        raise QuantizeError(f"{path} is a folder", hint=hint)
    folder = path.parent
    if not folder.is_dir():
        raise QuantizeError(f"cannot write {path}: the folder {folder} does not exist", hint=hint)
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise QuantizeError(f"cannot write {path}: permission denied", hint=hint)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.library import ModelLibrary
    from localinfer.quantize.gguf_quantizer import resolve_source
    from localinfer.quantize.imatrix import save_imatrix
    from localinfer.quantize.imatrix_collect import DEFAULT_TEXT_LABEL, compute_imatrix
    from localinfer.quantize.perplexity import read_text

    source = resolve_source(ModelLibrary.from_settings(settings), args.model)
    default = Path(f"{source.name.replace('/', '--').replace(':', '-')}.imatrix.gguf")  # a file here, for org/repo:TAG
    output: Path = (args.output or default).expanduser()
    check_writable(output)
    text = read_text(args.text)
    renderer = ProgressLine(sys.stderr)

    def on_chunk(done: int, total: int) -> None:
        renderer(ProgressEvent("computing the importance matrix", total=total, completed=done, unit="chunks"))

    try:
        matrix = compute_imatrix(
            source.path,
            text,
            dataset=str(args.text) if args.text else DEFAULT_TEXT_LABEL,
            ctx=args.ctx,
            chunks=args.chunks,
            threads=args.threads,
            process_output=args.process_output,
            on_chunk=on_chunk,
        )
        save_imatrix(matrix, output)
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: imatrix interrupted; nothing was written", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    print(
        f"wrote {output}: {len(matrix.entries)} weights, {matrix.chunk_count} chunks of {matrix.chunk_size} tokens "
        f"of {args.text or DEFAULT_TEXT_LABEL}"
    )
    return 0
