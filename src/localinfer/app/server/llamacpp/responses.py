"""llama-server's completion bodies and SSE stream, built from core token chunks (tools/server/server-task.cpp)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from localinfer.app.server.core.timings import speculation_body
from localinfer.app.server.errors import llamacpp_error
from localinfer.errors import LocalInferError
from localinfer.types import Timings, TokenChunk, TokenStream, Usage


@dataclass(frozen=True)
class Served:
    """What every answer to one request repeats: the model's name, the prompt as text, the settings used."""

    model: str
    prompt: str
    settings: dict[str, Any]


def stop_type(last: TokenChunk) -> str:
    """llama-server's ``stop_type``: ``eos`` (the model ended), ``word`` (a stop string), ``limit`` (n_predict or
    the context), ``none`` (not ended)."""
    if last.finish_reason == "length":
        return "limit"
    if last.finish_reason == "stop":
        return "word" if last.stop_word else "eos"
    return "none"


def timings_body(t: Timings | None, usage: Usage | None) -> dict[str, Any]:
    """llama-server's ``timings``: ``cache_n`` prompt tokens reused, ``prompt_n`` computed, then generation, whose
    per-token time and rate count the steps after the first token (as ``Timings.predicted_per_second`` does)."""
    t = t or Timings(0.0, 0.0, 0, 0)
    return {
        "cache_n": usage.cached_tokens if usage is not None else 0,
        "prompt_n": t.prompt_n,
        "prompt_ms": round(t.prompt_ms, 3),
        "prompt_per_token_ms": round(t.prompt_ms / t.prompt_n, 3) if t.prompt_n else 0.0,
        "prompt_per_second": round(t.prompt_per_second, 2),
        "predicted_n": t.predicted_n,
        "predicted_ms": round(t.predicted_ms, 3),
        "predicted_per_token_ms": round(t.predicted_ms / (t.predicted_n - 1), 3) if t.predicted_n > 1 else 0.0,
        "predicted_per_second": round(t.predicted_per_second, 2),
        **speculation_body(t),
    }


def final_body(
    served: Served, content: str, last: TokenChunk, *, stream: bool, tokens: Sequence[int] = ()
) -> dict[str, Any]:
    """The answer (or a stream's last event) for a finished generation whose text is ``content``; ``tokens`` are
    the ids of that text, given when the request asked for them (``return_tokens``), as llama-server sends them."""
    usage = last.usage or Usage(0, 0, 0)
    # llama-server's counts: every token sampled (an end token included), and in the cache all but the last
    predicted = last.timings.predicted_n if last.timings is not None else usage.completion_tokens
    return {
        "index": 0,
        "content": content,
        "tokens": list(tokens),
        "stop": True,
        "model": served.model,
        "tokens_predicted": predicted,
        "tokens_evaluated": usage.prompt_tokens,
        "generation_settings": {**served.settings, "stream": stream},
        "prompt": served.prompt,
        "has_new_line": "\n" in content,
        "truncated": False,
        "stop_type": stop_type(last),
        "stopping_word": last.stop_word or "",
        "tokens_cached": usage.prompt_tokens + max(predicted - 1, 0),
        "timings": timings_body(last.timings, last.usage),
    }


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def sse_stream(stream: TokenStream, served: Served) -> AsyncIterator[str]:
    """llama-server's stream: a ``data:`` event per piece of text with the ids of its tokens (``stop: false``),
    then one with ``stop: true`` and the whole answer's counts and timings; no ``[DONE]``. Tokens whose text is
    held back and then dropped (a stop string) still come, in a piece whose ``content`` is empty, as llama-server
    sends them. An error after the stream began is its last event, ``data: {"error": {...}}`` in llama-server's
    error shape. Closing this iterator frees the slot at once."""
    has_new_line = False
    try:
        async with aclosing(stream):
            async for chunk in stream:
                if chunk.text or chunk.tokens:
                    has_new_line = has_new_line or "\n" in chunk.text
                    yield sse({"index": 0, "content": chunk.text, "tokens": list(chunk.tokens), "stop": False})
                if chunk.finish_reason is not None:
                    last = final_body(served, "", chunk, stream=True)
                    yield sse({**last, "has_new_line": has_new_line})
    except LocalInferError as exc:
        yield sse(llamacpp_error(exc)[1])
