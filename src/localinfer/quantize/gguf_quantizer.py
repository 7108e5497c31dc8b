"""GGUF quantization through llama.cpp's own quantizer (``llama_model_quantize``), registered in the store.

The source is a registered GGUF model or a GGUF path. The output's size is estimated from the source's tensors
first, and the disk must hold it. The quantizer runs in a child process (``quantize/worker.py``) writing into a
work folder under the store's ``tmp/``; its per-tensor log lines give the progress. Once done the file moves into
``blobs/sha256-<hex>`` with one rename and is registered, with a lineage record beside the store
(``quantize/install.py``, ``quantize/lineage.py``). An error, a failure of the quantizer or Ctrl-C (the child is
killed) leaves no file and no manifest.

An importance matrix comes from a file (``imatrix``, checked against the source before the quantizer starts) or is
computed first (``calibrate``, into the work folder, in this process); the worker loads it and hands it to
llama_model_quantize as llama-quantize does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gguf

from localinfer.errors import LocalInferError, ModelNotFound, PullError, QuantizeError
from localinfer.models.files import split_part
from localinfer.models.metadata.gguf_tensors import TensorEntry, read_gguf_tensors
from localinfer.models.store import Manifest, ModelSource, ModelStore, file_sha256, validate_name
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress
from localinfer.quantize.imatrix import Matrix, check_fits, file_record, load_imatrix
from localinfer.quantize.imatrix_collect import Calibration, calibrate, calibration_text
from localinfer.quantize.install import Installed, install_file, install_parts
from localinfer.quantize.lineage import Lineage
from localinfer.quantize.quant_types import QuantType, fallback_bpw, parse_tensor_type, tensor_bpw

_FLOAT_TYPES = {
    int(t) for t in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)
}
_TENSOR_LINE = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]")
_MARGIN = 1.05  # the estimate is nominal: ask for 5 % more free space
_POLL_S = 0.05  # how often the worker's log is read for progress (and its end noticed)


@dataclass(frozen=True)
class Options:
    type: QuantType
    allow_requantize: bool = False
    output_tensor_type: str | None = None
    token_embedding_type: str | None = None
    pure: bool = False
    threads: int = 0  # 0: llama.cpp's choice (all cores)
    imatrix: Path | None = None  # an importance matrix file, GGUF or legacy .dat
    calibrate: Calibration | None = None  # compute an importance matrix first
    keep_split: bool = False  # a split source gives as many parts (llama-quantize --keep-split); else one file


@dataclass(frozen=True)
class Source:
    name: str
    path: Path  # the first part of a split model, which llama.cpp opens (it finds the others beside it)
    origin: str
    sha256: str | None
    file_type: str | None  # what the file's tensors are mostly, e.g. Q4_1 or F16
    quantized: bool  # some matrix is stored in a quantized type
    parts: tuple[Path, ...] = ()  # every file, in order: one, or a split model's parts


@dataclass(frozen=True)
class Quantized:
    manifest: Manifest
    source: Source
    estimate: int
    seconds: float


def resolve_source(models: ModelSource, ref: str) -> Source:
    """The GGUF model ``ref`` names (a model name or a path): one file, or the parts of a split model. Raises
    QuantizeError with a hint otherwise."""
    path = Path(ref).expanduser()
    if path.is_dir():
        raise QuantizeError(f"{path} is a folder, not a GGUF file", hint="pass a .gguf file or a name from 'ls'")
    try:
        manifest = models.resolve(ref)
    except ModelNotFound as exc:
        if path.exists():
            raise QuantizeError(f"{path} is not a GGUF file", hint="localinfer quantizes GGUF models") from exc
        raise QuantizeError(
            f"there is no model or GGUF file called '{ref}'",
            hint="run 'localinfer ls' to see the models here, or pass the path of a .gguf file",
        ) from exc
    if manifest.format != "gguf":
        raise QuantizeError(f"{manifest.name} is a {manifest.format} model", hint="quantize a GGUF model")
    if not manifest.files_present():
        raise QuantizeError(f"the files of {manifest.name} are missing or changed: {manifest.path}", hint="pull again")
    typed = path if path.is_file() else manifest.path  # as typed: a link's own name says it is a split part
    parts = tuple(f.path for f in manifest.files) if len(manifest.files) > 1 else _split_parts(typed)
    file_type, quantized = _file_type(parts)
    return Source(manifest.name, parts[0], manifest.source, manifest.files[0].sha256, file_type, quantized, parts)


def _split_parts(path: Path) -> tuple[Path, ...]:
    """``path`` alone, or, for the first part of a split GGUF given by path (``x-00001-of-00003.gguf``), every part
    beside it, as llama.cpp opens them. Raises QuantizeError when one is missing."""
    found = split_part(path.name)
    if found is None or found[0] != 1:
        return (path,)
    count = found[1]
    prefix = path.name[: -len(f"-00001-of-{count:05d}.gguf")]
    parts = tuple(path.with_name(f"{prefix}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise QuantizeError(f"the split model {path.name} lacks {', '.join(missing)}", hint="put every part beside it")
    return parts


def _tensors(parts: tuple[Path, ...]) -> tuple[tuple[TensorEntry, ...], int]:
    """Every part's tensors, in order, and the bytes of the parts' headers together."""
    tensors: list[TensorEntry] = []
    headers = 0
    path = parts[0]
    try:
        for path in parts:
            found, data_start = read_gguf_tensors(path)
            tensors += found
            headers += data_start
    except LocalInferError as exc:
        raise QuantizeError(
            f"{path} cannot be read as GGUF: {exc.message}", hint="is it a complete GGUF file?"
        ) from exc
    return tuple(tensors), headers


def _file_type(parts: tuple[Path, ...]) -> tuple[str | None, bool]:
    """The most common type of the model's matrices, and whether any matrix is quantized."""
    tensors, _ = _tensors(parts)
    counts: dict[str, int] = {}
    quantized = False
    for tensor in tensors:
        if len(tensor.shape) >= 2:
            name = _type_name(tensor.type)
            counts[name] = counts.get(name, 0) + tensor.n_elements
            quantized = quantized or tensor.type not in _FLOAT_TYPES
    return (max(counts, key=lambda k: counts[k]) if counts else None), quantized


def _type_name(ggml_type: int) -> str:
    try:
        return gguf.GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


def estimate_size(parts: tuple[Path, ...], options: Options) -> int:
    """Bytes the quantized file will take, nominally: the matrices at the type's bits per weight (or its fallback
    for rows that are not a multiple of 256; the output head and token embeddings at Q6_K or better, as
    llama.cpp keeps them unless ``pure``), vectors in F32, and the source's metadata."""
    tensors, data_start = _tensors(parts)
    fallback = fallback_bpw(options.type)
    total = data_start if tensors else 0
    for tensor in tensors:
        n = tensor.n_elements
        odd_rows = int(tensor.shape[0]) % 256 != 0  # GGUF's first dimension is the row length
        bpw = fallback if odd_rows and fallback is not None else options.type.bpw
        if tensor.name in ("output.weight", "token_embd.weight") and not options.pure:
            bpw = max(bpw, 8.5 if odd_rows else 6.5625)
        if len(tensor.shape) < 2:
            bpw = 32.0
        elif tensor.name == "output.weight" and options.output_tensor_type:
            bpw = tensor_bpw(options.output_tensor_type)
        elif tensor.name == "token_embd.weight" and options.token_embedding_type:
            bpw = tensor_bpw(options.token_embedding_type)
        total += int(n * bpw / 8)
    return total


def free_bytes(path: Path) -> int:
    """Free bytes on the file system of ``path`` (or of its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def quantize_model(
    store: ModelStore,
    models: ModelSource,
    ref: str,
    options: Options,
    *,
    name: str | None = None,
    progress: ProgressSink = ignore_progress,
) -> Quantized:
    """Quantize ``ref`` and register the result as ``name`` (default ``<source>-<TYPE>``).

    Raises QuantizeError (bad source, a quantized source without ``allow_requantize``, a taken name, a type that
    needs an importance matrix without one, an importance matrix that is not one or is for another model, too
    little disk, a quantizer or calibration failure); KeyboardInterrupt passes through after the worker is killed
    and its output deleted.
    """
    started = time.monotonic()
    imatrix_input = _imatrix_input(options)
    output_type = _tensor_type(options.output_tensor_type, "--output-tensor-type")
    embedding_type = _tensor_type(options.token_embedding_type, "--token-embedding-type")
    source = resolve_source(models, ref)
    if isinstance(imatrix_input, Matrix) and options.imatrix is not None:
        check_fits(imatrix_input, source.parts, options.imatrix.name)
    if source.quantized and not options.allow_requantize:
        raise QuantizeError(
            f"{source.name} is already quantized ({source.file_type}); quantizing it again compounds the loss",
            hint="start from an F16, BF16 or F32 GGUF, or pass --allow-requantize to do it anyway",
        )
    name = name or f"{source.name}-{options.type.name}"
    try:
        validate_name(name)
    except PullError as exc:
        raise QuantizeError(exc.message, hint=exc.hint) from exc
    if store.get(name) is not None:
        raise QuantizeError(f"'{name}' is already a model here", hint=f"choose another --name, or 'rm {name}' first")
    estimate = estimate_size(source.parts, options)
    free = free_bytes(store.root)
    if free < estimate * _MARGIN:
        raise QuantizeError(
            f"not enough disk space: the {options.type.name} file needs about {estimate / 1e6:.0f} MB and "
            f"{free / 1e6:.0f} MB are free under {store.root}",
            hint="free some space (localinfer rm MODEL) or set LOCALINFER_HOME to a larger disk",
        )
    progress(ProgressEvent(f"quantizing {source.name} to {options.type.name} (about {estimate / 1e6:.0f} MB)"))
    store.tmp_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="quantize-", dir=store.tmp_dir))
    try:
        keep_split = options.keep_split and len(source.parts) > 1
        # llama.cpp names the parts it writes <target>-0000i-of-0000N.gguf
        output = work / ("model" if keep_split else "model.gguf")
        job = {
            "source": str(source.path),
            "target": str(output),
            "keep_split": keep_split,
            "ftype": options.type.ftype,
            "threads": options.threads,
            "allow_requantize": options.allow_requantize,
            "pure": options.pure,
            "output_tensor_type": output_type,
            "token_embedding_type": embedding_type,
        }
        imatrix_record = _imatrix_job(options, imatrix_input, source, work, job, progress)
        _run_worker(job, work / "worker.log", options.type.name, progress)
        progress(ProgressEvent(f"registering {name}"))
        installed = Installed(name, f"quantize:{source.origin}", options.type.name)
        lineage = _lineage(source, options, imatrix_record)
        if keep_split:
            written = sorted(work.glob("model-*-of-*.gguf"))
            manifest = install_parts(store, written, installed, lineage, source_parts=len(source.parts))
        else:
            manifest = install_file(store, output, installed, lineage)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Quantized(manifest, source, estimate, time.monotonic() - started)


def _imatrix_input(options: Options) -> Matrix | str | None:
    """What the importance matrix comes from, read before any work starts: the file's matrix (``imatrix``), the
    calibration text (``calibrate``), or None. Raises QuantizeError for both, a type that needs one without either,
    a file that is not an importance matrix, or a text that cannot be read."""
    if options.imatrix is not None and options.calibrate is not None:
        raise QuantizeError(
            "--imatrix and --calibrate both give an importance matrix", hint="pass one of them, not both"
        )
    if options.type.needs_imatrix and options.imatrix is None and options.calibrate is None:
        raise QuantizeError(
            f"{options.type.name} needs an importance matrix",
            hint="add --calibrate (computed from localinfer's default text) or --imatrix FILE",
        )
    if options.imatrix is not None:
        return load_imatrix(options.imatrix)
    return calibration_text(options.calibrate) if options.calibrate is not None else None


def _imatrix_job(
    options: Options,
    given: Matrix | str | None,
    source: Source,
    work: Path,
    job: dict[str, object],
    progress: ProgressSink,
) -> dict[str, object] | None:
    """Point ``job`` at the importance matrix (the file given, or one computed into ``work`` now from the
    calibration text) and return what the lineage keeps of it; None without one."""
    if isinstance(given, Matrix) and options.imatrix is not None:
        job["imatrix"], job["imatrix_name"] = str(options.imatrix), options.imatrix.name
        return file_record(options.imatrix, given, file_sha256(options.imatrix))
    if not isinstance(given, str) or options.calibrate is None:
        return None
    path = work / "imatrix.gguf"
    threads = options.threads or None
    record = calibrate(source.path, options.calibrate, given, path, threads=threads, progress=progress)
    job["imatrix"], job["imatrix_name"] = str(path), f"calibrated on {options.calibrate.label()}"
    return record


def _tensor_type(text: str | None, option: str) -> int | None:
    return None if text is None else parse_tensor_type(text, option)


def _run_worker(job: dict[str, object], log_path: Path, type_name: str, progress: ProgressSink) -> None:
    """Run the quantizer in a child process, reporting tensors done from its log; kill it on any exception."""
    status = f"quantizing to {type_name}"
    with log_path.open("wb") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "localinfer.quantize.worker", json.dumps(job)],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
        )
    try:
        with log_path.open("rb") as log_reader:
            tail = b""
            while True:
                returncode = child.poll()
                tail = (tail + log_reader.read())[-4096:]
                found = _TENSOR_LINE.findall(tail)
                if found:
                    done, total = (int(n) for n in found[-1])
                    progress(ProgressEvent(status, total=total, completed=done, unit="tensors"))
                if returncode is not None:
                    break
                time.sleep(_POLL_S)
    except BaseException:
        child.kill()
        child.wait()
        raise
    if returncode != 0:
        raise QuantizeError(
            f"llama.cpp's quantizer failed: {_last_error(log_path)}",
            hint="check that the source loads (localinfer show SOURCE), or try another type",
        )


def _last_error(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    errors = [line for line in lines if "failed" in line or "error" in line.lower()]
    return (errors or lines or ["no message"])[-1]


def _lineage(source: Source, options: Options, imatrix: dict[str, object] | None) -> Lineage:
    return Lineage(
        source_name=source.name,
        source=source.origin,
        source_sha256=source.sha256,
        source_type=source.file_type,
        type=options.type.name,
        requantized=source.quantized,
        options={
            "output_tensor_type": options.output_tensor_type,
            "token_embedding_type": options.token_embedding_type,
            "pure": options.pure,
            "keep_split": options.keep_split,
        },
        imatrix=imatrix,
    )
