"""``localinfer convert SOURCE --to onnx``: build an onnxruntime-genai model from a GGUF or a Hugging Face folder,
register it, and check it against the GGUF."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.convert.builder import PRECISIONS, TARGETS
from localinfer.errors import ConfigError, LocalInferError
from localinfer.progress import ignore_progress

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.convert.onnx import Converted
    from localinfer.models.library import ModelLibrary
    from localinfer.progress import ProgressSink

_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "convert",
        help="convert a model to ONNX (onnxruntime-genai), or a PEFT LoRA adapter to llama.cpp's LoRA GGUF",
        description="Convert a GGUF model (a name from 'localinfer ls' or a .gguf path) or a Hugging Face model "
        "folder to an onnxruntime-genai model with its model builder, offline, and register it. A quantized GGUF "
        "is dequantized first. Afterwards both models score the same text and it prints the KL divergence of the "
        "ONNX model's token distributions from the GGUF's (as 'localinfer perplexity --base' does) and how long "
        "their greedy continuations agree. With --to gguf-lora, SOURCE is a PEFT adapter folder "
        "(adapter_config.json and adapter_model.safetensors), written as the LoRA GGUF that serve --lora loads "
        "(as llama.cpp's convert_lora_to_gguf.py writes it), checked against the GGUF model --base names.",
        epilog="ONNX needs the convert extra: pip install 'localinfer[convert]'.",
    )
    p.add_argument("source", help="a model name, a .gguf file, a Hugging Face model folder, or a PEFT adapter folder")
    p.add_argument("--to", required=True, choices=("onnx", "gguf-lora"), help="the format to convert to")
    p.add_argument(
        "--base", metavar="MODEL", help="gguf-lora: the GGUF model the adapter was trained on (a name or path)"
    )
    p.add_argument(
        "--outfile", metavar="FILE", help="gguf-lora: where to write it (default: SOURCE/adapter_model-F32.gguf)"
    )
    p.add_argument(
        "--outtype", choices=("f32", "f16"), default="f32", help="gguf-lora: the adapter's weights (default f32)"
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="weights of the result (default int8; int4 for dml): int4 is smaller and faster, int8 closer to the "
        "source",
    )
    p.add_argument("--target", choices=TARGETS, default="cpu", help="the device it is built for (default cpu)")
    p.add_argument("--name", help="the name to register it under (default: SOURCE-onnx-PRECISION)")
    p.add_argument("--no-check", action="store_true", help="skip the comparison with the GGUF")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the result")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.convert.onnx import convert_to_onnx
    from localinfer.models.library import ModelLibrary

    library = ModelLibrary.from_settings(settings)
    if args.to == "gguf-lora":
        return _to_gguf_lora(args, library)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        converted = convert_to_onnx(
            library.store,
            library,
            args.source,
            precision=args.precision,
            target=args.target,
            name=args.name,
            log_dir=settings.home / "logs",
            progress=sink,
        )
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: convert interrupted; nothing was written", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    manifest = converted.manifest
    print(
        f"converted {converted.source.name} -> {manifest.name} ({manifest.quantization} for {args.target}, "
        f"{manifest.size / _MB:.1f} MB, {converted.seconds:.0f}s) -> {manifest.path.parent}"
    )
    if args.no_check:
        return 0
    if converted.source.kind != "gguf":
        print("quality check: skipped: there is no GGUF to compare with", flush=True)
    else:
        print(quality_line(converted), flush=True)
    return 0


def _to_gguf_lora(args: argparse.Namespace, library: ModelLibrary) -> int:
    """A PEFT folder written as llama.cpp's LoRA GGUF for the model ``--base`` names. Raises ConfigError without
    ``--base`` or for a base that is not a GGUF, ConvertError for an adapter that does not convert."""
    from localinfer.quantize.peft_lora import convert_peft_lora

    if not args.base:
        raise ConfigError("--to gguf-lora needs the base model", hint="add --base MODEL (a name or a .gguf path)")
    base = library.resolve(args.base)
    if base.format != "gguf":
        raise ConfigError(f"{base.name} is not a GGUF model", hint="--base names the GGUF the adapter applies to")
    folder = Path(args.source).expanduser()
    out = Path(args.outfile).expanduser() if args.outfile else folder / f"adapter_model-{args.outtype.upper()}.gguf"
    done = convert_peft_lora(folder, base.path, out, outtype=args.outtype)
    print(
        f"converted {folder} -> {done.path} ({done.pairs} adapted {done.architecture} tensors, rank {done.rank}, "
        f"alpha {done.alpha:g}, for {base.name}); serve it with: localinfer serve {base.name} --lora {done.path}"
    )
    return 0


def quality_line(converted: Converted) -> str:
    """The comparison of the ONNX model with its GGUF (KL divergence, same top token, greedy agreement), as one
    line; a check that fails says why."""
    from localinfer.convert.quality import greedy_agreement

    try:
        agreement = greedy_agreement(converted.source.path, converted.manifest.path.parent)
    except (LocalInferError, ValueError, RuntimeError) as exc:
        return f"quality check: could not run ({getattr(exc, 'message', exc)})"
    return f"quality check: {agreement.summary()}"
