"""Anthropic Messages wire models: bodies as the anthropic SDKs (and Claude Code) send them, translated into core
types here and nowhere else.

As llama-server translates them (tools/server/server-chat.cpp, ``server_chat_convert_anthropic_to_oai``):
``system`` (a string or text blocks) is the system turn; ``text`` blocks are a turn's text (several joined by a
line break); an assistant's ``tool_use`` blocks are its tool calls; a user's ``tool_result`` blocks are tool turns
answering the call with that id (the function's name taken from that call); ``tools`` (``name``, ``description``,
``input_schema``) are the functions offered; ``stop_sequences`` the stop strings; ``temperature``, ``top_p`` and
``top_k`` the sampling, llama-server's defaults where absent (0.8, 0.95, 40). Unlike llama-server:

- ``max_tokens`` is required, as Anthropic's API has it;
- ``tool_choice`` ``{"type": "tool", "name"}`` makes the model call that function (llama-server lets it call any
  of them), ``{"type": "none"}`` offers none, and ``disable_parallel_tool_use`` keeps only the first call;
- what would change the answer and cannot be honoured is a 400 naming the field, never dropped: image and
  document blocks, Anthropic's own tools (web search, bash, the text editor...), ``mcp_servers``, ``container``,
  ``context_management``;
- a last assistant turn is a prefill: the model continues it, and the answer holds what it adds;
- ``output_config.format`` (and the beta's ``output_format``) of type ``json_schema`` constrains the answer to
  the schema, as ``response_format`` does on the OpenAI routes;
- a ``tool_result`` with ``is_error`` reads ``Error: <content>`` to the model.

A reasoning model's thinking (``thinking``, Anthropic's extended thinking): ``{"type": "enabled",
"budget_tokens": N}`` turns it on with a budget of N thinking tokens (core/reasoning.py); ``{"type":
"adaptive"}`` (and ``enabled`` without ``budget_tokens``) turns it on with the server's budget
(``--reasoning-budget``, none by default; llama-server takes 10000 there); ``{"type": "disabled"}`` turns it off
through the template (llama-server ignores it); absent, the server's defaults decide, as on llama-server.
``budget_tokens`` may be below Anthropic's minimum of 1024 and need not be below ``max_tokens``, as on
llama-server: ``max_tokens`` counts the thinking too, so a budget at or past it never binds; a negative one is a
400. ``display: "omitted"`` answers the thinking block without its text. Another type (``between_tools``) is a
400. A model that does not reason answers as it would without ``thinking``. An assistant's earlier ``thinking``
blocks go back as that turn's thinking (its template decides whether the prompt shows it: most drop it) and
their ``signature`` is not checked; ``redacted_thinking`` blocks are dropped (nothing here can read them).
``chat_template_kwargs`` (an extension, as llama-server passes it on) gives the chat template more variables.

Accepted and ignored, as they do not change the answer: ``metadata``, ``cache_control`` (a prompt's prefix is
reused from the cache whatever it says), ``service_tier``, ``speed``, ``inference_geo``, ``output_config.effort``,
and ``citations``. As on llama-server, a stop sequence may be whitespace (``"\\n"`` ends the answer at its first
line break), and ``messages`` may be empty (the model answers the system text, or nothing, as its template
renders it).
"""

from __future__ import annotations

from typing import Any, Literal, NoReturn

from pydantic import Field, model_validator

from localinfer.app.server.core.defaults import default_temperature
from localinfer.app.server.core.media import joined, media_part
from localinfer.app.server.core.model_defaults import ANTHROPIC, fill
from localinfer.app.server.core.reasoning import requested_thinking, template_variables
from localinfer.app.server.core.stops import check_stops
from localinfer.app.server.core.tools import MAX_TOOLS
from localinfer.app.server.core.wire import ClientBody, keep_alive_seconds
from localinfer.errors import InvalidRequest
from localinfer.types import (
    ChatMessage,
    ChatRequest,
    GenerationOptions,
    MediaPart,
    ResponseFormat,
    SamplingParams,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
)

THINKING_TYPES = ("enabled", "adaptive", "disabled")
TOOL_NAME = r"^[a-zA-Z0-9_-]{1,128}$"  # Anthropic's rule for a custom tool's name


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class ImageSource(_Wire):
    """An image block's ``source``: ``base64`` (``media_type``, ``data``) or ``url``."""

    type: str
    media_type: str | None = None  # the kind is read from the bytes
    data: str | None = None
    url: str | None = None

    def to_core(self, where: str) -> MediaPart:
        if self.type == "base64" and self.data is not None:
            return media_part(self.data, param=f"{where}.source.data", kind="image")
        if self.type == "url" and self.url is not None:
            return media_part(self.url, param=f"{where}.source.url", kind="image")
        raise InvalidRequest(
            f"image sources of type '{self.type}' are not supported (base64 and url are)", param=f"{where}.source"
        )


class Block(_Wire):
    """A content block. ``text``: ``text``; ``tool_use``: ``id``, ``name``, ``input``; ``tool_result``:
    ``tool_use_id``, ``content`` (a string or text blocks), ``is_error``; ``thinking``: ``thinking`` (its
    ``signature`` is not read); ``image``: ``source`` (a user turn's picture). Other types are refused where they
    appear (documents...) or skipped (an earlier turn's ``redacted_thinking``)."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    is_error: bool = False
    thinking: Any = None  # read only in a thinking block (where it must be text): other blocks ignore it
    source: ImageSource | None = None  # an image block's picture


class MessageWire(_Wire):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolWire(_Wire):
    """A function the model may call. Anthropic's own tools (``web_search_20250305``, ``bash_20250124``...) have
    another ``type`` and no schema given: they are refused in ``to_core``."""

    type: str = "custom"
    name: str = Field(pattern=TOOL_NAME)
    description: str = ""
    input_schema: dict[str, Any] | None = None

    def to_core(self, where: str) -> Tool:
        if self.type != "custom":
            raise InvalidRequest(
                f"the tool type '{self.type}' (one of Anthropic's own tools) is not supported; describe a function "
                "with name, description and input_schema",
                param=f"{where}.type",
            )
        if self.input_schema is None:
            raise InvalidRequest("a tool needs its input_schema", param=f"{where}.input_schema")
        return Tool(self.name, self.description, self.input_schema)


class ToolChoiceWire(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingWire(_Wire):
    """Anthropic's ``thinking``: ``type`` ``enabled`` (with ``budget_tokens``), ``adaptive`` or ``disabled``;
    ``display`` ``summarized`` (the thinking in full, here) or ``omitted``."""

    type: str
    budget_tokens: int | None = Field(None, ge=0)
    display: Literal["summarized", "omitted"] | None = None

    def to_core(self) -> Thinking:
        """The thinking asked for, over the server's defaults. Raises InvalidRequest for a type not served."""
        if self.type not in THINKING_TYPES:
            raise InvalidRequest(
                f"thinking type '{self.type}' is not supported: use one of {', '.join(THINKING_TYPES)}",
                param="thinking.type",
            )
        if self.type == "disabled":
            return requested_thinking(enabled=False)
        budget = self.budget_tokens if self.type == "enabled" else None
        return requested_thinking(enabled=True, budget=budget, budget_param="thinking.budget_tokens")


class OutputFormatWire(_Wire):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfigWire(_Wire):
    format: OutputFormatWire | None = None
    effort: str | None = None  # how hard the model should think: nothing to tune here, ignored


def _refuse(block: Block, where: str) -> NoReturn:
    if block.type == "document":
        raise InvalidRequest(f"{block.type} content blocks are not supported: no model here can read them", param=where)
    raise InvalidRequest(f"content blocks of type '{block.type}' are not supported here", param=where)


def _text(block: Block, where: str) -> str:
    if block.type != "text":
        _refuse(block, where)
    if block.text is None:
        raise InvalidRequest("a text block needs its text", param=f"{where}.text")
    return block.text


def _texts(blocks: list[Block], where: str) -> str:
    return "\n".join(_text(block, f"{where}.{i}") for i, block in enumerate(blocks))


def _assistant(blocks: list[Block], where: str, names: dict[str, str]) -> ChatMessage:
    """An assistant turn: its text, its tool calls, and its thinking given back (several blocks joined)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(blocks):
        at = f"{where}.{i}"
        if block.type == "tool_use":
            if not block.name:
                raise InvalidRequest("a tool_use block needs the function's name", param=f"{at}.name")
            call_id = block.id or f"toolu_{len(names)}"
            names[call_id] = block.name
            calls.append(ToolCall(call_id, block.name, block.input or {}))
        elif block.type == "thinking":
            if not isinstance(block.thinking, str):
                raise InvalidRequest("a thinking block needs its thinking text", param=f"{at}.thinking")
            thoughts.append(block.thinking)
        elif block.type != "redacted_thinking":  # encrypted by Anthropic: nothing here can read it
            texts.append(_text(block, at))
    reasoning = "".join(thoughts) or None
    return ChatMessage("assistant", "\n".join(texts), tool_calls=tuple(calls), reasoning=reasoning)


def _tool_answer(block: Block, where: str, names: dict[str, str]) -> ChatMessage:
    if not block.tool_use_id:
        raise InvalidRequest("a tool_result block needs the tool_use_id it answers", param=f"{where}.tool_use_id")
    content = block.content
    text = _texts(content, f"{where}.content") if isinstance(content, list) else content or ""
    if block.is_error:
        text = f"Error: {text}"
    return ChatMessage("tool", text, tool_call_id=block.tool_use_id, name=names.get(block.tool_use_id))


def _user(blocks: list[Block], where: str, names: dict[str, str]) -> list[ChatMessage]:
    """A user turn's blocks in their order: tool results as tool turns, each run of text as a user turn."""
    out: list[ChatMessage] = []
    parts: list[str | MediaPart] = []
    for i, block in enumerate(blocks):
        if block.type == "tool_result":
            if parts:
                out.append(_user_turn(parts))
                parts = []
            out.append(_tool_answer(block, f"{where}.{i}", names))
        elif block.type == "image" and block.source is not None:
            parts.append(block.source.to_core(f"{where}.{i}"))
        else:
            parts.append(_text(block, f"{where}.{i}"))
    if parts or not out:
        out.append(_user_turn(parts))
    return out


def _user_turn(parts: list[str | MediaPart]) -> ChatMessage:
    """Text blocks joined by line breaks, and images as media markers, as llama-server joins them."""
    text, media = joined(parts)
    return ChatMessage("user", text, media=media)


class _Conversation(_Wire):
    """What ``/v1/messages`` and ``/v1/messages/count_tokens`` share: the turns and the tools."""

    model: str = ""  # none: the server's default model (core/model_name.py)
    messages: list[MessageWire]  # empty: the template renders no turn, as on llama-server
    system: str | list[Block] | None = None
    tools: list[ToolWire] | None = None
    tool_choice: ToolChoiceWire | None = None
    thinking: ThinkingWire | None = None  # a reasoning model's thinking: on, budgeted, or off
    chat_template_kwargs: dict[str, Any] | None = None  # an extension, as llama-server passes it on
    mcp_servers: list[Any] | None = None
    container: Any = None
    context_management: Any = None
    keep_alive: str | int | float | None = None  # an extension, as on the OpenAI routes

    def _check_supported(self) -> None:
        """Fields that would change the answer and cannot be honoured are refused, never dropped."""
        if self.mcp_servers:
            raise InvalidRequest("MCP servers are not supported: give their tools in tools", param="mcp_servers")
        if self.container is not None:
            raise InvalidRequest("containers (code execution) are not supported", param="container")
        if self.context_management is not None:
            raise InvalidRequest("context management is not supported", param="context_management")

    def core_messages(self) -> tuple[ChatMessage, ...]:
        """The system text and the turns as core messages. Raises InvalidRequest naming the block at fault."""
        out: list[ChatMessage] = []
        system = self.system if isinstance(self.system, str) else _texts(self.system or [], "system")
        if system:
            out.append(ChatMessage("system", system))
        names: dict[str, str] = {}  # tool_use id -> the function it called, for the tool turns that answer it
        for i, message in enumerate(self.messages):
            where = f"messages.{i}.content"
            if isinstance(message.content, str):
                out.append(ChatMessage(message.role, message.content))
            elif message.role == "assistant":
                out.append(_assistant(message.content, where, names))
            else:
                out.extend(_user(message.content, where, names))
        return tuple(out)

    def core_tools(self) -> tuple[tuple[Tool, ...], ToolChoice]:
        """The tools and what the model must do with them: ``auto`` (default), ``none``, ``required`` (``any``),
        or the name of one function (``tool``). Raises InvalidRequest naming the field."""
        tools = self.tools or []
        if len(tools) > MAX_TOOLS:
            raise InvalidRequest(f"at most {MAX_TOOLS} tools are allowed", param="tools")
        core = tuple(t.to_core(f"tools.{i}") for i, t in enumerate(tools))
        names = [t.name for t in core]
        if len(set(names)) != len(names):
            raise InvalidRequest("tool names must be unique", param="tools")
        choice = self.tool_choice
        if choice is None or choice.type in ("auto", "none"):
            return core, choice.type if choice else "auto"
        if not core:
            raise InvalidRequest(f"tool_choice {choice.type} needs tools to choose from", param="tool_choice")
        if choice.type == "any":
            return core, "required"
        if choice.name not in names:
            raise InvalidRequest(
                f"tool_choice names '{choice.name or ''}', which is not among the tools", param="tool_choice.name"
            )
        return core, choice.name

    @property
    def single_call(self) -> bool:
        """At most one tool call in the answer (``disable_parallel_tool_use``)."""
        return self.tool_choice is not None and self.tool_choice.disable_parallel_tool_use

    def chat_request(self, options: GenerationOptions) -> ChatRequest:
        self._check_supported()
        tools, tool_choice = self.core_tools()
        return ChatRequest(
            model=self.model,
            messages=self.core_messages(),
            options=options,
            tools=tools,
            tool_choice=tool_choice,
            keep_alive=keep_alive_seconds(self.keep_alive),
            thinking=self.thinking.to_core() if self.thinking else requested_thinking(),
            template_kwargs=template_variables(self.chat_template_kwargs),
            # a last assistant turn is a prefill the model continues, as Anthropic and llama-server serve it
            ending="continue" if self.messages and self.messages[-1].role == "assistant" else "reply",
        )

    @property
    def shows_thinking(self) -> bool:
        """Whether the answer's thinking blocks carry the thinking's text (``display`` not ``omitted``)."""
        return self.thinking is None or self.thinking.display != "omitted"


class MessagesBody(_Conversation):
    """``POST /v1/messages``."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float = Field(default_factory=lambda: min(default_temperature(0.8), 1.0), ge=0.0, le=1.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    top_k: int = Field(40, ge=0)
    stream: bool = False
    output_config: OutputConfigWire | None = None
    output_format: OutputFormatWire | None = None  # the structured-outputs beta's name for output_config.format
    # llama-server's extension of its OpenAI routes, taken here too (its /v1/messages drops it): a GBNF grammar
    grammar: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _model_parameters(cls, data: Any) -> Any:
        return fill(data, ANTHROPIC)

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(self.stop_sequences or ())

    def _response_format(self) -> ResponseFormat:
        given = (self.output_config.format if self.output_config else None) or self.output_format
        if self.grammar:
            if given is not None:
                raise InvalidRequest("Cannot use both json_schema and grammar", param="grammar")
            return ResponseFormat("grammar", grammar=self.grammar)
        return ResponseFormat("json_schema", given.schema_) if given is not None else ResponseFormat()

    def to_core(self) -> ChatRequest:
        stops = list(self.stops)
        check_stops(stops, param="stop_sequences")
        options = GenerationOptions(
            sampling=SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k),
            max_tokens=self.max_tokens,  # past the context: served until it is full, as llama-server does
            stop=tuple(stops),
            response_format=self._response_format(),
        )
        return self.chat_request(options)


class CountTokensBody(_Conversation):
    """``POST /v1/messages/count_tokens``: the prompt ``/v1/messages`` would give the model, counted."""

    def to_core(self) -> ChatRequest:
        return self.chat_request(GenerationOptions())
