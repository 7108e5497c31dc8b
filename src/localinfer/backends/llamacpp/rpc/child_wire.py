"""What goes to a child ``localinfer serve``'s llama.cpp ``/completion`` and what comes back, for
``child.py``: a request as token ids with its sampling, and the child's events as chunks."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from localinfer.backends.base import DeviceUse
from localinfer.backends.engine_process.completions import event_error, json_events
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.types import GenerationRequest, PromptProgress, Timings, TokenChunk, Usage

ENGINE_UNAVAILABLE = "engine_unavailable"  # the code of the error event the proxy ends a stream with (proxy.py)


class ChildStreamBroken(GenerationFailed):
    """The child's stream broke off (it ended early, or the proxy lost the child): the child may be exiting. An
    error the child itself answered is a plain GenerationFailed."""


def refuse_uncarried(request: GenerationRequest) -> None:
    """Raise InvalidRequest for an option the child's /completion is not given here (never dropped). The infill
    sampler is one: the child's /completion takes no ``samplers`` that name it, and its /infill takes text, not
    the token ids this process renders."""
    options = request.options
    for name, param, asked in (
        ("logprobs", "logprobs", options.logprobs is not None),
        ("response_format", "response_format", options.response_format.type in ("json_object", "json_schema")),
        ("n_indent", "n_indent", options.n_indent > 0),
        ("t_max_predict_ms", "t_max_predict_ms", options.t_max_predict_ms > 0),
        ("thinking_budget", "thinking_budget", options.thinking_budget is not None),
        ("the infill sampler", "samplers", options.sampling.infill),
    ):
        if asked:
            raise InvalidRequest(
                f"{name} is not carried to a model served over RPC workers, and localinfer does not drop it",
                param=param,
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
        "timings_per_token": options.timings_per_token,
        "return_progress": options.return_progress,
    }
    if options.response_format.type == "grammar":
        body["grammar"] = options.response_format.grammar
    return body


async def chunks_from(events: AsyncIterator[str]) -> AsyncGenerator[TokenChunk, None]:
    """Chunks from the child's /completion events (with the prompt's progress and each piece's timings when they
    were asked). Raises GenerationFailed for an error event of the child's, ChildStreamBroken when the stream
    breaks off (the proxy's error event, a partial event, or its end before the generation's)."""
    async for payload in json_events(events, "the child", broken=ChildStreamBroken):
        if (error := event_error(payload)) is not None:
            message, code = error
            raise ChildStreamBroken(message) if code == ENGINE_UNAVAILABLE else GenerationFailed(message)
        if payload.get("prompt_progress"):
            p = payload["prompt_progress"]
            numbers = [int(p.get(key) or 0) for key in ("total", "cache", "processed", "time_ms")]
            yield TokenChunk("", progress=PromptProgress(*numbers))
            continue
        if not payload.get("stop"):
            if payload.get("content") or payload.get("tokens"):
                timings = _timings(payload["timings"]) if payload.get("timings") else None
                yield TokenChunk(
                    payload.get("content") or "", tokens=tuple(payload.get("tokens") or ()), timings=timings
                )
            continue
        yield _last(payload)
        return
    raise ChildStreamBroken("the child's stream ended before the generation finished")


def _timings(t: Mapping[str, Any]) -> Timings:
    return Timings(
        float(t.get("prompt_ms") or 0.0),
        float(t.get("predicted_ms") or 0.0),
        int(t.get("prompt_n") or 0),
        int(t.get("predicted_n") or 0),
        draft_n=int(t.get("draft_n") or 0),
        draft_n_accepted=int(t.get("draft_n_accepted") or 0),
        cache_n=int(t.get("cache_n") or 0),
    )


def _last(payload: Mapping[str, Any]) -> TokenChunk:
    timings = _timings(payload.get("timings") or {})
    usage = Usage(int(payload.get("tokens_evaluated") or 0), int(payload.get("tokens_predicted") or 0), timings.cache_n)
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
