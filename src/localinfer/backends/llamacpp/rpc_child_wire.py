"""What goes to a child ``localinfer serve``'s llama.cpp ``/completion`` and what comes back, for
``rpc_child.py``: a request as token ids with its sampling, and the child's events as chunks."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from localinfer.backends.base import DeviceUse
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.types import GenerationRequest, Timings, TokenChunk, Usage


def refuse_uncarried(request: GenerationRequest) -> None:
    """Raise InvalidRequest for an option the child's /completion is not given here (never dropped)."""
    options = request.options
    for name, asked in (
        ("logprobs", options.logprobs is not None),
        ("response_format", options.response_format.type in ("json_object", "json_schema")),
        ("n_indent", options.n_indent > 0),
        ("t_max_predict_ms", options.t_max_predict_ms > 0),
        ("thinking_budget", options.thinking_budget is not None),
    ):
        if asked:
            raise InvalidRequest(
                f"{name} is not carried to a model served over RPC workers, and localinfer does not drop it",
                param=name,
            )


def completion_body(tokens: list[int], request: GenerationRequest) -> dict[str, Any]:
    """llama-server's /completion body for ``request``, its prompt as token ids."""
    options, s = request.options, request.options.sampling
    body: dict[str, Any] = {
        "prompt": tokens,
        "stream": True,
        "n_predict": -1 if options.max_tokens is None else options.max_tokens,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_penalty": s.repeat_penalty,
        "repeat_last_n": s.repeat_last_n,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "seed": -1 if s.seed is None else s.seed,
        "stop": list(options.stop),
        "ignore_eos": options.ignore_eos,
        "cache_prompt": options.cache_prompt,
        "n_keep": options.n_keep,
        "logit_bias": [[token, bias] for token, bias in s.logit_bias],
    }
    if options.response_format.type == "grammar":
        body["grammar"] = options.response_format.grammar
    return body


async def chunks_from(events: AsyncIterator[str]) -> AsyncGenerator[TokenChunk, None]:
    """Chunks from the child's /completion events. Raises GenerationFailed for an error event, or when the stream
    ends before the generation does."""
    async for data in events:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise GenerationFailed(f"the child sent an event that is not JSON: {data[:200]!r}") from exc
        if payload.get("error"):
            error = payload["error"]
            raise GenerationFailed(str(error.get("message") if isinstance(error, dict) else error))
        if not payload.get("stop"):
            if payload.get("content") or payload.get("tokens"):
                yield TokenChunk(payload.get("content") or "", tokens=tuple(payload.get("tokens") or ()))
            continue
        yield _last(payload)
        return
    raise GenerationFailed("the child's stream ended before the generation finished")


def _last(payload: Mapping[str, Any]) -> TokenChunk:
    t = payload.get("timings") or {}
    cached = int(t.get("cache_n") or 0)
    usage = Usage(int(payload.get("tokens_evaluated") or 0), int(payload.get("tokens_predicted") or 0), cached)
    timings = Timings(
        float(t.get("prompt_ms") or 0.0),
        float(t.get("predicted_ms") or 0.0),
        int(t.get("prompt_n") or 0),
        int(t.get("predicted_n") or 0),
        draft_n=int(t.get("draft_n") or 0),
        draft_n_accepted=int(t.get("draft_n_accepted") or 0),
        cache_n=cached,
    )
    kind = payload.get("stop_type")
    return TokenChunk(
        "",
        finish_reason="length" if kind == "limit" else "stop",
        usage=usage,
        timings=timings,
        stop_word=payload.get("stopping_word") or None,
        truncated=bool(payload.get("truncated")),
    )


def device_use(d: Mapping[str, Any]) -> DeviceUse:
    return DeviceUse(str(d.get("name") or ""), str(d.get("where") or ""), int(d.get("size_bytes") or 0))
