"""The layers of a model in Ollama's store besides its weights: its template, system prompt, parameters, messages,
license and LoRA adapters, read so that the model runs here as it runs in Ollama.

A layer that cannot be used is skipped with a warning, and the model is still listed: a template that cannot be
translated to Jinja (the GGUF's own is used), a parameter localinfer does not honour (Ollama's runtime settings,
``mirostat``...), an unreadable blob.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

from localinfer.models.defaults import PARAMETERS, ModelDefaults, typed_parameter
from localinfer.models.gotemplate import NotTranslatable, to_jinja
from localinfer.models.store import Manifest, ModelFile

log = logging.getLogger(__name__)

_MEDIA = "application/vnd.ollama.image."
_SHA256 = re.compile(r"sha256:([0-9a-f]{64})")


def with_ollama_layers(manifest: Manifest, root: Path, manifest_path: Path) -> Manifest:
    """``manifest`` (an Ollama model's weights) with the defaults and adapters its Ollama manifest's layers hold."""
    try:
        layers = json.loads(manifest_path.read_text(encoding="utf-8"))["layers"]
    except (OSError, ValueError, KeyError, TypeError):
        return manifest  # the weights were read from it a moment ago: a race with ollama rm, nothing more to add
    found: dict[str, Any] = {}
    adapters: list[ModelFile] = []
    for layer in layers if isinstance(layers, list) else []:
        kind = str(layer.get("mediaType", "")).removeprefix(_MEDIA) if isinstance(layer, dict) else ""
        digest = _SHA256.fullmatch(str(layer.get("digest", ""))) if isinstance(layer, dict) else None
        if kind in ("model", "projector") or digest is None:
            continue
        blob = root / "blobs" / f"sha256-{digest.group(1)}"
        try:
            if kind == "adapter":
                adapters.append(ModelFile(path=blob, size=blob.stat().st_size, sha256=digest.group(1)))
            elif kind in ("template", "prompt", "system", "license"):
                found.setdefault(kind, []).append(blob.read_text(encoding="utf-8"))
            elif kind in ("params", "messages"):
                found[kind] = json.loads(blob.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("ignoring the %s layer of Ollama model %s: %s", kind, manifest.name, exc)
    defaults = ModelDefaults(
        system=found["system"][-1] if "system" in found else None,
        template=_template(manifest.name, [*found.get("prompt", ()), *found.get("template", ())]),
        parameters=_parameters(manifest.name, found.get("params")),
        messages=_messages(manifest.name, found.get("messages")),
        license=tuple(found.get("license", ())),
    )
    return dataclasses.replace(manifest, defaults=defaults, adapters=tuple(adapters))


def _template(name: str, texts: list[str]) -> str | None:
    if not texts:
        return None
    try:
        return to_jinja(texts[-1])
    except NotTranslatable as exc:
        log.warning("Ollama model %s: %s; its GGUF's own chat template is used", name, exc)
        return None


def _parameters(name: str, data: Any) -> tuple[tuple[str, Any], ...]:
    if not isinstance(data, dict):
        return ()
    kept = []
    for key, value in data.items():
        if key not in PARAMETERS:
            log.info("Ollama model %s: parameter %s is not honoured here", name, key)
            continue
        try:
            kept.append((key, typed_parameter(key, value)))
        except ValueError as exc:
            log.warning("Ollama model %s: ignoring parameter %s: %s", name, key, exc)
    return tuple(sorted(kept))


def _messages(name: str, data: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(data, list):
        return ()
    try:
        return tuple((str(m["role"]), str(m.get("content") or "")) for m in data)
    except (KeyError, TypeError, AttributeError):
        log.warning("Ollama model %s: ignoring its messages layer: not a list of messages", name)
        return ()
