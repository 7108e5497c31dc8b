"""Conversion to ONNX: a GGUF (registered name or path) or a Hugging Face folder in, an onnxruntime-genai model
folder registered in the store out.

A quantized GGUF is first written again as a float GGUF (the builder reads no other) with a Hugging Face config
and tokenizer derived from its metadata; then onnxruntime-genai's model builder runs offline. Everything is built
under the store's ``tmp/`` and moved into ``onnx/<name>/`` with one rename once complete, then registered: a
failure or an interrupt leaves no half-written model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from localinfer.convert import builder
from localinfer.convert.gguf_source import FLOAT32_UP_TO, dequantize, gguf_add_bos, set_add_bos, write_hf_folder
from localinfer.errors import ConvertError, ModelNotFound, PullError
from localinfer.models.store import ONNX_CONFIG, Manifest, ModelSource, ModelStore, onnx_manifest, validate_name
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

PROVENANCE = "localinfer-convert.json"
CONVERTER_VERSION = 3  # bumped whenever the same source and builder would give a different folder or report


@dataclass(frozen=True)
class Source:
    """What is converted: a GGUF file (``gguf``) or a Hugging Face folder (``hf``)."""

    name: str  # the model's name, the default name's stem
    kind: Literal["gguf", "hf"]
    path: Path
    origin: str  # where it came from, for the manifest's source
    sha256: str | None = None


@dataclass(frozen=True)
class Converted:
    manifest: Manifest
    source: Source
    seconds: float


def default_precision(target: str) -> str:
    """int8: int4 is smaller and faster but drifts on small or already-quantized models; DirectML has no int8."""
    return "int4" if target == "dml" else "int8"


def resolve_source(models: ModelSource, ref: str) -> Source:
    """The GGUF or Hugging Face folder ``ref`` names. Raises ConvertError (with a hint) for anything else."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return _folder_source(path)
    try:
        manifest = models.resolve(ref)
    except ModelNotFound as exc:
        if path.exists():
            raise ConvertError(
                f"{path} is not a model: a GGUF file or a Hugging Face model folder can be converted",
                hint="pass a .gguf file, a folder with config.json and *.safetensors, or a name from 'localinfer ls'",
            ) from exc
        raise ConvertError(
            f"there is no model, GGUF file or model folder called '{ref}'",
            hint="run 'localinfer ls' to see the models here, or 'localinfer pull MODEL' to get one",
        ) from exc
    if manifest.format == "onnx":
        raise ConvertError(f"{manifest.name} is already an ONNX model", hint="serve it: localinfer serve " + ref)
    if not manifest.files_present():
        raise ConvertError(
            f"the files of {manifest.name} are missing or changed: {manifest.path}", hint="pull it again"
        )
    if manifest.format == "hf":
        return Source(manifest.name, "hf", manifest.path.parent, manifest.source)
    if manifest.format != "gguf":
        raise ConvertError(f"{manifest.name} is a {manifest.format} model", hint="convert its GGUF or HF folder")
    if len(manifest.files) > 1:
        raise ConvertError(
            f"{manifest.name} is split into {len(manifest.files)} GGUF files; the converter reads one",
            hint="merge the parts first (llama-gguf-split --merge)",
        )
    return Source(manifest.name, "gguf", manifest.path, manifest.source, manifest.files[0].sha256)


def _folder_source(path: Path) -> Source:
    if (path / ONNX_CONFIG).is_file():
        raise ConvertError(f"{path} is already an ONNX model", hint=f"serve it: localinfer serve {path}")
    weights = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    if not (path / "config.json").is_file() or not weights:
        raise ConvertError(
            f"{path} is not a Hugging Face model folder (config.json and *.safetensors)",
            hint="pass such a folder, a .gguf file, or a name from 'localinfer ls'",
        )
    path = path.resolve()
    return Source(path.name, "hf", path, f"file:{path}")


def convert_to_onnx(
    store: ModelStore,
    models: ModelSource,
    ref: str,
    *,
    precision: str | None = None,
    target: str = "cpu",
    name: str | None = None,
    log_dir: Path,
    progress: ProgressSink = ignore_progress,
) -> Converted:
    """Convert ``ref`` and register the result as ``name`` (default ``<source>-onnx-<precision>[-<target>]``),
    replacing an earlier ONNX model of that name. The builder's output goes to ``log_dir``. Raises ConvertError."""
    started = time.monotonic()
    precision = precision or default_precision(target)
    builder.validate(precision, target)
    builder.check_installed()
    source = resolve_source(models, ref)
    name = name or f"{source.name}-onnx-{precision}" + ("" if target == "cpu" else f"-{target}")
    try:
        validate_name(name)
    except PullError as exc:
        raise ConvertError(exc.message, hint=exc.hint) from exc
    existing = store.get(name)
    if existing is not None and existing.format != "onnx":
        raise ConvertError(f"'{name}' is already the name of a {existing.format} model", hint="choose another --name")
    final = store.onnx_dir / store.folder_name(name)
    log_dir.mkdir(parents=True, exist_ok=True)
    store.tmp_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="convert-", dir=store.tmp_dir))
    try:
        output = work / "model"
        _build(source, output, work, precision, target, log_dir / f"convert-{store.folder_name(name)}.log", progress)
        provenance = {
            "source": source.origin,
            "source_sha256": source.sha256,
            "precision": precision,
            "target": target,
            "builder": f"onnxruntime-genai {builder.builder_version()}",
            "converter": CONVERTER_VERSION,
            "created": int(time.time()),
        }
        (output / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
        progress(ProgressEvent(f"registering {name}"))
        manifest = _install(store, output, final, work, name, f"convert:{source.origin}", precision)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Converted(manifest, source, time.monotonic() - started)


def _build(
    source: Source, output: Path, work: Path, precision: str, target: str, log_path: Path, progress: ProgressSink
) -> None:
    float_gguf: Path | None = None
    if source.kind == "hf":
        config = json.loads((source.path / "config.json").read_text(encoding="utf-8"))
        layers = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers") or 0
        built_from, config_folder, n_layers = source.path, None, int(layers)
    else:
        float_gguf = work / "float.gguf"  # the builder reads only float GGUF
        float32_up_to = 1 << 62 if precision == "fp32" else FLOAT32_UP_TO
        dequantize(source.path, float_gguf, float32_up_to=float32_up_to, progress=progress)
        progress(ProgressEvent("reading the config and tokenizer from the GGUF metadata"))
        config_folder = work / "hf"
        built_from, n_layers = float_gguf, write_hf_folder(float_gguf, config_folder)
    builder.build(
        source=built_from,
        config_folder=config_folder,
        output=output,
        precision=precision,
        target=target,
        work=work,
        log_path=log_path,
        n_layers=n_layers,
        progress=progress,
    )
    add_bos = gguf_add_bos(float_gguf) if float_gguf is not None else None
    if add_bos is not None:  # the builder saved the tokenizer again, without it
        set_add_bos(output, add_bos)


def _install(
    store: ModelStore, output: Path, final: Path, work: Path, name: str, source: str, precision: str
) -> Manifest:
    """Move the built folder into place with one rename (an earlier build of the name moves out first) and
    register it."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        os.replace(final, work / "replaced")
    os.replace(output, final)
    try:
        manifest = onnx_manifest(final, name=name, source=source, quantization=precision, owned=True)
        store.register(manifest)
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return manifest
