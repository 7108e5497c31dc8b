"""Every model localinfer can serve: the store's registered models, then models other tools keep on disk.

The store comes first: a registered name always wins, and a model of another tool whose file a registered
model already uses is not listed twice. Other tools' models are found by ``discover`` each time they are
listed or looked up, so a model pulled with Ollama a minute ago is there without a rescan command.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from localinfer.config import Settings
from localinfer.errors import ModelManagedElsewhere, ModelNotFound
from localinfer.models.discover import DiscoveryRoots, default_roots, discover
from localinfer.models.store import Manifest, ModelStore

log = logging.getLogger(__name__)
MADE_HERE = ("create:", "copy:")  # the sources of models made from others here (models/create.py)

_OWNERS = {
    "ollama": "Ollama's store (use 'ollama rm')",
    "hf-cache": "the Hugging Face cache (use 'hf cache rm')",
    "lmstudio": "LM Studio's models folder",
    "dir": "a folder named in the model_dirs setting",
}


class ModelLibrary:
    """The store plus discovered models. ``roots=None`` turns discovery off."""

    def __init__(self, store: ModelStore, roots: DiscoveryRoots | None) -> None:
        self.store = store
        self.roots = roots

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelLibrary:
        """The store under ``settings.home``; discovery in the usual places and ``settings.model_dirs``."""
        roots = default_roots(settings.model_dirs, os.environ, Path.home()) if settings.discover else None
        return cls(ModelStore(settings.models_dir), roots)

    def discovered(self) -> list[Manifest]:
        """Models of other tools that no registered model already covers (by name or by file)."""
        if self.roots is None:
            return []
        registered = self.store.list()
        names = {m.name for m in registered}
        # a model made or copied from another (create, cp) does not stand for the one it was made from
        seen = {_real(f.path) for m in registered if not m.source.startswith(MADE_HERE) for f in m.files}
        found = []
        for manifest in discover(self.roots):
            main = _real(manifest.path)
            if manifest.name in names or main in seen:
                continue
            seen.add(main)
            found.append(manifest)
        return found

    def list(self) -> list[Manifest]:
        """Registered models sorted by name, then discovered ones in discovery order."""
        return [*self.store.list(), *self.discovered()]

    def resolve(self, ref: str) -> Manifest:
        """A registered name, the path of a GGUF file, or a discovered model's name (in that order; the disk
        scan runs only when the first two fail).

        Raises ModelNotFound otherwise.
        """
        try:
            return self.store.resolve(ref)
        except ModelNotFound:
            found = next((m for m in self.discovered() if m.name == ref), None)
            if found is None:
                raise
            return found

    def find(self, name: str) -> Manifest | None:
        """The model listed as ``name`` (registered, else discovered), by name only: never a path."""
        found = self.store.get(name)
        if found is None:
            found = next((m for m in self.discovered() if m.name == name), None)
        return found

    def removable(self, name: str) -> Manifest:
        """The registered manifest ``remove(name)`` would remove; checks without changing anything.

        Raises ModelNotFound, and ModelManagedElsewhere for another tool's model, which localinfer only lists.
        """
        manifest = self.store.get(name)
        if manifest is not None:
            return manifest
        found = next((m for m in self.discovered() if m.name == name), None)
        if found is not None:
            owner = _OWNERS.get(found.source.split(":", 1)[0], "another tool's folder")
            raise ModelManagedElsewhere(
                f"{name} is not registered with localinfer: it lives in {owner}",
                hint="localinfer only lists it; remove it with the tool that manages it",
            )
        raise ModelNotFound(name, hint="run 'localinfer ls' to see the models here")

    def remove(self, name: str) -> int:
        """Unregister ``name`` and delete the files only it uses (its projector's too); the bytes freed (0 when its
        files were kept).

        Raises ModelNotFound, and ModelManagedElsewhere for another tool's model, which localinfer only lists.
        """
        manifest = self.removable(name)
        present = [f for f in manifest.every_file if f.path.exists()]
        self.store.remove(name)
        return sum(f.size for f in present if not f.path.exists())


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


LATEST_TAG = ":latest"


def ollama_name(name: str) -> str:
    """``name`` as Ollama lists names, always with a tag: ``smollm2`` is ``smollm2:latest``; a name whose last
    part has a tag already (``org/repo:Q4_K_M``) is itself. Either form resolves (``ServedModels.resolve``)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + LATEST_TAG


def untagged(name: str) -> str:
    """``name`` without Ollama's ``:latest`` tag."""
    return name.removesuffix(LATEST_TAG) if name != LATEST_TAG else name


class ServedModels:
    """The models a server answers for, by name only: what the library lists, and the model it was started with.

    A name from the network never becomes a path (CVE-2024-37032 was a client's path made into a file path):
    ``resolve`` looks names up in the library's lists and nowhere else, so an unknown name, a path, ``~user``
    or ``..`` all get the same ModelNotFound, whether or not such a file exists. ``served`` (the model the
    command line named, perhaps as a path, perhaps under ``--alias``) answers to its own name; ``original`` is
    the name it is listed under in the library, hidden while it is served under another one, and ``served``
    goes away with it when that model is removed.
    """

    def __init__(self, library: ModelLibrary, served: Manifest | None = None, *, original: str | None = None) -> None:
        self._library = library
        self._served = served
        self._original = original if original is not None else (served.name if served is not None else None)
        listed = library.find(self._original) if self._original is not None else None
        self._listed = served is not None and listed is not None and listed.path == served.path

    def _served_model(self) -> Manifest | None:
        """The served manifest, unless it came from the library and has been removed from it since."""
        if self._served is None:
            return None
        if self._listed and self._original is not None and self._library.find(self._original) is None:
            return None
        return self._served

    def list(self) -> list[Manifest]:
        served = self._served_model()
        if served is None:
            return self._library.list()
        hidden = {served.name, self._original}
        return [served, *(m for m in self._library.list() if m.name not in hidden)]

    def resolve(self, ref: str) -> Manifest:
        """The model named ``ref``, or by ``ref`` without an Ollama ``:latest`` tag (Open WebUI and Ollama's
        clients append it to a name listed without a tag); raises ModelNotFound for anything else, with the same
        message for every name."""
        try:
            return self._resolve(ref)
        except ModelNotFound:
            if not ref.endswith(LATEST_TAG) or ref == LATEST_TAG:
                raise
        try:
            return self._resolve(ref.removesuffix(LATEST_TAG))
        except ModelNotFound:
            raise ModelNotFound(ref) from None

    def _resolve(self, ref: str) -> Manifest:
        served = self._served_model()
        if served is not None and ref == served.name:
            return served
        hidden = served is not None and ref == self._original and ref != served.name
        found = None if hidden else self._library.find(ref)
        if found is None:
            raise ModelNotFound(ref)
        return found
