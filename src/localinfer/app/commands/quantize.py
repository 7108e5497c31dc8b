"""``localinfer quantize SOURCE --type TYPE``: a GGUF quantized by llama.cpp's quantizer, registered, and with
``--check`` measured against its source."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.progress import ProgressEvent, ignore_progress
from localinfer.quantize.quant_types import TENSOR_TYPES, type_names

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.models.library import ModelLibrary
    from localinfer.models.store import Manifest
    from localinfer.progress import ProgressSink

_MB = 1_000_000
CHECK_CTX = 256  # --check: short chunks, so a check of a small model takes seconds


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "quantize",
        help="quantize a GGUF model with llama.cpp's quantizer",
        description="Quantize a GGUF model (a name from 'localinfer ls' or a .gguf path) to another type with "
        "llama.cpp's own quantizer, and register the result. With --imatrix or --calibrate, an importance matrix "
        "guides it (the IQ1 and IQ2 types below IQ2_M need one). With --check, measure its perplexity and KL "
        "divergence against the source on localinfer's default text.",
        epilog=f"Types: {type_names()} (case-insensitive; Q4_K means Q4_K_M).",
    )
    p.add_argument(
        "source", help="a model name or a .gguf file (F16, BF16 or F32; a quantized one needs --allow-requantize)"
    )
    p.add_argument("--type", required=True, metavar="TYPE", help="the quantization type, e.g. Q4_K_M, Q8_0, Q2_K")
    p.add_argument("--name", help="the name to register it under (default: SOURCE-TYPE)")
    p.add_argument(
        "--allow-requantize", action="store_true", help="quantize an already quantized model; the losses compound"
    )
    tensor_types = ", ".join(TENSOR_TYPES)
    p.add_argument("--output-tensor-type", metavar="T", help=f"the output head's type ({tensor_types})")
    p.add_argument("--token-embedding-type", metavar="T", help=f"the token embeddings' type ({tensor_types})")
    p.add_argument("--pure", action="store_true", help="every matrix in TYPE (no mix of higher types)")
    p.add_argument(
        "--imatrix", type=Path, metavar="FILE", help="an importance matrix (GGUF or legacy .dat) to quantize with"
    )
    p.add_argument(
        "--calibrate",
        nargs="?",
        const="",
        metavar="TEXT_FILE",
        help="compute an importance matrix first, from TEXT_FILE or localinfer's default text (after SOURCE)",
    )
    p.add_argument("--keep-split", action="store_true", help="a split source gives as many parts (default: one file)")
    p.add_argument("--threads", type=int, default=0, help="quantizer threads (default: all cores)")
    p.add_argument("--check", action="store_true", help="measure perplexity and KLD against the source after")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the result")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.quantize.gguf_quantizer import Options, quantize_model
    from localinfer.quantize.imatrix_collect import Calibration
    from localinfer.quantize.quant_types import parse_type

    calibrate = None
    if args.calibrate is not None:  # "" is --calibrate alone: the default text
        calibrate = Calibration(Path(args.calibrate).expanduser() if args.calibrate else None)
    options = Options(
        type=parse_type(args.type),
        allow_requantize=args.allow_requantize,
        output_tensor_type=args.output_tensor_type,
        token_embedding_type=args.token_embedding_type,
        pure=args.pure,
        threads=max(0, args.threads),
        imatrix=args.imatrix.expanduser() if args.imatrix else None,
        calibrate=calibrate,
        keep_split=args.keep_split,
    )
    from localinfer.models.library import ModelLibrary

    library = ModelLibrary.from_settings(settings)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        done = quantize_model(library.store, library, args.source, options, name=args.name, progress=sink)
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: quantize interrupted; nothing was written", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    manifest = done.manifest
    if done.source.quantized:
        print(f"note: {done.source.name} was already {done.source.file_type}; its losses add to {options.type.name}'s")
    print(
        f"quantized {done.source.name} -> {manifest.name} ({options.type.name}, {manifest.size / _MB:.1f} MB, "
        f"estimated {done.estimate / _MB:.1f} MB, {done.seconds:.0f}s) -> {manifest.path}"
    )
    if args.check:
        return _check(args, library, done.source.path, manifest, sink, renderer)
    return 0


def _check(
    args: argparse.Namespace,
    library: ModelLibrary,
    source: Path,
    manifest: Manifest,
    sink: ProgressSink,
    renderer: ProgressLine,
) -> int:
    """Measure ``manifest`` against ``source`` on the default text, print the table, keep the figures."""
    from localinfer.app.commands.render import perplexity_table
    from localinfer.quantize.lineage import add_quality
    from localinfer.quantize.perplexity import default_text, measure

    def on_chunk(done: int, total: int) -> None:
        sink(ProgressEvent("measuring against the source", total=total, completed=done, unit="chunks"))

    try:
        report = measure(manifest.path, default_text(), base=source, ctx=CHECK_CTX, on_chunk=on_chunk)
    except KeyboardInterrupt:
        renderer.close()
        print(f"localinfer: check interrupted; {manifest.name} is registered without figures", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    print(perplexity_table(report, model=manifest.name, base=args.source))
    add_quality(library.store, manifest, {"text": "default", **report.as_dict()})
    return 0
