"""Find GGUF models other tools already downloaded, and describe them as unregistered Manifests used in place.

Looks in Ollama's store, the Hugging Face hub cache, LM Studio's model folders and folders the user named.
It reads directory listings, Ollama manifests and GGUF headers only: nothing is copied, moved or written.
A multimodal projector is never a model of its own: an ``mmproj*.gguf`` beside a model file (in its folder or one
above it, the one closest to its precision, as ``llama-server -hf`` picks in a repository) is the model's projector,
and so is an Ollama model's projector layer.
Directory symlinks are not followed while walking (no loops); file symlinks are (HF snapshots are links).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from localinfer.errors import LocalInferError
from localinfer.models.files import FileGroup, group_model_files, quant_label, split_prefix
from localinfer.models.metadata import cached_gguf_info, cached_projector_info
from localinfer.models.ollama_layers import with_ollama_layers
from localinfer.models.projector import best_projector
from localinfer.models.store import Manifest, ModelFile, is_valid_name

log = logging.getLogger(__name__)

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_OLLAMA_REGISTRY = "registry.ollama.ai"
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class DiscoveryRoots:
    """Where to look. ``None`` or an empty tuple means: do not look there."""

    hf_cache: Path | None  # the Hugging Face hub cache folder (models--org--name/...)
    ollama: Path | None  # Ollama's models folder (manifests/ and blobs/)
    lmstudio: tuple[Path, ...]  # LM Studio model folders (<publisher>/<repo>/<file>.gguf)
    extra: tuple[Path, ...]  # folders the user named in settings, scanned recursively


def default_roots(model_dirs: Sequence[Path], environ: Mapping[str, str], user_home: Path) -> DiscoveryRoots:
    """The folders each tool uses by default, given ``environ`` and the user's home; reads no disk.

    HF: ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. Ollama: ``$OLLAMA_MODELS``, else
    ``~/.ollama/models``. LM Studio: ``~/.lmstudio/models`` and the older ``~/.cache/lm-studio/models``.
    ``extra`` is ``model_dirs``. Empty variables count as unset; a leading ``~`` means ``user_home``.
    """

    def env(key: str) -> Path | None:
        value = environ.get(key, "")
        return _expand(value, user_home) if value else None

    hf = env("HF_HUB_CACHE") or env("HUGGINGFACE_HUB_CACHE")
    if hf is None:
        hf_home = env("HF_HOME") or (env("XDG_CACHE_HOME") or user_home / ".cache") / "huggingface"
        hf = hf_home / "hub"
    return DiscoveryRoots(
        hf_cache=hf,
        ollama=env("OLLAMA_MODELS") or user_home / ".ollama" / "models",
        lmstudio=(user_home / ".lmstudio" / "models", user_home / ".cache" / "lm-studio" / "models"),
        extra=tuple(_expand(str(d), user_home) for d in model_dirs),
    )


def discover(roots: DiscoveryRoots) -> list[Manifest]:
    """Every GGUF model found under ``roots``, as unregistered Manifests, ordered ollama, hf cache, lmstudio, extra.

    A name already taken by an earlier entry is skipped (debug log). Never raises for missing or unreadable
    folders, malformed manifests, broken symlinks or corrupt GGUF files: those are skipped with a warning.
    """
    scans: list[tuple[str, Path, Callable[[Path], Iterator[Manifest]]]] = []
    if roots.ollama is not None:
        scans.append(("ollama", roots.ollama, _scan_ollama))
    if roots.hf_cache is not None:
        scans.append(("hf cache", roots.hf_cache, _scan_hf_cache))
    scans += [("lmstudio", root, _scan_lmstudio) for root in roots.lmstudio]
    scans += [("extra", root, _scan_extra) for root in roots.extra]
    found: dict[str, Manifest] = {}
    for kind, root, scan in scans:
        if not _is_dir(root):
            log.debug("no %s folder at %s", kind, root)
            continue
        try:
            for manifest in scan(root):
                if manifest.name in found:
                    taken_by = found[manifest.name].source
                    log.debug("skipping %s from %s: the name is taken by %s", manifest.name, manifest.source, taken_by)
                    continue
                found[manifest.name] = manifest
        except OSError as exc:  # a safety net: scanners already skip what they cannot read
            log.warning("stopped scanning %s folder %s: %s", kind, root, exc)
    return list(found.values())


# -- Ollama ----------------------------------------------------------------------------------------------


def _scan_ollama(root: Path) -> Iterator[Manifest]:
    """Models of ``<root>/manifests/<host>/<namespace>/<model>/<tag>``, each the blob of its model layer."""
    manifests = root / "manifests"
    for path in _walk_files(manifests):
        parts = path.relative_to(manifests).parts
        if len(parts) != 4:
            log.debug("ignoring %s: not at manifests/<host>/<namespace>/<model>/<tag>", path)
            continue
        host, namespace, model, tag = parts
        if host == _OLLAMA_REGISTRY:
            name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
        else:
            name = f"{host}/{namespace}/{model}:{tag}"
        layers = _ollama_layers(path)
        if layers is None:
            continue
        model_layer, projector_layer = layers
        blob = _ollama_blob(root, name, *model_layer)
        if blob is None:
            continue
        paired = _ollama_blob(root, name, *projector_layer) if projector_layer is not None else None
        projector = (paired, projector_layer[0]) if paired is not None and projector_layer is not None else None
        manifest = _manifest(name, f"ollama:{path}", [blob], [model_layer[0]], projector=projector)
        if manifest is not None:
            yield with_ollama_layers(manifest, root, path)  # its template, system, params... as Ollama runs it


def _ollama_blob(root: Path, name: str, digest: str, size: int) -> Path | None:
    """The blob of a layer, when it is there with the layer's size (else logged)."""
    blob = root / "blobs" / f"sha256-{digest}"
    if (stat := _stat(blob)) is None or stat.st_size != size:
        log.warning("skipping Ollama model %s's blob %s: it is missing or not %d bytes", name, blob, size)
        return None
    return blob


def _ollama_layers(path: Path) -> tuple[tuple[str, int], tuple[str, int] | None] | None:
    """(sha256 hex, size) of the manifest's model layer and of its first projector layer (None when it has none);
    None (logged) when the manifest cannot say."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        found: dict[str, tuple[str, int]] = {}
        for layer in data["layers"]:
            kind = layer["mediaType"]
            if kind in (_OLLAMA_MODEL_LAYER, _OLLAMA_PROJECTOR_LAYER) and kind not in found:
                algo, _, digest = str(layer["digest"]).partition(":")
                size = layer["size"]
                if algo != "sha256" or not _SHA256_RE.match(digest) or not isinstance(size, int):
                    raise ValueError(f"bad layer digest or size: {layer['digest']!r}, {size!r}")
                found[kind] = (digest, size)
        if _OLLAMA_MODEL_LAYER in found:
            return found[_OLLAMA_MODEL_LAYER], found.get(_OLLAMA_PROJECTOR_LAYER)
        log.warning("skipping Ollama manifest %s: it has no model layer", path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("skipping malformed Ollama manifest %s: %s", path, exc)
    return None


# -- Hugging Face cache ----------------------------------------------------------------------------------


def _scan_hf_cache(root: Path) -> Iterator[Manifest]:
    """Models in the snapshots named by a ref of each ``models--<org>--<name>`` (every snapshot when no refs)."""
    for repo_dir in _subdirs(root):
        if not repo_dir.name.startswith("models--"):
            continue
        repo_id = repo_dir.name.removeprefix("models--").replace("--", "/")
        for commit in _hf_commits(repo_dir):
            snapshot = repo_dir / "snapshots" / commit
            files = _walk_files(snapshot)
            for group, label in _labelled(_complete_groups(snapshot, files)):
                paths = [snapshot / p for p in group.paths]
                hashes = [_hf_blob_sha256(p) for p in paths]
                source = f"hf-cache:{repo_id}@{commit}"
                found = _projector(snapshot, files, group)
                projector = (found, _hf_blob_sha256(found)) if found is not None else None
                name = f"hf.co/{repo_id}:{label}"
                yield from _optional(_manifest(name, source, paths, hashes, revision=commit, projector=projector))


def _hf_commits(repo_dir: Path) -> list[str]:
    """Snapshot folder names to scan: the commits refs/ names (refs/main first), else every snapshot."""
    refs_dir = repo_dir / "refs"
    refs = sorted(_walk_files(refs_dir), key=lambda p: (p.relative_to(refs_dir).as_posix() != "main", p))
    commits: list[str] = []
    for ref in refs:
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable ref %s: %s", ref, exc)
            continue
        if not commit or "/" in commit or commit.startswith("."):
            log.warning("ignoring ref %s: %r is not a commit", ref, commit)
        elif not _is_dir(repo_dir / "snapshots" / commit):
            log.debug("ignoring ref %s: no snapshot %s", ref, commit)
        elif commit not in commits:
            commits.append(commit)
    if refs:
        return commits
    return [d.name for d in sorted(_subdirs(repo_dir / "snapshots"), key=lambda d: (-_mtime(d), d.name))]


def _hf_blob_sha256(path: Path) -> str | None:
    """The sha256 a snapshot link's blob name states (LFS blobs are named by it), else None."""
    blob_name = Path(os.path.realpath(path)).name
    return blob_name if _SHA256_RE.match(blob_name) else None


# -- LM Studio and extra folders -------------------------------------------------------------------------


def _scan_lmstudio(root: Path) -> Iterator[Manifest]:
    """Models at ``<root>/<publisher>/<repo>/[<folder>/]<file>.gguf``, named ``lmstudio/<publisher>/<repo>:<label>``."""
    for publisher in _subdirs(root):
        for repo in _subdirs(publisher):
            files = [f for f in _walk_files(repo) if len(f.relative_to(repo).parts) <= 2]
            for group, label in _labelled(_complete_groups(repo, files)):
                paths = [repo / p for p in group.paths]
                name = f"lmstudio/{publisher.name}/{repo.name}:{label}"
                found = _projector(repo, files, group)
                projector = (found, None) if found is not None else None
                yield from _optional(_manifest(name, f"lmstudio:{paths[0]}", paths, projector=projector))


def _scan_extra(root: Path) -> Iterator[Manifest]:
    """Every GGUF model under ``root``, recursively, named after its file stem made safe."""
    files = _walk_files(root)
    for group in _complete_groups(root, files):
        paths = [root / p for p in group.paths]
        name = _UNSAFE_NAME_CHARS.sub("-", _stem(group.main)).lstrip(".-")
        found = _projector(root, files, group)
        projector = (found, None) if found is not None else None
        yield from _optional(_manifest(name, f"dir:{paths[0]}", paths, projector=projector))


# -- shared ----------------------------------------------------------------------------------------------


def _complete_groups(base: Path, files: list[Path]) -> list[FileGroup]:
    """The model groups among ``files``, as paths relative to ``base``; incomplete split groups are logged."""
    rel = [f.relative_to(base).as_posix() for f in files if not f.name.endswith(".incomplete")]
    groups = []
    for group in group_model_files(rel):
        if group.complete:
            groups.append(group)
        else:
            log.warning("skipping split model %s: some of its parts are missing", base / group.main)
    return groups


def _projector(base: Path, files: list[Path], group: FileGroup) -> Path | None:
    """The projector among ``files`` (under ``base``) that goes with the model ``group``, as llama.cpp picks one in a
    repository; None when there is none."""
    rel = [f.relative_to(base).as_posix() for f in files if not f.name.endswith(".incomplete")]
    chosen = best_projector(rel, group.main)
    return base / chosen if chosen is not None else None


def _labelled(groups: list[FileGroup]) -> list[tuple[FileGroup, str]]:
    """Each group with its name's tag: its quantization when unique among ``groups``, else its file stem."""
    counts = Counter(g.quant for g in groups)
    return [(g, g.quant if g.quant is not None and counts[g.quant] == 1 else _stem(g.main)) for g in groups]


def _stem(path: str) -> str:
    """The file name without the split suffix and ``.gguf``: ``a/M-Q8_0-00001-of-00002.gguf`` -> ``M-Q8_0``."""
    name = PurePosixPath(split_prefix(path) or path).name
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def _manifest(
    name: str,
    source: str,
    paths: list[Path],
    sha256s: list[str | None] | None = None,
    revision: str | None = None,
    projector: tuple[Path, str | None] | None = None,
) -> Manifest | None:
    """A Manifest for ``paths`` (main file first) and its ``projector`` (path and sha256), or None when the name is
    invalid or a file is unusable. A projector that is not one is left out, with a warning."""
    hashes = sha256s if sha256s is not None else [None] * len(paths)
    if not is_valid_name(name):
        log.debug("skipping %s: %r cannot be a model name", source, name)
        return None
    try:
        stats = [p.stat() for p in paths]
        quantization = cached_gguf_info(paths[0]).quantization
        for part in paths[1:]:
            with part.open("rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise ValueError(f"{part} is not a GGUF file")
    except (LocalInferError, OSError, ValueError) as exc:
        log.warning("skipping %s (%s): %s", name, source, getattr(exc, "message", exc))
        return None
    return Manifest(
        name=name,
        source=source,
        format="gguf",
        files=tuple(ModelFile(path=p, size=s.st_size, sha256=h) for p, s, h in zip(paths, stats, hashes, strict=True)),
        quantization=quantization or quant_label(paths[0].name),
        created=int(stats[0].st_mtime),
        revision=revision,
        projector=_projector_file(name, *projector) if projector is not None else None,
    )


def _projector_file(name: str, path: Path, sha256: str | None) -> ModelFile | None:
    try:
        size = path.stat().st_size
        cached_projector_info(path)
    except (LocalInferError, OSError) as exc:
        log.warning("%s's projector %s is left out: %s", name, path, getattr(exc, "message", exc))
        return None
    return ModelFile(path=path, size=size, sha256=sha256)


def _optional(manifest: Manifest | None) -> Iterator[Manifest]:
    if manifest is not None:
        yield manifest


def _walk_files(root: Path) -> list[Path]:
    """Every non-directory entry under ``root`` (file links included, even broken ones), sorted; [] if absent.

    Directory links are not followed, so link loops cannot trap the walk; unreadable folders are logged.
    """

    def onerror(exc: OSError) -> None:
        if not isinstance(exc, FileNotFoundError) or exc.filename != str(root):
            log.warning("cannot read %s: %s", exc.filename, exc.strerror or exc)

    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        dirnames.sort()
        out += (Path(dirpath) / f for f in sorted(filenames))
    return out


def _subdirs(path: Path) -> list[Path]:
    """The sub-folders of ``path`` (links to folders included), sorted by name; [] when it cannot be listed."""
    try:
        with os.scandir(path) as entries:
            return sorted(Path(e.path) for e in entries if _entry_is_dir(e))
    except OSError as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning("cannot read %s: %s", path, exc)
        return []


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _entry_is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _mtime(path: Path) -> float:
    stat = _stat(path)
    return stat.st_mtime if stat is not None else 0.0


def _expand(value: str, user_home: Path) -> Path:
    """``value`` as a path, with a leading ``~`` meaning ``user_home`` (the real environment is not read)."""
    if value == "~" or value.startswith("~/"):
        return user_home / value[2:]
    return Path(value)
