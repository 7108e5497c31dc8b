"""OpenAI's Responses API request (``POST /v1/responses``) as clients send it (Codex CLI, the openai SDK's agents),
translated into a core ``ChatRequest`` here and nowhere else, as llama-server's
``server_chat_convert_responses_to_chatcmpl`` turns it into a chat completion.

``instructions`` becomes a system turn ahead of ``input``; ``input`` is a string (one user turn) or a list of items:
``message`` items (roles user, assistant, system, developer; string content or ``input_text`` / ``output_text``
parts), ``function_call`` items (merged into the assistant turn before them, as llama-server merges them) and
``function_call_output`` items (``tool`` turns). ``tools`` are the API's flat function tools, ``tool_choice``
``auto``, ``none``, ``required`` or ``{"type": "function", "name"}``; ``text.format`` asks for JSON
(``json_object``, ``json_schema``); ``max_output_tokens`` bounds the answer. The sampling fields and llama.cpp's
extensions (``top_k``, ``min_p``, ``seed``, ``stop``, ``grammar``...) are read as the chat route reads them.

What cannot be honoured is a 400 naming the field: ``previous_response_id`` and ``conversation`` (no response or
conversation is kept), ``background``, ``prompt`` (stored prompts), built-in tools (``web_search``,
``file_search``...), images, files and audio in the input, and other item types. ``store`` is accepted and ignored:
nothing is stored, and the answer does not depend on it (a later ``previous_response_id`` gets its 400).
``include`` (extra data of items this server never produces) is accepted and ignored, except ``include`` asking for
log-probabilities, a 400.

A reasoning model's thinking (core/reasoning.py): ``reasoning.effort`` is the chat route's ``reasoning_effort``
(``"none"`` turns thinking off; any other effort is given to the template, as llama-server gives it);
``reasoning.summary`` is accepted and ignored (no summary is written: the thinking comes whole as the reasoning
item's content). The chat route's extensions apply too (``reasoning_format``, ``reasoning_budget_tokens``,
``chat_template_kwargs``...), as llama-server passes them through. A ``reasoning`` item a client sends back (an
earlier turn's thinking) goes back as that assistant turn's thinking, for the template to keep or drop, as
llama-server gives it back: its ``reasoning_text`` content (an item without any, one OpenAI's API encrypted, adds
nothing).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from localinfer.app.server.core.media import joined, media_part
from localinfer.app.server.core.tools import FunctionWire, ToolWire
from localinfer.app.server.core.wire import ClientBody, keep_alive_seconds
from localinfer.app.server.openai.tools_wire import CalledFunctionWire, NamedChoice, tools_to_core
from localinfer.app.server.openai.wire import ReasoningWire, _SamplingWire
from localinfer.errors import InvalidRequest
from localinfer.types import ChatMessage, ChatRequest, MediaPart, ResponseFormat, ToolCall

TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
LOGPROBS_INCLUDE = "message.output_text.logprobs"


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class ContentPart(_Wire):
    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None  # an input_image's picture: a data: URI (or a URL, with --allow-image-urls)
    file_id: str | None = None


def _with_images(content: str | list[ContentPart], param: str) -> tuple[str, tuple[MediaPart, ...]]:
    """A message's text and its ``input_image`` parts, joined as llama-server joins a chat message's parts."""
    if isinstance(content, str) or all(part.type != "input_image" for part in content):
        return _text(content, param), ()
    parts: list[str | MediaPart] = []
    for j, part in enumerate(content):
        if part.type != "input_image":
            parts.append(_text([part], param))
        elif part.image_url is None:
            raise InvalidRequest("an input_image needs its image_url (file_id is not supported)", param=f"{param}.{j}")
        else:
            parts.append(media_part(part.image_url, param=f"{param}.{j}", kind="image"))
    return joined(parts)


def _text(content: str | list[ContentPart], param: str) -> str:
    """The text of a message's or a tool output's content. Raises InvalidRequest naming the part for an image, a
    file, audio or any other part that is not text."""
    if isinstance(content, str):
        return content
    pieces = []
    for j, part in enumerate(content):
        if part.type in TEXT_PARTS:
            pieces.append(part.text or "")
        elif part.type == "refusal":
            pieces.append(part.refusal or "")
        else:
            kind = part.type.removeprefix("input_")
            raise InvalidRequest(f"{kind} content is not supported: only text", param=f"{param}.{j}")
    return "".join(pieces)


class MessageItem(_Wire):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart] = ""


class FunctionCallItem(_Wire):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = "{}"

    def to_core(self, param: str) -> ToolCall:
        try:
            arguments = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise InvalidRequest("a function call's arguments must be a JSON object", param=f"{param}.arguments")
        return ToolCall(self.call_id, self.name, arguments)


class FunctionCallOutputItem(_Wire):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


class ReasoningItem(_Wire):
    type: Literal["reasoning"]
    content: list[ContentPart] | None = None  # reasoning_text parts: the thinking
    summary: list[ContentPart] | None = None

    @property
    def text(self) -> str:
        return "".join(part.text or "" for part in self.content or () if part.type == "reasoning_text")


class ReasoningRequest(_Wire):
    """The Responses API's ``reasoning`` request field."""

    effort: str | None = None
    summary: str | None = None  # a summary of the thinking: none is written
    generate_summary: str | None = None  # its older name


class OtherItem(_Wire):
    type: str = ""


def _item_kind(value: Any) -> str:
    """Which item ``value`` is: by its ``type``, or a message when it has a ``role`` and no type."""
    if isinstance(value, dict):
        kind = value.get("type") or ("message" if "role" in value else "")
    else:
        kind = getattr(value, "type", "")
    return kind if kind in ("message", "function_call", "function_call_output", "reasoning") else "other"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


def input_messages(items: list[InputItem]) -> list[ChatMessage]:
    """The chat turns ``items`` say. An assistant message or a function call right after an assistant turn joins
    it, as llama-server joins them. Raises InvalidRequest naming the item."""
    messages: list[ChatMessage] = []
    names: dict[str, str] = {}  # call id -> function name, for the tool turn that answers it
    for i, item in enumerate(items):
        param = f"input.{i}"
        follows_assistant = bool(messages) and messages[-1].role == "assistant"
        if isinstance(item, MessageItem):
            text, media = _with_images(item.content, f"{param}.content")
            if item.role == "assistant" and follows_assistant:
                messages[-1] = dataclasses.replace(messages[-1], content=messages[-1].content + text)
            else:
                messages.append(ChatMessage("system" if item.role == "developer" else item.role, text, media=media))
        elif isinstance(item, FunctionCallItem):
            call = item.to_core(param)
            names[call.id] = call.name
            if follows_assistant:
                messages[-1] = dataclasses.replace(messages[-1], tool_calls=(*messages[-1].tool_calls, call))
            else:
                messages.append(ChatMessage("assistant", "", tool_calls=(call,)))
        elif isinstance(item, FunctionCallOutputItem):
            text = _text(item.output, f"{param}.output")
            messages.append(ChatMessage("tool", text, tool_call_id=item.call_id, name=names.get(item.call_id)))
        elif isinstance(item, ReasoningItem):
            if not item.text:
                continue  # nothing to give back (OpenAI's encrypted thinking)
            if follows_assistant:
                messages[-1] = dataclasses.replace(messages[-1], reasoning=item.text)
            else:  # the turn it starts: its answer and calls join it
                messages.append(ChatMessage("assistant", "", reasoning=item.text))
        else:
            kind = item.type or "without a type"
            raise InvalidRequest(f"input items of type '{kind}' are not supported", param=param)
    return messages


class FunctionToolWire(_Wire):
    """The Responses API's function tool: flat, ``{"type": "function", "name", "description", "parameters"}``."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def to_chat(self) -> ToolWire:
        return ToolWire(function=FunctionWire(name=self.name, description=self.description, parameters=self.parameters))


class BuiltInToolWire(_Wire):
    type: str = ""


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", "")
    return "function" if kind == "function" else "built_in"


ToolItem = Annotated[
    Annotated[FunctionToolWire, Tag("function")] | Annotated[BuiltInToolWire, Tag("built_in")],
    Discriminator(_tool_kind),
]


class TextFormatWire(_Wire):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    def to_core(self) -> ResponseFormat:
        if self.type == "json_schema":
            if self.schema_ is None:
                raise InvalidRequest("text.format of type json_schema needs a schema", param="text.format.schema")
            return ResponseFormat("json_schema", self.schema_)
        return ResponseFormat(self.type)

    def echoed(self) -> dict[str, Any]:
        if self.type != "json_schema":
            return {"type": self.type}
        return self.model_dump(by_alias=True, exclude_none=True)


class TextWire(_Wire):
    format: TextFormatWire = Field(default_factory=TextFormatWire)


class ResponsesBody(_SamplingWire, ReasoningWire):
    input: str | list[InputItem]
    reasoning: ReasoningRequest | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    tools: list[ToolItem] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    text: TextWire = Field(default_factory=TextWire)
    include: list[str] | None = None
    metadata: dict[str, Any] | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool = False
    prompt: dict[str, Any] | None = None

    def _check_responses_fields(self) -> None:
        """Fields that would change the answer and cannot be honoured: a 400 naming the field."""
        if self.n != 1:
            raise InvalidRequest("n is not a field of the Responses API: a response has one output", param="n")
        if self.previous_response_id:
            raise InvalidRequest(
                "previous_response_id is not supported: no response is kept; send the whole conversation in input",
                param="previous_response_id",
            )
        if self.conversation:
            raise InvalidRequest(
                "conversation is not supported: no conversation is kept; send it in input", param="conversation"
            )
        if self.background:
            raise InvalidRequest("background responses are not supported", param="background")
        if self.prompt:
            raise InvalidRequest("stored prompts are not supported: send instructions and input", param="prompt")
        if LOGPROBS_INCLUDE in (self.include or ()):
            raise InvalidRequest(f"include: {LOGPROBS_INCLUDE} is not supported", param="include")
        for i, tool in enumerate(self.tools or ()):
            if isinstance(tool, BuiltInToolWire):
                kind = tool.type or "without a type"
                raise InvalidRequest(
                    f"built-in tools are not supported (tool '{kind}'): only function tools", param=f"tools.{i}"
                )

    def _tool_choice(self) -> str | NamedChoice | None:
        choice = self.tool_choice
        if not isinstance(choice, dict):
            return choice
        kind, name = choice.get("type"), choice.get("name")
        if kind != "function":
            raise InvalidRequest(f"tool_choice of type '{kind}' is not supported", param="tool_choice")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice of type function needs the function's name", param="tool_choice.name")
        return NamedChoice(function=CalledFunctionWire(name=name))

    def function_tools(self) -> list[FunctionToolWire]:
        return [tool for tool in self.tools or () if isinstance(tool, FunctionToolWire)]

    def to_core(self) -> ChatRequest:
        """The chat request this body asks for. Raises InvalidRequest naming the field it cannot honour."""
        self._check_responses_fields()
        if self.grammar and self.tools:  # llama-server's refusal: the tools' own grammar would be replaced
            raise InvalidRequest("Cannot use custom grammar constraints with tools.", param="grammar")
        tools, tool_choice = tools_to_core([t.to_chat() for t in self.function_tools()], self._tool_choice())
        messages = [ChatMessage("system", self.instructions)] if self.instructions is not None else []
        if isinstance(self.input, str):
            messages.append(ChatMessage("user", self.input))
        else:
            messages += input_messages(self.input)
        max_tokens = self.max_output_tokens if self.max_output_tokens is not None else self.max_tokens
        return ChatRequest(
            model=self.model,
            messages=tuple(messages),
            options=self._options(max_tokens, self.text.format.to_core()),
            tools=tools,
            tool_choice=tool_choice,
            keep_alive=keep_alive_seconds(self.keep_alive),
            priority=self.priority or "normal",
            thinking=self._thinking(self.reasoning.effort if self.reasoning else None),
            template_kwargs=self._template_variables(),
        )

    def _reasoning_echoed(self) -> dict[str, Any]:
        asked = self.reasoning or ReasoningRequest()
        return {"effort": asked.effort, "summary": asked.summary or asked.generate_summary}

    def echoed(self) -> dict[str, Any]:
        """The request's fields a response object repeats, as OpenAI's does."""
        return {
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "metadata": self.metadata or {},
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": self._reasoning_echoed(),
            "temperature": self.temperature,
            "text": {"format": self.text.format.echoed()},
            "tool_choice": self.tool_choice or "auto",
            "tools": [tool.model_dump(exclude_none=True) for tool in self.function_tools()],
            "top_p": self.top_p,
        }
