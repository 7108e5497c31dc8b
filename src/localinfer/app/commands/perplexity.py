"""``localinfer perplexity MODEL [--base MODEL]``: perplexity on a text, and KL divergence from a base model, in
llama-perplexity's method."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.app.commands.render import perplexity_table
from localinfer.errors import QuantizeError
from localinfer.progress import ProgressEvent

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.models.library import ModelLibrary
    from localinfer.models.store import Manifest


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "perplexity",
        help="measure a model's perplexity, and its KL divergence from a base model",
        description="Perplexity of a GGUF model on a text as llama-perplexity computes it (chunks of --ctx "
        "tokens, the second half of each scored). With --base, also the KL divergence of its token "
        "distributions from the base model's (mean, 99th percentile), how often both pick the same top token, "
        "and the mean change of the correct token's probability, as llama-perplexity --kl-divergence reports.",
    )
    p.add_argument("model", help="a model name or a .gguf file")
    p.add_argument("--base", help="the model to compare with (usually the one MODEL was quantized from)")
    p.add_argument("--text", type=Path, help="a UTF-8 text file (default: a text that ships with localinfer)")
    p.add_argument("--ctx", type=int, default=512, help="tokens per chunk (default 512)")
    p.add_argument("--chunks", type=int, help="chunks to score (default: all the text holds)")
    p.add_argument("--threads", type=int, help="threads (default: llama.cpp's choice)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _gguf(library: ModelLibrary, ref: str) -> Manifest:
    path = Path(ref).expanduser()
    if path.is_dir():
        raise QuantizeError(f"{path} is a folder, not a GGUF file", hint="pass a .gguf file or a name from 'ls'")
    manifest = library.resolve(ref)
    if manifest.format != "gguf":
        raise QuantizeError(f"{manifest.name} is a {manifest.format} model", hint="perplexity measures GGUF models")
    return manifest


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.library import ModelLibrary
    from localinfer.quantize.perplexity import measure, read_text

    library = ModelLibrary.from_settings(settings)
    model = _gguf(library, args.model)
    base = _gguf(library, args.base) if args.base else None
    text = read_text(args.text)
    renderer = ProgressLine(sys.stderr)

    def on_chunk(done: int, total: int) -> None:
        if not args.json:
            renderer(ProgressEvent("scoring", total=total, completed=done, unit="chunks"))

    try:
        report = measure(
            model.path,
            text,
            base=base.path if base else None,
            ctx=args.ctx,
            chunks=args.chunks,
            threads=args.threads,
            on_chunk=on_chunk,
        )
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: perplexity interrupted", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    if args.json:
        print(json.dumps({"model": model.name, "base": base.name if base else None, **report.as_dict()}, indent=2))
    else:
        print(perplexity_table(report, model=model.name, base=base.name if base else None))
    return 0
