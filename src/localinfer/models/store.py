"""The model store: one JSON manifest per model name, and content-addressed blobs, under one root folder.

Layout under ``root`` (``settings.models_dir``)::

    manifests/<name>.json     one per registered model (':' and '/' in a name are written as '+' and '~')
    blobs/sha256-<hex>        model files the store owns (pulled ones); files used in place live elsewhere
    onnx/<name>/              converted onnxruntime-genai models, one folder each (manifests list every file,
                              genai_config.json first)
    tmp/                      partial downloads and conversions; garbage once no pull or convert is running

Nothing is created on disk until something is registered or downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from localinfer.errors import ModelNotFound, PullError
from localinfer.models import defaults as model_defaults
from localinfer.models.defaults import NO_DEFAULTS, ModelDefaults

log = logging.getLogger(__name__)

MANIFEST_SCHEMA = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9._:-]|/(?![./]))*$")
_NAME_MAX = 200
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
ONNX_CONFIG = "genai_config.json"  # what makes a folder an onnxruntime-genai model
HF_CONFIG = "config.json"  # with safetensors weights beside it, what makes a folder a Hugging Face model


@dataclass(frozen=True)
class ModelFile:
    """One file of a model: where it is, how many bytes, and its sha256 (``None`` when never computed).

    ``owned`` is True for a file localinfer downloaded outside its own blobs (into the Hugging Face cache):
    removing the last model that uses it deletes it. Files that were on disk before are never deleted.
    """

    path: Path
    size: int
    sha256: str | None
    owned: bool = False


@dataclass(frozen=True)
class Manifest:
    """What the store knows about one model; ``source`` is its origin (``pypi:pkg==1.0``, ``file:/x``)."""

    name: str
    source: str
    format: str
    files: tuple[ModelFile, ...]
    quantization: str | None
    created: int
    revision: str | None = None
    projector: ModelFile | None = None  # a vision/audio projector (mmproj GGUF) that goes with the model
    adapters: tuple[ModelFile, ...] = ()  # GGUF LoRA adapters applied to it (a Modelfile's ADAPTER), at scale 1
    defaults: ModelDefaults = NO_DEFAULTS  # what it runs with unless a request says otherwise (a Modelfile's)

    @property
    def path(self) -> Path:
        """The model's main file (the one a backend loads)."""
        return self.files[0].path

    @property
    def size(self) -> int:
        """Bytes of all the model's files together."""
        return sum(f.size for f in self.files)

    def files_present(self) -> bool:
        """True when every file exists with its recorded size."""
        return all(_has_size(f.path, f.size) for f in self.every_file)

    @property
    def every_file(self) -> tuple[ModelFile, ...]:
        """The model's files with its projector and adapters: what removing another model must not delete."""
        return (*self.files, *((self.projector,) if self.projector else ()), *self.adapters)


class ModelSource(Protocol):
    """Where the engine finds models by name: the store alone, or the store plus discovered models."""

    def list(self) -> list[Manifest]: ...

    def resolve(self, ref: str) -> Manifest: ...


def validate_name(name: str) -> str:
    """Return ``name`` when it can be a model name, else raise PullError with a hint.

    A name has 1 to 200 letters, digits, '.', '_', '-', ':' or '/', starts with a letter, digit or '_',
    and no '/' is followed by '.' or another '/' (``org/repo:Q4_K_M`` is a name).
    """
    if not is_valid_name(name):
        raise PullError(
            f"'{name}' cannot be a model name",
            hint="use up to 200 letters, digits, '.', '_', '-', ':' or '/', not starting with '.', '-', ':' "
            "or '/' (e.g. --name my-model:q4)",
        )
    return name


def is_valid_name(name: str) -> bool:
    return len(name) <= _NAME_MAX and bool(_NAME_RE.match(name))


class ModelStore:
    """Manifests and blobs under ``root``. Safe to construct anywhere: it touches the disk only when used."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def manifests_dir(self) -> Path:
        return self.root / "manifests"

    @property
    def blobs_dir(self) -> Path:
        return self.root / "blobs"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def onnx_dir(self) -> Path:
        """Where converted ONNX models live, one folder per model."""
        return self.root / "onnx"

    def record_path(self, sha256: str) -> Path:
        """Where a record about the file with this sha256 is kept (``quantize``'s lineage): it goes when the file
        goes."""
        return self.root / "quantized" / f"sha256-{sha256}.json"

    @property
    def split_dir(self) -> Path:
        """Where split GGUF models that localinfer wrote live (``quantize --keep-split``), one folder per model:
        their parts keep the names by which llama.cpp finds the others from the first."""
        return self.root / "split"

    def folder_name(self, name: str) -> str:
        """A file-system name for the model ``name`` (':' and '/' written as '+' and '~')."""
        return name.replace(":", "+").replace("/", "~")

    def get(self, name: str) -> Manifest | None:
        """The manifest registered as ``name``, or None (also for names that could never be registered).

        A manifest file that cannot be read is logged and treated as absent.
        """
        if not is_valid_name(name):
            return None
        return self._read(self._manifest_path(name))

    def list(self) -> list[Manifest]:
        """Every registered manifest, sorted by name, including those whose files went missing."""
        if not self.manifests_dir.is_dir():
            return []
        found = (self._read(p) for p in self.manifests_dir.glob("*.json"))
        return sorted((m for m in found if m is not None), key=lambda m: m.name)

    def register(self, manifest: Manifest) -> None:
        """Write ``manifest`` as ``manifests/<name>.json``, replacing any earlier one, atomically.

        Raises PullError when the name is not valid.
        """
        validate_name(manifest.name)
        self.manifests_dir.mkdir(parents=True, exist_ok=True)
        target = self._manifest_path(manifest.name)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                json.dump(self._to_json(manifest), fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        log.info("registered model %s -> %s", manifest.name, manifest.path)

    def remove(self, name: str) -> None:
        """Unregister ``name`` and delete the files it owns that no other manifest uses.

        Owned files are the store's blobs and files localinfer downloaded into the Hugging Face cache
        (with their cache blob when no other snapshot links to it); files used in place are kept.

        Raises ModelNotFound when no such model is registered.
        """
        manifest = self.get(name)
        if manifest is None:
            raise ModelNotFound(name)
        self._manifest_path(name).unlink(missing_ok=True)
        still_used = {f.path for m in self.list() for f in m.every_file}
        for f in manifest.every_file:
            if f.path in still_used:
                continue
            if f.path.parent == self.blobs_dir:
                f.path.unlink(missing_ok=True)
            elif f.owned:
                _remove_cached_file(f.path)
            else:
                continue
            if f.sha256 and _SHA256_RE.match(f.sha256):
                self.record_path(f.sha256).unlink(missing_ok=True)
        owned_folders = (self.onnx_dir, self.split_dir)
        for folder in {f.path.parent for f in manifest.files if f.owned and f.path.parent.parent in owned_folders}:
            with contextlib.suppress(OSError):  # kept when something else was put in it
                folder.rmdir()
        log.info("removed model %s", name)

    def resolve(self, ref: str) -> Manifest:
        """A registered name's manifest, or an unregistered one for an existing ``.gguf`` file, onnxruntime-genai
        model folder or Hugging Face (safetensors) folder used in place.

        The in-place manifest is named after the file's stem, has source ``file:<absolute path>`` and no
        sha256 or quantization (reading the file is the loader's job). Raises ModelNotFound otherwise.
        """
        manifest = self.get(ref)
        if manifest is not None:
            return manifest
        try:
            path = Path(ref).expanduser()
        except RuntimeError:  # ~user of no such user
            raise ModelNotFound(ref) from None
        if (path / ONNX_CONFIG).is_file():
            return onnx_manifest(path)
        if is_hf_folder(path):
            return hf_manifest(path)
        if path.is_file():
            if not _is_gguf(path):
                raise ModelNotFound(ref, hint=f"{path} is not a GGUF file; localinfer loads GGUF models")
            return local_manifest(path)
        raise ModelNotFound(ref)

    def blob_path(self, sha256: str) -> Path:
        """Where the blob with this sha256 (64 lowercase hex digits) lives: ``blobs/sha256-<hex>``."""
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.blobs_dir / f"sha256-{sha256}"

    @contextlib.contextmanager
    def partial_file(self) -> Iterator[Path]:
        """Yield a fresh path under ``tmp/`` (not yet created) for a download in progress.

        Whatever is left at that path when the block ends (it raised, or the file was not moved away)
        is deleted.
        """
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        path = self.tmp_dir / f"partial-{uuid.uuid4().hex}"
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    # -- manifest files ---------------------------------------------------------------------------------

    def _manifest_path(self, name: str) -> Path:
        return self.manifests_dir / (self.folder_name(name) + ".json")

    def _to_json(self, manifest: Manifest) -> dict[str, Any]:
        return {
            "schema": MANIFEST_SCHEMA,
            "name": manifest.name,
            "source": manifest.source,
            "format": manifest.format,
            "files": [self._file_json(f) for f in manifest.files],
            "quantization": manifest.quantization,
            "created": manifest.created,
            "revision": manifest.revision,
            "projector": None if manifest.projector is None else self._file_json(manifest.projector),
            **({"adapters": [self._file_json(f) for f in manifest.adapters]} if manifest.adapters else {}),
            **({"defaults": model_defaults.to_json(manifest.defaults)} if not manifest.defaults.empty else {}),
        }

    def _file_json(self, f: ModelFile) -> dict[str, Any]:
        return {"path": self._store_path(f.path), "size": f.size, "sha256": f.sha256, "owned": f.owned}

    def _file(self, f: dict[str, Any]) -> ModelFile:
        return ModelFile(
            path=self._load_path(f["path"]),
            size=int(f["size"]),
            sha256=f.get("sha256"),
            owned=bool(f.get("owned", False)),
        )

    def _read(self, path: Path) -> Manifest | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable manifest %s: %s", path, exc)
            return None
        try:
            files = tuple(self._file(f) for f in data["files"])
            projector = data.get("projector")
            if not files:
                raise ValueError("no files")
            return Manifest(
                name=str(data["name"]),
                source=str(data["source"]),
                format=str(data.get("format", "gguf")),
                files=files,
                quantization=data.get("quantization"),
                created=int(data.get("created", 0)),
                revision=data.get("revision"),
                projector=None if projector is None else self._file(projector),
                adapters=tuple(self._file(f) for f in data.get("adapters", ())),
                defaults=model_defaults.from_json(data["defaults"]) if data.get("defaults") else NO_DEFAULTS,
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring malformed manifest %s: %s", path, exc)
            return None

    def _store_path(self, path: Path) -> str:
        """Paths inside the store are kept relative to it, so the store can be moved as a whole."""
        path = Path(path)
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def _load_path(self, text: str) -> Path:
        path = Path(text)
        return path if path.is_absolute() else self.root / path


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of the file at ``path``, read a MiB at a time (the digest a blob is stored under)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def local_manifest(path: Path, *, name: str | None = None, sha256: str | None = None) -> Manifest:
    """A manifest for a file used in place: named after its stem (a link's own name, not its target's)."""
    given_stem = path.stem
    path = path.expanduser().resolve()
    return Manifest(
        name=name or given_stem,
        source=f"file:{path}",
        format="gguf",
        files=(ModelFile(path=path, size=path.stat().st_size, sha256=sha256),),
        quantization=None,
        created=int(path.stat().st_mtime),
    )


def onnx_manifest(
    folder: Path,
    *,
    name: str | None = None,
    source: str | None = None,
    quantization: str | None = None,
    owned: bool = False,
) -> Manifest:
    """A manifest for an onnxruntime-genai model folder: every file in it, ``genai_config.json`` first (the path a
    backend is given). ``owned`` files (a converted model's) are deleted with the model; a folder used in place
    (named after itself, source ``file:<folder>``) is never touched."""
    return _folder_manifest(folder, ONNX_CONFIG, "onnx", name, source, quantization, owned)


def is_hf_folder(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face model folder: a ``config.json`` and safetensors weights (or the
    ``rank<N>.engine`` files of a built TensorRT-LLM engine, which an engine process serves alike)."""
    return (path / HF_CONFIG).is_file() and (any(path.glob("*.safetensors")) or any(path.glob("rank*.engine")))


def hf_manifest(folder: Path, *, name: str | None = None, source: str | None = None) -> Manifest:
    """A manifest for a Hugging Face (safetensors) model folder used in place, which vLLM serves: the files at its
    top level, ``config.json`` first (so ``path`` is the config and ``path.parent`` the folder). Its files are
    never deleted by localinfer."""
    return _folder_manifest(folder, HF_CONFIG, "hf", name, source, None, owned=False)


def _folder_manifest(
    folder: Path, config: str, fmt: str, name: str | None, source: str | None, quantization: str | None, owned: bool
) -> Manifest:
    """Every file at the top of ``folder``, ``config`` first; named after the folder, from ``file:<folder>``,
    unless told otherwise."""
    folder = folder.expanduser().resolve()
    files = sorted((f for f in folder.iterdir() if f.is_file()), key=lambda f: (f.name != config, f.name))
    return Manifest(
        name=name or folder.name,
        source=source or f"file:{folder}",
        format=fmt,
        files=tuple(ModelFile(path=f, size=f.stat().st_size, sha256=None, owned=owned) for f in files),
        quantization=quantization,
        created=int((folder / config).stat().st_mtime),
    )


def _is_gguf(path: Path) -> bool:
    """Whether the file starts with GGUF's magic (blobs such as Ollama's have no .gguf suffix)."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _remove_cached_file(pointer: Path) -> None:
    """Delete a snapshot link and, when no other snapshot of its repository links to it, its blob."""
    if not pointer.is_symlink():
        pointer.unlink(missing_ok=True)
        return
    blob = pointer.resolve()
    pointer.unlink()
    snapshots = next((p for p in pointer.parents if p.name == "snapshots"), None)
    if snapshots is not None:
        for other in snapshots.rglob("*"):
            if other.is_symlink() and other.resolve() == blob:
                return
    blob.unlink(missing_ok=True)
