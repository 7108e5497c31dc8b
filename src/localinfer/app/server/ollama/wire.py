"""Ollama wire models: request bodies as Ollama's clients send them.

Unknown fields are accepted and ignored, as Ollama does. A model is named by ``model``; the legacy ``name``
that older clients send is accepted too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError, model_validator

from localinfer.app.server.core.defaults import default_max_tokens, default_seed
from localinfer.app.server.core.media import media_part
from localinfer.app.server.core.model_defaults import OLLAMA, fill
from localinfer.app.server.core.reasoning import template_variables
from localinfer.app.server.core.sampling_fields import BoundedPenalties
from localinfer.app.server.core.stops import check_stops
from localinfer.app.server.core.tools import MAX_TOOLS, ToolWire
from localinfer.app.server.core.wire import ClientBody, keep_alive_seconds
from localinfer.app.server.limits import parse_json
from localinfer.app.server.ollama.think import checked, requested
from localinfer.errors import InvalidRequest
from localinfer.types import (
    MEDIA_MARKER,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    GenerationOptions,
    InfillRequest,
    MediaPart,
    Priority,
    ResponseFormat,
    Tool,
    ToolCall,
)


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class ModelBody(_Wire):
    """A body that names one model."""

    model: str | None = None
    name: str | None = None  # the field's name before Ollama 0.4

    def target(self) -> str:
        """The model named; raises InvalidRequest when there is none."""
        model = (self.model or self.name or "").strip()
        if not model:
            raise InvalidRequest("model is required", param="model")
        return model


class PullBody(ModelBody):
    stream: bool = True
    insecure: bool = False  # accepted, ignored: localinfer pulls over HTTPS from the Hub, or from a local file


class DeleteBody(ModelBody):
    """``DELETE /api/delete``: only the model's name."""


BodyT = TypeVar("BodyT", bound=BaseModel)


def json_body(model: type[BodyT]) -> Callable[[Request], Awaitable[BodyT]]:
    """A dependency reading the body as JSON whatever its Content-Type: Ollama's own docs send JSON with
    ``curl -d``, which labels it a form, and Ollama reads it anyway."""

    async def parse(request: Request) -> BodyT:
        raw = await request.body()
        try:
            data = parse_json(raw) if raw.strip() else {}
        except ValueError as exc:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "invalid JSON"}]) from exc
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc

    return parse


class Options(_Wire, BoundedPenalties):
    """``options``: Ollama's sampling settings with Ollama's defaults (core/sampling_fields.py's fields, Ollama's
    defaults redeclared where they differ). Runtime settings (``num_thread``,
    ``num_gpu``, ``num_batch``, ``use_mmap``...) do not change the answer and are accepted and ignored, as are
    unknown names (Ollama logs and ignores them). Those that would change the answer and that localinfer cannot
    honour (``mirostat``, ``typical_p``) are a 400 naming them."""

    num_ctx: int | None = Field(None, ge=1)
    num_predict: int | None = Field(default_factory=lambda: default_max_tokens(None))  # -1: no limit; -2: full context
    top_p: float = Field(0.9, gt=0.0, le=1.0)  # Ollama's defaults, where they are not llama.cpp's
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(1.1, gt=0.0)
    seed: int | None = Field(default_factory=lambda: default_seed(None), ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    typical_p: float = Field(1.0, gt=0.0, le=1.0)
    mirostat: int = Field(0, ge=0, le=2)
    num_keep: int = Field(4, ge=-1)  # the prompt's first tokens a context shift keeps (Ollama's default: 4)

    def to_core(self, response_format: ResponseFormat) -> GenerationOptions:
        if self.mirostat:
            raise InvalidRequest("mirostat sampling is not supported", param="options.mirostat")
        if self.typical_p < 1.0:
            raise InvalidRequest("typical_p sampling is not supported", param="options.typical_p")
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        check_stops(stops, param="options.stop")
        sampling = self.sampling_params(
            seed=None if self.seed is None or self.seed < 0 else self.seed  # Ollama's -1: a random seed
        )
        max_tokens = self.num_predict if self.num_predict is not None and self.num_predict > 0 else None
        return GenerationOptions(
            sampling=sampling,
            max_tokens=max_tokens,
            stop=tuple(stops),
            response_format=response_format,
            n_keep=self.num_keep,
        )


class _GenerationBody(ModelBody):
    """What /api/chat and /api/generate share. ``stream`` defaults to true, as in Ollama."""

    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: Options = Field(default_factory=Options)
    keep_alive: str | int | float | None = None  # how long the model stays loaded after this request
    think: bool | str | None = None  # a reasoning model's thinking: on, off, or a level (ollama/think.py)
    priority: Priority | None = None  # localinfer's: "high" goes ahead of queued requests (FIM as you type)
    tools: list[ToolWire] | None = Field(None, max_length=MAX_TOOLS)

    @model_validator(mode="before")
    @classmethod
    def _model_parameters(cls, data: Any) -> Any:
        return fill(data, OLLAMA, inside="options")

    def model_name(self) -> str | None:
        return self.model or self.name

    def keep_alive_seconds(self) -> float | None:
        return keep_alive_seconds(self.keep_alive)

    def _options(self) -> GenerationOptions:
        return self.options.to_core(self._response_format())

    def _chat(self, model: str, messages: tuple[ChatMessage, ...], tools: tuple[Tool, ...] = ()) -> ChatRequest:
        """A chat of ``messages`` with this body's settings and thinking (over the server's defaults)."""
        return ChatRequest(
            model=model,
            messages=messages,
            options=self._options(),
            tools=tools,
            keep_alive=self.keep_alive_seconds(),
            priority=self.priority or "normal",
            thinking=requested(self.think),
            template_kwargs=template_variables(None),
        )

    def _tools(self) -> tuple[Tool, ...]:
        """``tools`` as Ollama takes them: OpenAI's ``{"type": "function", "function": {...}}``."""
        return tuple(t.to_core() for t in self.tools or ())

    def _response_format(self) -> ResponseFormat:
        """``format``: ``"json"`` (a JSON object), a JSON schema object, or nothing (free text)."""
        if self.format is None or self.format == "":
            return ResponseFormat()
        if self.format == "json":
            return ResponseFormat("json_object")
        if isinstance(self.format, dict):
            return ResponseFormat("json_schema", self.format)
        raise InvalidRequest(f'format must be "json" or a JSON schema, not {self.format!r}', param="format")


class CalledFunction(_Wire):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)  # an object in Ollama's shape, not a JSON string


class ToolCallBody(_Wire):
    function: CalledFunction


def with_images(text: str, images: list[str] | None, *, param: str) -> tuple[str, tuple[MediaPart, ...]]:
    """``text`` with a media marker for each of ``images`` (base64) and their parts, placed as Ollama places them:
    each ``[img]`` in the text is the next image, and those left over go before the text."""
    media = tuple(media_part(image, param=param, kind="image") for image in images or ())
    prefix = ""
    for _ in media:
        if "[img]" in text:
            text = text.replace("[img]", MEDIA_MARKER, 1)
        else:
            prefix += MEDIA_MARKER
    return prefix + text, media


class ChatMessageWire(_Wire):
    role: str = Field(min_length=1)  # any role, as Ollama: the model's chat template decides what it accepts
    content: str = ""
    images: list[str] | None = None
    tool_calls: list[ToolCallBody] | None = None
    tool_name: str | None = None  # a tool turn: the function that answered
    thinking: str | None = None  # an assistant turn's thinking, given back (the template decides what it keeps)

    def to_core(self, index: int) -> ChatMessage:
        content, media = with_images(self.content, self.images, param="messages.images")
        calls = tuple(
            ToolCall(f"call_{index}_{n}", c.function.name, c.function.arguments)
            for n, c in enumerate(self.tool_calls or ())
        )
        return ChatMessage(
            role=self.role, content=content, tool_calls=calls, name=self.tool_name, reasoning=self.thinking, media=media
        )


class ChatBody(_GenerationBody):
    """``POST /api/chat``. No messages at all loads the model and answers ``done_reason: "load"``."""

    messages: list[ChatMessageWire] = Field(default_factory=list)

    def to_core(self, model: str) -> ChatRequest:
        return self._chat(model, tuple(m.to_core(i) for i, m in enumerate(self.messages)), self._tools())


class GenerateBody(_GenerationBody):
    """``POST /api/generate``. No prompt at all loads the model and answers ``done_reason: "load"``."""

    prompt: str = ""
    suffix: str = ""
    system: str = ""
    raw: bool = False
    template: str = ""
    context: list[int] | None = None
    images: list[str] | None = None

    def check(self) -> None:
        """Refuse what would change the answer and cannot be honoured."""
        checked(self.think)
        if self.template:
            raise InvalidRequest(
                "a template in the request is not supported: the model's own chat template is used", param="template"
            )
        if self.context:
            raise InvalidRequest(
                "context (the token state of an earlier answer) is not supported; send the conversation to /api/chat",
                param="context",
            )

    def chat(self, model: str) -> ChatRequest:
        """The prompt (and system text) through the model's chat template, as Ollama does when ``raw`` is false."""
        system = (ChatMessage("system", self.system),) if self.system else ()
        prompt, media = with_images(self.prompt, self.images, param="images")
        return self._chat(model, (*system, ChatMessage("user", prompt, media=media)))

    def infill(self, model: str) -> InfillRequest:
        """Fill in the middle: ``prompt`` is the text before the gap, ``suffix`` the text after it."""
        return InfillRequest(
            model,
            prefix=self.prompt,
            suffix=self.suffix,
            options=self._options(),
            keep_alive=self.keep_alive_seconds(),
            priority=self.priority or "high",
        )

    def completion(self, model: str) -> CompletionRequest:
        """The prompt as it is (``raw``)."""
        prompt, media = with_images(self.prompt, self.images, param="images")
        return CompletionRequest(
            model,
            prompt,
            self._options(),
            keep_alive=self.keep_alive_seconds(),
            priority=self.priority or "normal",
            media=media,
        )


class ShowBody(ModelBody):
    """``POST /api/show``: the model, and ``verbose`` (accepted; arrays such as the vocabulary stay null)."""

    verbose: bool = False
