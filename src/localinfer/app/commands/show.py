"""``localinfer show MODEL``: what a model's GGUF file, or an ONNX or Hugging Face folder's config, says about it,
as text, as JSON, or its chat template."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.lineage import lineage_json, lineage_text
from localinfer.app.commands.projector_facts import (
    Seen,
    projector_capabilities,
    projector_json,
    projector_of,
    projector_section,
)
from localinfer.app.commands.render import format_parameters, row, section
from localinfer.errors import LocalInferError
from localinfer.models import metadata

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.models.metadata import FolderFacts, GGUFInfo
    from localinfer.models.store import Manifest
    from localinfer.types import ThinkingMarkers

_MB = 1_000_000
_NO_TEMPLATE = "no chat template: a fallback is used (ChatML or a plain transcript)"


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "show",
        help="show a model's architecture, parameters, capabilities, license and files",
        description="Show what a model's GGUF file (or an ONNX or Hugging Face folder's config) says about it: "
        "architecture, parameters, capabilities, license, source and files.",
    )
    p.add_argument("model", help="a registered model name, the path of a .gguf file or of a model folder")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    output.add_argument("--template", action="store_true", help="print only the model's chat template")
    output.add_argument("--modelfile", action="store_true", help="print the Modelfile that makes the model again")
    output.add_argument("--parameters", action="store_true", help="print only the model's parameters (a Modelfile's)")
    output.add_argument("--system", action="store_true", help="print only the model's system prompt (a Modelfile's)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Print the model's facts; exit status 0.

    Raises ModelNotFound for a model that is neither registered nor a GGUF file or model folder, ModelLoadError
    for a file that is corrupt or truncated or a folder whose config cannot be read, and LocalInferError for
    ``--template`` on a model without a chat template.
    """
    manifest = _resolve(settings, args.model)
    if args.modelfile or args.parameters or args.system:
        print(_modelfile_part(manifest, args), end="")
        return 0
    folder = metadata.read_folder_facts(manifest.path) if manifest.format != "gguf" else None
    if args.template:
        template = manifest.defaults.template
        if template is None:
            template = metadata.read_chat_template(manifest.path) if folder is None else folder.chat_template
        if template is None:
            raise LocalInferError(
                f"model '{manifest.name}' has no chat template",
                hint="chat with this model uses a fallback format (ChatML or a plain transcript)",
            )
        print(template, end="" if template.endswith("\n") else "\n")
        return 0
    if folder is None:
        info = metadata.read_gguf_info(manifest.path)
        thinking = metadata.read_gguf_thinking(manifest.path)
        seen = projector_of(manifest)
        if args.json:
            facts = as_json(manifest, info, thinking) | projector_json(seen, info) | lineage_json(settings, manifest)
            facts["capabilities"] += [sense for sense, _ in projector_capabilities(seen)]
            print(json.dumps(facts, indent=2))
        else:
            print(render(manifest, info, thinking, seen) + lineage_text(settings, manifest))
    else:
        thinking = metadata.read_folder_thinking(manifest.path)
        shown = folder_as_json(manifest, folder, thinking) if args.json else None
        print(json.dumps(shown, indent=2) if shown is not None else render_folder(manifest, folder, thinking))
    return 0


def _modelfile_part(manifest: Manifest, args: argparse.Namespace) -> str:
    """The Modelfile, or its parameters or system prompt, as ``ollama show`` prints them."""
    from localinfer.models.modelfile import of_model, parameter_lines

    if args.modelfile:
        return of_model(manifest)
    text = parameter_lines(manifest.defaults) if args.parameters else (manifest.defaults.system or "")
    return text + "\n" if text else ""


def _resolve(settings: Settings, name: str) -> Manifest:
    """The manifest of a model name (registered, or another tool's found on disk), a GGUF file or a model folder.

    Raises ModelNotFound.
    """
    from localinfer.models.library import ModelLibrary

    return ModelLibrary.from_settings(settings).resolve(name)


def capabilities(info: GGUFInfo | FolderFacts, thinking: ThinkingMarkers | None = None) -> list[str]:
    """What the model can be asked to do: always ``completion`` and ``chat``, ``insert`` when it has FIM, and
    ``thinking`` for a reasoning model (its file's markers, ``thinking``)."""
    fim = isinstance(info, metadata.GGUFInfo) and info.fim
    return ["completion", "chat", *(["insert"] if fim else []), *(["thinking"] if thinking else [])]


def _thinking_row(thinking: ThinkingMarkers | None) -> list[tuple[str, str | None]]:
    if thinking is None:
        return []
    return [("thinking", f"reasons before it answers, between {thinking.open} and {thinking.close}")]


def _markers_json(thinking: ThinkingMarkers | None) -> list[str] | None:
    return [thinking.open, thinking.close] if thinking else None


def as_json(manifest: Manifest, info: GGUFInfo, thinking: ThinkingMarkers | None = None) -> dict[str, Any]:
    """The facts ``render`` shows, as raw values (None where the file does not state one)."""
    return {
        "name": manifest.name,
        "format": manifest.format,
        "architecture": info.architecture,
        "parameters": info.parameters,
        "size_label": info.size_label,
        "basename": info.basename,
        "general_name": info.name,
        "quantization": info.quantization or manifest.quantization,
        "context_length": info.context_length,
        "embedding_length": info.embedding_length,
        "block_count": info.block_count,
        "head_count": info.head_count,
        "head_count_kv": info.head_count_kv,
        "capabilities": capabilities(info, thinking),
        "has_chat_template": info.has_chat_template,
        "fim": info.fim,
        "thinking_markers": _markers_json(thinking),
        "license": info.license,
        "source": manifest.source,
        "split_count": info.split_count,
        "files": _files_json(manifest),
    }


def folder_as_json(manifest: Manifest, facts: FolderFacts, thinking: ThinkingMarkers | None = None) -> dict[str, Any]:
    """The facts ``render_folder`` shows, as raw values (None where the config does not state one)."""
    return {
        "name": manifest.name,
        "format": manifest.format,
        "architecture": facts.architecture,
        "parameters": facts.parameters,
        "quantization": manifest.quantization or facts.quantization,
        "context_length": facts.context_length,
        "embedding_length": facts.embedding_length,
        "block_count": facts.block_count,
        "head_count": facts.head_count,
        "head_count_kv": facts.head_count_kv,
        "vocab_size": facts.vocab_size,
        "capabilities": capabilities(facts, thinking),
        "has_chat_template": facts.has_chat_template,
        "thinking_markers": _markers_json(thinking),
        "source": manifest.source,
        "files": _files_json(manifest),
    }


def render(
    manifest: Manifest, info: GGUFInfo, thinking: ThinkingMarkers | None = None, seen: Seen | None = None
) -> str:
    """The facts as indented sections (Model, Capabilities, Projector, License, Source, Files); unknown facts are
    left out."""
    model: list[tuple[str, str | None]] = [
        ("name", manifest.name),
        ("format", manifest.format),
        ("architecture", info.architecture),
        ("parameters", format_parameters(info.parameters) if info.parameters is not None else info.size_label),
        ("quantization", info.quantization or manifest.quantization),
        ("context length", _str_or_none(info.context_length)),
        ("embedding length", _str_or_none(info.embedding_length)),
        ("layers", _str_or_none(info.block_count)),
        ("attention heads", _heads(info.head_count, info.head_count_kv)),
    ]
    chat = "the file has a chat template" if info.has_chat_template else _NO_TEMPLATE
    caps: list[tuple[str, str | None]] = [("completion", None), ("chat", chat)]
    if info.fim:
        caps.append(("insert (FIM)", "fill-in-the-middle tokens"))
    caps += _thinking_row(thinking)
    caps += projector_capabilities(seen)
    projector = projector_section(seen, info)
    return _layout(manifest, model, caps, info.license or "not stated in the file", projector)


def render_folder(manifest: Manifest, facts: FolderFacts, thinking: ThinkingMarkers | None = None) -> str:
    """A folder model's facts in ``render``'s sections, less License (configs do not state one)."""
    model: list[tuple[str, str | None]] = [
        ("name", manifest.name),
        ("format", manifest.format),
        ("architecture", facts.architecture),
        ("parameters", format_parameters(facts.parameters) if facts.parameters is not None else None),
        ("quantization", manifest.quantization or facts.quantization),
        ("context length", _str_or_none(facts.context_length)),
        ("embedding length", _str_or_none(facts.embedding_length)),
        ("layers", _str_or_none(facts.block_count)),
        ("attention heads", _heads(facts.head_count, facts.head_count_kv)),
        ("vocabulary size", _str_or_none(facts.vocab_size)),
    ]
    chat = "the folder has a chat template" if facts.has_chat_template else _NO_TEMPLATE
    return _layout(manifest, model, [("completion", None), ("chat", chat), *_thinking_row(thinking)], None)


def _layout(
    manifest: Manifest,
    model: list[tuple[str, str | None]],
    caps: list[tuple[str, str | None]],
    license: str | None,
    projector: list[str] | None = None,
) -> str:
    files = [f"{f.path}  {f.size / _MB:.1f} MB" for f in manifest.every_file]
    lines = [
        *section("Model", [row(label, value) for label, value in model if value is not None]),
        *section("Capabilities", [row(label, value) for label, value in caps]),
        *(section("Projector", projector) if projector else []),
        *(section("License", [license]) if license is not None else []),
        *section("Source", [manifest.source]),
        *section("Files", files),
    ]
    return "\n".join(lines).rstrip("\n")


def _files_json(manifest: Manifest) -> list[dict[str, Any]]:
    return [{"path": str(f.path), "size": f.size, "sha256": f.sha256} for f in manifest.every_file]


def _heads(head_count: int | None, head_count_kv: int | None) -> str | None:
    if head_count is None:
        return None
    if head_count_kv is None or head_count_kv == head_count:
        return str(head_count)
    return f"{head_count} ({head_count_kv} for keys and values)"


def _str_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)
