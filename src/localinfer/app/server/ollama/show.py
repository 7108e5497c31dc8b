"""``POST /api/show {"model", "verbose"}``: what Zed, Continue and Copilot Chat's Ollama provider read to decide
how to use a model, in Ollama's shape.

- ``details``: as /api/tags gives them.
- ``model_info``: the GGUF file's metadata keys with their values (``general.architecture``,
  ``<arch>.context_length``, ``<arch>.embedding_length``...), arrays as null as Ollama gives them without
  ``verbose``, plus ``general.parameter_count``; for a folder model, what its config states under the same keys.
- ``template``: the model's chat template (Jinja, as the GGUF carries it). For a model with fill-in-the-middle
  tokens it also holds ``{{ .Suffix }}``, which Continue looks for before it sends FIM requests.
- ``capabilities``: ``completion``; ``tools`` when the model's template renders tools; ``insert`` for a model
  with FIM tokens; ``thinking`` for a reasoning model (markers in its vocabulary and a template that knows them,
  models/metadata/thinking.py: read from the file, the model is not loaded); ``vision`` for a model with a
  projector, and ``audio`` when that projector hears, as Ollama lists them. A model
  whose GGUF states a pooling type (``<arch>.pooling_type``: an embedding model) is ``embedding`` instead of
  ``completion``, as Ollama decides it; a generative model still embeds when asked (/api/embed), as Ollama's does.
- ``projector_info``: for a model with a projector, the projector file's metadata keys with their values (arrays as
  null), plus ``general.parameter_count``, as Ollama gives them; absent otherwise.
- ``parameters``: Ollama's ``key value`` lines of the model's own parameters (a Modelfile's), and ``num_ctx``: the
  context it runs with, when they do not name it.
- ``modelfile``: the Modelfile that makes the model again (``localinfer show --modelfile``); ``system``,
  ``messages`` and ``license``: a Modelfile's, when the model has them; ``template`` is a Modelfile's over the
  file's own.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.ollama.details import model_details, read_facts
from localinfer.app.server.ollama.wire import ShowBody, json_body
from localinfer.engine.engine import Engine
from localinfer.errors import LocalInferError
from localinfer.models.defaults import ModelDefaults
from localinfer.models.metadata import (
    FolderFacts,
    GGUFInfo,
    Scalar,
    read_folder_thinking,
    read_gguf_metadata,
    read_gguf_thinking,
)
from localinfer.models.modelfile import of_model, parameter_lines
from localinfer.models.projector import projector_facts
from localinfer.types import ModelInfo, ThinkingMarkers

router = APIRouter(prefix="/api", route_class=FastJSONRoute)
ShowJSON = Annotated[ShowBody, Depends(json_body(ShowBody))]

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"
# Continue sends fill-in-the-middle requests to an Ollama model only when its template mentions .Suffix; the prompt
# itself is laid out by localinfer from the model's FIM tokens, not from this text.
FIM_TEMPLATE_NOTE = "{{- /* fill-in-the-middle: localinfer lays out {{ .Prompt }} and {{ .Suffix }} */ -}}\n"


@router.post("/show")
async def show(request: Request, body: ShowJSON) -> dict[str, Any]:
    engine: Engine = request.app.state.engine
    info = engine.describe(body.target())
    facts = read_facts(info)
    metadata = await asyncio.to_thread(_gguf_metadata, info) if info.format == "gguf" else {}
    template = metadata.pop(CHAT_TEMPLATE_KEY, None)
    if isinstance(facts, FolderFacts):
        template = facts.chat_template
    fim = isinstance(facts, GGUFInfo) and facts.fim
    thinking = await asyncio.to_thread(_thinking, info)
    projector = await asyncio.to_thread(projector_facts, Path(info.projector)) if info.projector else None
    manifest = engine.manifest_of(info.name)
    own = manifest.defaults  # a Modelfile's, when the model was made from one
    template = own.template if own.template is not None else template
    capabilities = _capabilities(template, fim=fim, embedding=_states_pooling(metadata), thinking=thinking)
    shown: dict[str, Any] = {
        "license": "\n".join(own.license) or ((facts.license or "") if isinstance(facts, GGUFInfo) else ""),
        "modelfile": of_model(manifest),
        "parameters": _parameters(own, info.context_length),
        "template": (FIM_TEMPLATE_NOTE if fim else "") + (template if isinstance(template, str) else ""),
        "details": model_details(info, facts),
        "model_info": _model_info(metadata, facts),
        "capabilities": [*capabilities, *(projector.modalities if projector is not None else ())],
        "modified_at": datetime.fromtimestamp(info.created, timezone.utc).isoformat(timespec="seconds"),
    }
    if projector is not None:
        shown["projector_info"] = dict(projector.metadata)
    if own.system is not None:
        shown["system"] = own.system
    if own.messages:
        shown["messages"] = [{"role": role, "content": content} for role, content in own.messages]
    return shown


def _parameters(own: ModelDefaults, context_length: int | None) -> str:
    """The model's own parameters as Ollama lists them, and the context it runs with when they name none."""
    lines = [parameter_lines(own)] if own.parameters else []
    if context_length and own.parameter("num_ctx") is None:
        lines.append(f"num_ctx {context_length}")
    return "\n".join(lines)


def _capabilities(template: object, *, fim: bool, embedding: bool = False, thinking: bool = False) -> list[str]:
    """``completion`` (``embedding`` for an embedding model); ``tools`` when the model's own template renders tools
    (as Ollama decides it: localinfer takes tools for any model, describing them to one whose template knows none,
    but such a model was not tuned to call them); ``insert`` for fill-in-the-middle; ``thinking`` last, as Ollama
    lists it, for a reasoning model."""
    capabilities = ["embedding" if embedding else "completion"]
    if isinstance(template, str) and "tools" in template:
        capabilities.append("tools")
    if fim:
        capabilities.append("insert")
    if thinking:
        capabilities.append("thinking")
    return capabilities


def _thinking(info: ModelInfo) -> bool:
    """The model reasons, as its file says (a file that cannot be read says nothing)."""
    markers: ThinkingMarkers | None
    try:
        markers = (
            read_gguf_thinking(Path(info.path)) if info.format == "gguf" else read_folder_thinking(Path(info.path))
        )
    except (LocalInferError, OSError):
        return False
    return markers is not None


def _states_pooling(metadata: dict[str, Scalar | None]) -> bool:
    """The GGUF states how its outputs are pooled into one vector: it is an embedding model (Ollama's test)."""
    return metadata.get(f"{metadata.get('general.architecture')}.pooling_type") is not None


def _gguf_metadata(info: ModelInfo) -> dict[str, Scalar | None]:
    try:
        return read_gguf_metadata(Path(info.path))
    except (LocalInferError, OSError):
        return {}


def _model_info(metadata: dict[str, Scalar | None], facts: GGUFInfo | FolderFacts | None) -> dict[str, Any]:
    model_info: dict[str, Any] = dict(metadata)
    if isinstance(facts, GGUFInfo) and facts.parameters is not None:
        model_info["general.parameter_count"] = facts.parameters
    if isinstance(facts, FolderFacts):
        arch = facts.family or facts.architecture or ""
        model_info["general.architecture"] = arch
        for key, value in (
            ("context_length", facts.context_length),
            ("block_count", facts.block_count),
            ("embedding_length", facts.embedding_length),
            ("attention.head_count", facts.head_count),
            ("attention.head_count_kv", facts.head_count_kv),
        ):
            if value is not None:
                model_info[f"{arch}.{key}"] = value
        if facts.parameters is not None:
            model_info["general.parameter_count"] = facts.parameters
    return model_info
