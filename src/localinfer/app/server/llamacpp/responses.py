"""llama-server's completion bodies and SSE stream, built from core token chunks (tools/server/server-task.cpp)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from localinfer.app.server.core.choices import merged
from localinfer.app.server.core.timings import progress_timings, timings_fields
from localinfer.app.server.errors import llamacpp_error
from localinfer.errors import LocalInferError
from localinfer.types import Timings, TokenChunk, TokenLogprob, TokenStream, Usage


@dataclass(frozen=True)
class Served:
    """What every answer to one request repeats: the model's name, the prompt as text, the settings used."""

    model: str
    prompt: str
    settings: dict[str, Any]
    fields: tuple[str, ...] = ()  # ``response_fields``: the last answer holds only these (none: all)


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
    return timings_fields(t, usage.cached_tokens if usage is not None else t.cache_n)


def probabilities_body(probs: Sequence[TokenLogprob], post_sampling: bool) -> list[dict[str, Any]]:
    """llama-server's ``completion_probabilities``: per token its ``id``, ``token`` (its text, a trailing piece of
    a character left out), ``bytes`` and ``logprob`` with the ``top_logprobs`` most likely; or, after the sampler
    chain (``post_sampling_probs``), ``prob`` and ``top_probs``."""
    key, top_key = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")

    def entry(token: int, raw: bytes, logprob: float) -> dict[str, Any]:
        value = math.exp(logprob) if post_sampling else logprob
        return {"id": token, "token": _whole_characters(raw), "bytes": list(raw), key: value}

    return [
        {
            **entry(p.id, p.raw, p.logprob),
            top_key: [entry(token, raw, logprob) for token, (_, raw, logprob) in zip(p.top_ids, p.top, strict=True)],
        }
        for p in probs
    ]


def _whole_characters(raw: bytes) -> str:
    """``raw`` as text without a piece of a character at its end (as llama-server's validate_utf8 cuts it)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return raw[: exc.start].decode("utf-8", errors="replace")
        return raw.decode("utf-8", errors="replace")


def final_body(
    served: Served,
    content: str,
    last: TokenChunk,
    *,
    stream: bool,
    tokens: Sequence[int] = (),
    probs: Sequence[TokenLogprob] = (),
    index: int = 0,
) -> dict[str, Any]:
    """The answer (or a stream's last event) for a finished generation whose text is ``content``; ``tokens`` are
    the ids of that text, given when the request asked for them (``return_tokens``), as llama-server sends them;
    ``probs`` every token's probabilities, asked for with ``n_probs`` (a stream sends them with its pieces);
    ``index`` the completion's place among those of the request."""
    usage = last.usage or Usage(0, 0, 0)
    # llama-server's counts: every token sampled (an end token included), and in the cache all but the last
    predicted = last.timings.predicted_n if last.timings is not None else usage.completion_tokens
    body = {
        "index": index,
        "content": content,
        "tokens": list(tokens),
        "id_slot": -1 if last.id_slot is None else last.id_slot,
        "stop": True,
        "model": served.model,
        "tokens_predicted": predicted,
        "tokens_evaluated": usage.prompt_tokens,
        "generation_settings": {**served.settings, "stream": stream},
        "prompt": served.prompt,
        "has_new_line": "\n" in content,
        "truncated": last.truncated,
        "stop_type": stop_type(last),
        "stopping_word": last.stop_word or "",
        "tokens_cached": usage.prompt_tokens + max(predicted - 1, 0),
        "timings": timings_body(last.timings, last.usage),
    }
    if probs and not stream:
        body["completion_probabilities"] = probabilities_body(probs, _post_sampling(served))
    return body if stream else only_fields(served.fields, body)


def _post_sampling(served: Served) -> bool:
    return bool(served.settings.get("post_sampling_probs"))


def only_fields(paths: Sequence[str], body: dict[str, Any]) -> dict[str, Any]:
    """The values at ``paths`` (keys joined by ``/``) of ``body``, keyed by the paths themselves; a path that
    leads nowhere is left out (llama-server's ``json_get_nested_values``). No paths: ``body`` whole."""
    if not paths:
        return body
    picked: dict[str, Any] = {}
    for path in paths:
        value: Any = body
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            picked[path] = value
    return picked


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def sse_stream(streams: Sequence[TokenStream], served: Sequence[Served]) -> AsyncIterator[str]:
    """llama-server's stream of the completions ``streams`` (each served as ``served`` says), side by side: a
    ``data:`` event per piece of text with the ids of its tokens (``stop: false``), then one per completion with
    ``stop: true`` and its counts and timings; each event names its completion's ``index``; no ``[DONE]``. Tokens
    whose text is held back and then dropped (a stop string) still come, in a piece whose ``content`` is empty, as
    llama-server sends them; with ``n_probs`` each piece carries its tokens' ``completion_probabilities``. An error
    after the stream began is its last event, ``data: {"error": {...}}`` in llama-server's error shape. Closing this
    iterator frees the slots at once."""
    has_new_line = [False] * len(streams)
    predicted = [0] * len(streams)
    try:
        async with aclosing(merged(streams)) as chunks:
            async for index, chunk in chunks:
                if chunk.progress is not None:
                    event = streamed_piece(index, chunk, predicted[index])
                    if served[index].settings.get("timings_per_token"):  # the timings so far, as llama-server's
                        event["timings"] = timings_body(progress_timings(chunk.progress), None)
                    yield sse({**event, "prompt_progress": dataclasses.asdict(chunk.progress)})
                    continue
                if chunk.text or chunk.tokens:
                    has_new_line[index] = has_new_line[index] or "\n" in chunk.text
                    predicted[index] += len(chunk.tokens)
                    piece = streamed_piece(index, chunk, predicted[index])
                    if chunk.timings is not None and chunk.finish_reason is None:  # timings_per_token
                        piece["timings"] = timings_body(chunk.timings, None)
                    if chunk.logprobs:
                        piece["completion_probabilities"] = probabilities_body(
                            chunk.logprobs, _post_sampling(served[index])
                        )
                    yield sse(piece)
                if chunk.finish_reason is not None:
                    last = final_body(served[index], "", chunk, stream=True, index=index)
                    yield sse(only_fields(served[index].fields, {**last, "has_new_line": has_new_line[index]}))
    except LocalInferError as exc:
        yield sse(llamacpp_error(exc)[1])


def streamed_piece(index: int, chunk: TokenChunk, predicted: int) -> dict[str, Any]:
    """A streamed piece, as llama-server sends it: its text and tokens, the tokens generated so far and the
    prompt's (its ``id_slot`` is -1 there until the last event)."""
    return {
        "index": index,
        "content": chunk.text,
        "tokens": list(chunk.tokens),
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": predicted,
        "tokens_evaluated": chunk.prompt_tokens or 0,
    }
