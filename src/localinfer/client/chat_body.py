"""The ``/v1/chat/completions`` body ``HttpClient`` sends for a ``ChatRequest``: its options as our server reads
them (a sampling field at its default only where the caller set it: ``ChatRequest.explicit``), a message's images
as parts, what it asks of a reasoning model's thinking, and its tools."""

from __future__ import annotations

import base64
from typing import Any

from localinfer.client.remote_tools import message_tool_fields, tool_fields
from localinfer.types import MEDIA_MARKER, ChatMessage, ChatRequest, SamplingParams

SENT_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
)
_DEFAULT_SAMPLING = SamplingParams()


def chosen_fields(request: ChatRequest) -> frozenset[str]:
    """The options ``request``'s caller chose, by Ollama's parameter names: the sampling fields it set on purpose
    (``ChatRequest.explicit``) or to other than their defaults, a seed, a token limit, stop strings. The rest is left
    to the model's own parameters (a Modelfile's) and the server's defaults."""
    sampling, options = request.options.sampling, request.options
    chosen = {
        n for n in SENT_SAMPLING if n in request.explicit or getattr(sampling, n) != getattr(_DEFAULT_SAMPLING, n)
    }
    chosen |= {"seed"} if sampling.seed is not None else set()
    chosen |= {"num_predict"} if options.max_tokens is not None else set()
    chosen |= {"stop"} if options.stop else set()
    return frozenset(chosen)


def chat_body(request: ChatRequest) -> dict[str, Any]:
    """The streamed ``/v1/chat/completions`` body for ``request``: the options its caller chose (``chosen_fields``)
    as our server reads them, the rest left to the model and the server."""
    options = request.options
    sampling = options.sampling
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message(m) for m in request.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": options.ignore_eos,
        "cache_prompt": options.cache_prompt,
    }
    chosen = chosen_fields(request)
    for name in SENT_SAMPLING:  # the others are left out: the model's parameters or the server's defaults fill them
        if name in chosen:
            body[name] = getattr(sampling, name)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if options.stop:
        body["stop"] = list(options.stop)
    fmt = options.response_format
    if fmt.type == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": fmt.schema}}
    elif fmt.type == "json_object":
        body["response_format"] = {"type": "json_object"}
    body.update(_thinking_fields(request))
    body.update(tool_fields(request))
    return body


def _message(message: ChatMessage) -> dict[str, Any]:
    body: dict[str, Any] = {"role": message.role, "content": _content(message)}
    if message.reasoning:  # an earlier turn's thinking, given back as llama-server and DeepSeek take it
        body["reasoning_content"] = message.reasoning
    body.update(message_tool_fields(message))
    return body


def _content(message: ChatMessage) -> str | list[dict[str, Any]]:
    """A message's text, or with its images its parts: the text around each media marker and the images as data
    URIs, which the server joins back into the same text (core/media.py)."""
    if not message.media:
        return message.content
    parts: list[dict[str, Any]] = []
    pieces = message.content.split(MEDIA_MARKER)
    for index, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if index < len(message.media):
            part = message.media[index]
            uri = f"data:{part.mime};base64,{base64.b64encode(part.data).decode()}"
            if part.kind == "audio":
                parts.append({"type": "input_audio", "input_audio": {"data": uri.split(",", 1)[1]}})
            else:
                parts.append({"type": "image_url", "image_url": {"url": uri}})
    return parts


def _thinking_fields(request: ChatRequest) -> dict[str, Any]:
    """What ``request`` asks of a reasoning model's thinking, in the fields our server's chat route reads; nothing
    where it asks nothing (the server's defaults then hold)."""
    thinking = request.thinking
    kwargs = dict(request.template_kwargs)
    if thinking.enabled is not None:
        kwargs["enable_thinking"] = thinking.enabled
    fields: dict[str, Any] = {"chat_template_kwargs": kwargs} if kwargs else {}
    if thinking.budget is not None:
        fields["reasoning_budget_tokens"] = thinking.budget
    if thinking.effort is not None:
        fields["reasoning_effort"] = thinking.effort
    if not thinking.separate:
        fields["reasoning_format"] = "none"
    return fields
