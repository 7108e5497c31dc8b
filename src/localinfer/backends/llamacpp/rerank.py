"""A reranker's prompt for one query and document pair, token for token as llama-server lays it out
(tools/server/server-common.cpp, ``format_prompt_rerank``, in the llama.cpp that llama-cpp-python vendors).

- A GGUF with a rerank template (``tokenizer.chat_template.rerank``, as Qwen3-Reranker's state one): the template
  with ``{query}`` and then ``{document}`` replaced by the texts, tokenized with special tokens parsed and none
  added.
- Otherwise: ``[BOS] query [EOS] [SEP] document [EOS]``, each of BOS, EOS and SEP only where the vocabulary says it
  adds it (``tokenizer.ggml.add_{bos,eos,sep}_token``), the SEP token where EOS is missing; query and document are
  tokenized with nothing added and no special tokens parsed (a ``<s>`` in a document is text).

The pair's score is what the model's rank pooling gives for the whole prompt (``embedder.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp.llama_cpp as lc

from localinfer.backends.llamacpp.model import LlamaModel


def rerank_template(model: LlamaModel) -> str | None:
    """The GGUF's rerank template (``tokenizer.chat_template.rerank``), None when it has none."""
    template = lc.llama_model_chat_template(model.model, b"rerank")
    return template.decode("utf-8", errors="replace") if template else None


def rerank_prompts(model: LlamaModel, query: str, documents: Sequence[str]) -> list[list[int]]:
    """The token ids of each (``query``, document) pair, in the documents' order."""
    template = rerank_template(model)
    if template is not None:
        return [
            model.tokenize(
                template.replace("{query}", query).replace("{document}", document),
                add_special=False,
                parse_special=True,
            )
            for document in documents
        ]
    vocab = model.vocab
    eos = int(lc.llama_vocab_eos(vocab))
    if eos == lc.LLAMA_TOKEN_NULL:
        eos = int(lc.llama_vocab_sep(vocab))
    bos = _added(int(lc.llama_vocab_bos(vocab)), lc.llama_vocab_get_add_bos(vocab))
    end = _added(eos, lc.llama_vocab_get_add_eos(vocab))
    sep = _added(int(lc.llama_vocab_sep(vocab)), lc.llama_vocab_get_add_sep(vocab))
    head = bos + model.tokenize(query, add_special=False, parse_special=False) + end + sep
    return [head + model.tokenize(document, add_special=False, parse_special=False) + end for document in documents]


def _added(token: int, added: bool) -> list[int]:
    """``[token]`` where the vocabulary adds it, none where it does not or has no such token (llama-server would
    put the null id in the prompt and fail to decode it)."""
    return [token] if added and token != lc.LLAMA_TOKEN_NULL else []
