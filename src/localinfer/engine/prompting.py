"""Requests into generation requests, the prompt a model is given for each.

A chat's turns and tools go through the model's chat template (its Modelfile's system and messages first), with
the stops the template adds, the call a tool choice requires, and what the chat asks of the thinking as the model
can honour it (a budget, the JSON answer held until the thinking ends); its reply is read back with
``ChatPrompt.reply`` (thinking apart, tool calls). A completion's prompt or token ids go as they are; an infill's
prefix and suffix in the model's own FIM layout (``engine/infill.py``).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from localinfer.backends.base import Backend
from localinfer.engine.infill import infill_tokens
from localinfer.engine.scheduler import Runner
from localinfer.engine.templates import RenderedPrompt
from localinfer.engine.thinking_split import chat_reply, honoured
from localinfer.engine.tools import required_call
from localinfer.errors import InvalidRequest, ModelNotReady
from localinfer.models.defaults import with_defaults
from localinfer.types import (
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
    InfillRequest,
    Thinking,
    ThinkingBudget,
    ThinkingMarkers,
    TokenStream,
    Tool,
)


@dataclass(frozen=True)
class ChatPrompt:
    """A chat request as its model is given it (``generation``), with what reading the reply takes: the model's
    thinking ``markers``, the thinking ``honoured`` and the ``tools`` it may call."""

    generation: GenerationRequest
    rendered: RenderedPrompt
    markers: ThinkingMarkers | None
    honoured: Thinking
    tools: tuple[Tool, ...]

    def reply(self, chunks: TokenStream) -> TokenStream:
        """The generated ``chunks`` read as the chat's reply (``engine/reasoning.py``'s ``chat_reply``)."""
        return chat_reply(
            chunks,
            self.markers,
            thinking_open=self.rendered.thinking_open,
            separate=self.honoured.separate,
            prompt=self.rendered.text,
            tools=self.tools,
        )


async def chat_prompt(runner: Runner, request: ChatRequest) -> ChatPrompt:
    """``request`` as ``runner``'s model is given it. Raises ModelNotReady while it loads."""
    rendered = await rendered_chat(runner, request)
    tools = request.tools if request.tool_choice != "none" else ()
    options = dataclasses.replace(request.options, stop=request.options.stop + rendered.stop)
    if tools and request.tool_choice != "auto":
        options = dataclasses.replace(options, response_format=required_call(options, tools, request.tool_choice))
    markers = runner.backend.facts.thinking
    thinking = honoured(thinking_asked(request), markers)
    if markers is not None and thinking.enabled is not False and options.response_format.type.startswith("json"):
        held = dataclasses.replace(  # the JSON is the answer: the thinking before it stays free
            options.response_format, after_thinking=markers, thinking_open=rendered.thinking_open
        )
        options = dataclasses.replace(options, response_format=held)
    if markers is not None and thinking.budget is not None and thinking.enabled is not False:
        budget = ThinkingBudget(thinking.budget, markers, inside=rendered.thinking_open)
        options = dataclasses.replace(options, thinking_budget=budget)
    generation = GenerationRequest(
        request_id=new_id(),
        prompt=rendered.text,
        options=options,
        add_special=rendered.add_special,
        priority=request.priority,
        media=tuple(part for message in request.messages for part in message.media),
    )
    return ChatPrompt(generation, rendered, markers, thinking, tools)


async def rendered_chat(runner: Runner, request: ChatRequest) -> RenderedPrompt:
    """``request``'s turns and tools (none when ``tool_choice`` is none) through ``runner``'s chat template."""
    if runner.template is None:
        raise ModelNotReady(f"model '{request.model}' is still loading")
    tools = request.tools if request.tool_choice != "none" else ()
    messages = with_defaults(request.messages, runner.manifest.defaults)
    return runner.template.render(
        messages, tools, thinking_asked(request), request.template_kwargs, ending=request.ending
    )


def thinking_asked(request: ChatRequest) -> Thinking:
    """What ``request`` asks of the thinking: its own, switched by ``enable_thinking`` among its template's
    variables (``chat_template_kwargs``, as llama-server and vLLM take it) when it says nothing itself."""
    enabled = request.template_kwargs.get("enable_thinking")
    if request.thinking.enabled is None and isinstance(enabled, bool):
        return dataclasses.replace(request.thinking, enabled=enabled)
    return request.thinking


def completion_generation(backend: Backend, request: CompletionRequest) -> GenerationRequest:
    """``request`` as ``backend`` is given it. Raises InvalidRequest for token ids a backend cannot take."""
    if request.tokens and not backend.capabilities.token_prompts:
        raise InvalidRequest(f"a prompt of token ids is not supported by the {backend.name} backend", param="prompt")
    return GenerationRequest(
        request_id=new_id(),
        prompt=request.prompt,
        options=request.options,
        tokens=request.tokens,
        priority=request.priority,
        media=request.media,
    )


async def infill_generation(backend: Backend, request: InfillRequest) -> GenerationRequest:
    """``request`` in the FIM layout of ``backend``'s model, as token ids. Raises InvalidRequest when the model
    declares no FIM tokens and ContextLengthExceeded when the prompt does not fit."""
    tokens = await infill_tokens(backend, request)
    return GenerationRequest(
        request_id=new_id(), prompt="", options=request.options, tokens=tuple(tokens), priority=request.priority
    )


def new_id() -> str:
    return uuid.uuid4().hex
