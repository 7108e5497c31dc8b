"""Chat templates: the model's own Jinja template from its GGUF metadata, rendered in a sandbox.

A template can call only the few helpers given here; the immutable sandbox keeps it away from Python
internals, attribute tricks and the filesystem (there is no loader, so ``include`` and ``import`` fail).

A model without a template gets a documented fallback:
- if its vocabulary has ChatML's control tokens, ChatML (what such models were tuned on);
- otherwise a plain transcript (``System:``/``User:``/``Assistant:`` lines) that a base model can continue,
  with ``\\nUser:`` as a stop string so the reply ends where the model starts the next turn.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localinfer.backends.base import ModelFacts
from localinfer.engine.tools import described_tools, openai_tools, template_message
from localinfer.errors import ConfigError, InvalidRequest
from localinfer.types import ChatMessage, Thinking, ThinkingMarkers, Tool

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
AS_TEMPLATE_HAS_IT = Thinking()  # a chat that asks nothing of a reasoning model's thinking
TRANSCRIPT_TEMPLATE = (
    "{% for message in messages %}{{ message.role | capitalize }}: {{ message.content }}\n\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def builtin_template_names() -> list[str]:
    """The names of llama.cpp's built-in chat templates (``chatml``, ``llama3``...)."""
    from localinfer.backends.llamacpp.chat_builtin import builtin_template_names as names

    return names()


def check_template_source(source: str, given_as: str) -> None:
    """Raises ConfigError when ``source`` is not a Jinja template that parses."""
    try:
        _environment().from_string(source)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"{given_as}: the chat template does not parse: {exc}", hint="fix the Jinja text") from None


class Template(Protocol):
    """What a model's chats render with: its Jinja template, or one of llama.cpp's built-in ones."""

    kind: str

    @property
    def knows_tools(self) -> bool: ...

    def render(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...] = (),
        thinking: Thinking = AS_TEMPLATE_HAS_IT,
        variables: Mapping[str, Any] | None = None,
    ) -> RenderedPrompt: ...


def chat_template(facts: ModelFacts, override: str | None = None) -> Template:
    """The template a model's chats render with: ``override`` (a name of llama.cpp's built-in templates, or Jinja
    text) when given, else the model's own (or the documented fallback)."""
    if override is None:
        return ChatTemplate(facts)
    if "{" not in override:
        return BuiltinChatTemplate(override, facts)
    return ChatTemplate(dataclasses.replace(facts, chat_template=override))


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    stop: tuple[str, ...]
    add_special: bool
    thinking_open: bool = False  # it ends inside a reasoning model's thinking: the reply starts there


def with_thinking(text: str, markers: ThinkingMarkers | None, enabled: bool | None) -> tuple[str, bool]:
    """A rendered prompt as a reasoning model (of ``markers``) gets it, and whether the reply starts inside its
    thinking. Thinking turned off (``enabled`` False) where the template did not turn it off itself: the block the
    template opened is closed, or an empty one written, as Qwen3's template writes it (``<think>\n\n</think>``),
    so the model answers at once."""
    if markers is None:
        return text, False
    if markers.harmony:  # no switch in gpt-oss's template: it always thinks, as llama-server and Ollama serve it
        return text, text.endswith(markers.open)
    opened = text.rstrip().endswith(markers.open)
    if enabled is not False:
        return text, opened
    if opened:
        return f"{text.rstrip()}\n\n{markers.close}\n\n", False
    if not text.rstrip().endswith(markers.close):
        text = f"{text}{markers.open}\n\n{markers.close}\n\n"
    return text, False


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    return env


def _raise_exception(message: str) -> NoReturn:
    raise InvalidRequest(f"the model's chat template refused the messages: {message}", param="messages")


def _strftime_now(fmt: str) -> str:
    return dt.datetime.now().strftime(fmt)


class ChatTemplate:
    """Renders messages for one model. Raises InvalidRequest when the template fails on the messages."""

    def __init__(self, facts: ModelFacts) -> None:
        self._facts = facts
        self._stop: tuple[str, ...]
        self._knows_tools = bool(facts.chat_template) and "tools" in (facts.chat_template or "")
        if facts.chat_template:
            source, self.kind, self._stop = facts.chat_template, "model", ()
        elif facts.has_chatml_tokens:
            source, self.kind, self._stop = CHATML_TEMPLATE, "chatml-fallback", ()
        else:
            source, self.kind, self._stop = TRANSCRIPT_TEMPLATE, "transcript-fallback", ("\nUser:",)
        env = _environment()
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            self._template = env.from_string(CHATML_TEMPLATE if facts.has_chatml_tokens else TRANSCRIPT_TEMPLATE)
            self.kind = f"fallback (the model's template does not parse: {exc})"
            self._knows_tools = False

    @property
    def knows_tools(self) -> bool:
        """The model's own template renders tools (and the calls and answers that go with them)."""
        return self._knows_tools

    def render(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...] = (),
        thinking: Thinking = AS_TEMPLATE_HAS_IT,
        variables: Mapping[str, Any] | None = None,
    ) -> RenderedPrompt:
        """The prompt for ``messages``, with ``tools`` offered to the model (see engine/tools.py for a template
        that knows none), and more ``variables`` for the template (a request's ``chat_template_kwargs``); a
        reasoning model's thinking switched and its effort given as ``thinking`` says (``enable_thinking``,
        ``reasoning_effort``, which the templates of Qwen3, gpt-oss and others read)."""
        uses_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in messages)
        if uses_tools and not self._knows_tools:
            messages, tools = described_tools(messages, tools), ()
        context: dict[str, Any] = {
            **(variables or {}),  # never in place of what follows
            "messages": [template_message(m, self._facts.thinking) for m in messages],
            "add_generation_prompt": True,
            "bos_token": self._facts.bos_token,
            "eos_token": self._facts.eos_token,
            "tools": openai_tools(tools) if tools else None,
            "documents": None,
        }
        if thinking.enabled is not None:
            context["enable_thinking"] = thinking.enabled
        if thinking.effort is not None:
            context["reasoning_effort"] = thinking.effort
        try:
            text = self._template.render(**context)
        except InvalidRequest:
            raise
        except Exception as exc:  # a template can fail in any way: sandbox refusals, type errors, bad filters
            raise InvalidRequest(f"the model's chat template failed: {exc}", param="messages") from exc
        # A template that writes BOS itself must not get a second one from the tokenizer.
        starts_with_bos = bool(self._facts.bos_token) and text.startswith(self._facts.bos_token)
        text, thinking_open = with_thinking(text, self._facts.thinking, thinking.enabled)
        return RenderedPrompt(text, self._stop, add_special=not starts_with_bos, thinking_open=thinking_open)


class BuiltinChatTemplate:
    """One of llama.cpp's built-in templates, by name, rendered by llama.cpp (as llama-server renders one without
    Jinja). It writes no tools: they are described in a system turn, as for a model's template that knows none."""

    def __init__(self, name: str, facts: ModelFacts) -> None:
        self.kind = f"llama.cpp's built-in {name}"
        self._name = name
        self._facts = facts

    @property
    def knows_tools(self) -> bool:
        return False

    def render(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...] = (),
        thinking: Thinking = AS_TEMPLATE_HAS_IT,
        variables: Mapping[str, Any] | None = None,
    ) -> RenderedPrompt:
        """As ``ChatTemplate.render``; llama.cpp's built-in templates read no variables, so thinking is only
        switched off (by an empty block after the prompt)."""
        from localinfer.backends.llamacpp.chat_builtin import apply_builtin_template

        if tools or any(m.tool_calls or m.role == "tool" for m in messages):
            messages = described_tools(messages, tools)
        turns = [(m.role, m.content) for m in messages]
        try:
            text = apply_builtin_template(self._name, turns)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="messages") from exc
        starts_with_bos = bool(self._facts.bos_token) and text.startswith(self._facts.bos_token)
        text, thinking_open = with_thinking(text, self._facts.thinking, thinking.enabled)
        return RenderedPrompt(text, (), add_special=not starts_with_bos, thinking_open=thinking_open)
