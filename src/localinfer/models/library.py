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
        seen = {_real(f.path) for m in registered for f in m.files}
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

    def remove(self, name: str) -> int:
        """Unregister ``name`` and delete the files only it uses; the bytes freed (0 when its files were kept).

        Raises ModelNotFound, and ModelManagedElsewhere for another tool's model, which localinfer only lists.
        """
        manifest = self.store.get(name)
        if manifest is None:
            found = next((m for m in self.discovered() if m.name == name), None)
            if found is not None:
                owner = _OWNERS.get(found.source.split(":", 1)[0], "another tool's folder")
                raise ModelManagedElsewhere(
                    f"{name} is not registered with localinfer: it lives in {owner}",
                    hint="localinfer only lists it; remove it with the tool that manages it",
                )
            raise ModelNotFound(name, hint="run 'localinfer ls' to see the models here")
        present = [f for f in manifest.files if f.path.exists()]
        self.store.remove(name)
        return sum(f.size for f in present if not f.path.exists())


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


class Aliased:
    """A model source where ``manifest`` is known by another name (``serve --alias``), and by that name only."""

    def __init__(self, source: ModelLibrary, original: str, manifest: Manifest) -> None:
        self._source = source
        self._original = original
        self.manifest = manifest

    def list(self) -> list[Manifest]:
        return [self.manifest, *(m for m in self._source.list() if m.name != self._original)]

    def resolve(self, ref: str) -> Manifest:
        if ref == self.manifest.name:
            return self.manifest
        return self._source.resolve(ref)
