"""SmolLM2 stated as a reranker: the reranking test models, derived once into the test home.

No reranker GGUF is at hand offline, so this copies SmolLM2's GGUF (every key and tensor, byte for byte) and sets
``llama.pooling_type = 4`` (llama.cpp's LLAMA_POOLING_TYPE_RANK). Two copies, one per way llama-server lays out a
query and document pair (tools/server/server-common.cpp, ``format_prompt_rerank``):

- ``smollm2-rerank``: no rerank template, so the pair is ``[BOS] query [EOS] [SEP] document [EOS]`` with each
  special token only where the vocabulary says it adds it. SmolLM2's says it adds none (the pair would be the two
  texts run together), so the copy also states ``tokenizer.ggml.add_{bos,eos,sep}_token = true`` and a separator,
  ``<|endoftext|>`` (BOS and EOS are SmolLM2's own ``<|im_start|>`` and ``<|im_end|>``): every part of the layout
  is then in the prompt, as in a BERT-style reranker's (bge-reranker-v2-m3).
- ``smollm2-rerank-template``: ``tokenizer.chat_template.rerank``, a Qwen3-Reranker-style template in SmolLM2's
  ChatML tokens, with ``{query}`` and ``{document}`` (its special tokens are parsed, the texts' are too).

No classifier tensor is added. llama.cpp's rank pooling (src/llama-graph.cpp, ``build_pooling``) takes the last
token's hidden state for a causal model (the first token's otherwise) and applies ``cls``/``cls_b``, ``cls_out``/
``cls_out_b`` and ``cls_norm`` only where the model loaded them; the llama architecture (src/models/llama.cpp)
creates none of them, and the loader refuses a file with a tensor it did not create ("done_getting_tensors: wrong
number of tensors; expected 273, got 272", tried with a ``cls.output.weight`` of shape [576, 1]). So a pair's
score is the first number of the last token's normed hidden state, which llama-server reads as the score too: a
number with no meaning as relevance, but deterministic, and different for different pairs, which is what parity
and ordering tests need. The copies' sources name the original's sha256 and this derivation's version, so a
changed original or derivation derives them again.
"""

from __future__ import annotations

from pathlib import Path

import gguf

from localinfer.models.store import Manifest, ModelStore
from tests.derived_gguf import Value, copy_with_keys, derived_once

NAME = "smollm2-rerank"
TEMPLATE_NAME = "smollm2-rerank-template"
VERSION = 1
POOLING_RANK = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK
SEPARATOR = "<|endoftext|>"  # SmolLM2's token that plays SEP in ``smollm2-rerank``
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query. Note that the "
    'answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n<Query>: {query}\n<Document>: {document}'
    "<|im_end|>\n<|im_start|>assistant\n"
)


def _token_id(reader: gguf.GGUFReader, text: str) -> int:
    field = reader.fields[gguf.Keys.Tokenizer.LIST]
    names = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    return names.index(text)  # ValueError: the original is not the SmolLM2 this was written for


def _keys(reader: gguf.GGUFReader, name: str) -> dict[str, Value]:
    """The keys ``name``'s copy sets (beside the pooling)."""
    if name == TEMPLATE_NAME:
        return {"tokenizer.chat_template.rerank": RERANK_TEMPLATE}
    return {
        gguf.Keys.Tokenizer.ADD_BOS: True,
        gguf.Keys.Tokenizer.ADD_EOS: True,
        gguf.Keys.Tokenizer.ADD_SEP: True,
        gguf.Keys.Tokenizer.SEP_ID: _token_id(reader, SEPARATOR),
    }


def write_reranker_copy(original: Path, target: Path, name: str = NAME) -> dict[str, Value]:
    """Write ``original`` to ``target`` stated as a reranker, laid out as ``name``'s copy (``NAME`` or
    ``TEMPLATE_NAME``); returns the keys set beside the pooling."""
    reader = gguf.GGUFReader(original)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    keys = _keys(reader, name)
    copy_with_keys(original, target, {f"{arch}.pooling_type": POOLING_RANK, **keys})
    return keys


def reranker_model_once(original: Manifest, store: ModelStore, name: str = NAME) -> Manifest:
    """``name``'s reranker copy of ``original`` (``NAME`` or ``TEMPLATE_NAME``) registered in ``store``, derived
    when it is missing or was derived from another file or version."""
    return derived_once(
        original, store, name, f"{name}-v{VERSION}", lambda target: write_reranker_copy(original.path, target, name)
    )
