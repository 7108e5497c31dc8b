"""Which dialect a request speaks, from its path alone: the one place that decides which error shape it gets.

Ollama's routes live under ``/api/``; llama.cpp's native ones (``/completion``, ``/infill``, ``/tokenize``...)
at the root, as llama-server serves them; Anthropic's Messages API at ``/v1/messages`` (and below it); everything
else (``/v1/...``, unknown paths) speaks OpenAI's.
"""

from __future__ import annotations

from enum import Enum
from typing import Final


class Dialect(Enum):
    OPENAI = "openai"
    OLLAMA = "ollama"
    LLAMACPP = "llamacpp"
    ANTHROPIC = "anthropic"


# llama-server's native routes (tools/server/server.cpp), with and without their trailing 's' where it has both.
LLAMACPP_PATHS: Final = frozenset(
    {
        "/completion",
        "/completions",
        "/infill",
        "/tokenize",
        "/detokenize",
        "/props",
        "/slots",
        "/metrics",
        "/models/load",
        "/models/unload",
        "/rerank",
        "/reranking",
        "/embedding",
        "/embeddings",  # llama-server's native embeddings (OpenAI's are /v1/embeddings)
        "/apply-template",
        "/lora-adapters",
        "/v1/rerank",  # llama-server's, under /v1/ too: not OpenAI's (OpenAI has no reranking)
        "/v1/reranking",
    }
)

LLAMACPP_PREFIXES: Final = ("/slots/",)  # llama-server's POST /slots/{id_slot}

ANTHROPIC_PREFIX: Final = "/v1/messages"  # /v1/messages and /v1/messages/count_tokens, as llama-server serves them


def dialect_for(path: str) -> Dialect:
    """The dialect whose error shape a request to ``path`` is answered in."""
    if path.startswith("/api/"):
        return Dialect.OLLAMA
    if path.rstrip("/") in LLAMACPP_PATHS or path.startswith(LLAMACPP_PREFIXES):
        return Dialect.LLAMACPP
    if path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/"):
        return Dialect.ANTHROPIC
    return Dialect.OPENAI
