"""The one reader of model files: what a model says about itself, read from its files before it is loaded.

- ``gguf``: a GGUF file's header (architecture, shape, context, quantization, chat template, FIM tokens), read
  by ``gguf_file`` (the format walked over a memory map); ``gguf_tensors``: its tensor table;
- ``folder``: a model folder's config, ONNX ``genai_config.json`` or Hugging Face ``config.json``, as FolderFacts;
- ``hf``: a folder's Hugging Face tokenizer files (chat template, special tokens) and ``config.json`` fields;
- ``onnx``: an onnxruntime-genai folder's ``genai_config.json`` fields;
- ``projector``: a multimodal projector's (``mmproj`` GGUF) header: what it sees and hears, its widths and weights.

Weights are never read. The public names below load their module on first use, so a backend that reads only a
folder's JSON files does not import the ``gguf`` package (and numpy) with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localinfer.models.metadata.folder import (
        FolderFacts,
        FolderFormat,
        cached_folder_facts,
        folder_format,
        read_folder_facts,
    )
    from localinfer.models.metadata.gguf import (
        GGUFInfo,
        cached_gguf_info,
        read_chat_template,
        read_gguf_info,
        read_gguf_metadata,
        read_gguf_thinking,
    )
    from localinfer.models.metadata.gguf_file import Scalar
    from localinfer.models.metadata.gguf_tensors import read_gguf_tensors
    from localinfer.models.metadata.hf import read_folder_thinking
    from localinfer.models.metadata.projector import ProjectorInfo, cached_projector_info, read_projector_info

_HOMES = {
    "FolderFacts": "folder",
    "FolderFormat": "folder",
    "cached_folder_facts": "folder",
    "folder_format": "folder",
    "read_folder_facts": "folder",
    "GGUFInfo": "gguf",
    "Scalar": "gguf_file",
    "cached_gguf_info": "gguf",
    "read_chat_template": "gguf",
    "read_gguf_info": "gguf",
    "read_gguf_metadata": "gguf",
    "read_gguf_tensors": "gguf_tensors",
    "read_gguf_thinking": "gguf",
    "read_folder_thinking": "hf",
    "ProjectorInfo": "projector",
    "cached_projector_info": "projector",
    "read_projector_info": "projector",
}

__all__ = [
    "FolderFacts",
    "FolderFormat",
    "GGUFInfo",
    "ProjectorInfo",
    "Scalar",
    "cached_folder_facts",
    "cached_gguf_info",
    "cached_projector_info",
    "folder_format",
    "read_chat_template",
    "read_folder_facts",
    "read_folder_thinking",
    "read_gguf_info",
    "read_gguf_metadata",
    "read_gguf_tensors",
    "read_gguf_thinking",
    "read_projector_info",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
