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
import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import jinja2

from localinfer.backends.base import ModelFacts
from localinfer.engine.continuation import continued, reasoning_tags
from localinfer.engine.template_env import dates, environment
from localinfer.engine.tools import described_tools, openai_tools, template_message
from localinfer.errors import ConfigError, InvalidRequest
from localinfer.types import ChatMessage, PromptEnd, Thinking, ThinkingMarkers, Tool

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SYSTEM_PROBE = "System message, probed"  # a template that writes system turns writes this one
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
        environment().from_string(source)
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
        ending: PromptEnd = "reply",
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


class _Rendering(ABC):
    """What a template's render does whatever writes its text (``_text``): tools a template does not know
    described in a system turn, the turns it takes (``_turns``), the last turn continued or the reply opened, a
    reasoning model's thinking switched, the BOS token left to the tokenizer or kept."""

    kind: str
    _facts: ModelFacts
    _stop: tuple[str, ...] = ()
    _continues_turns: ClassVar[bool]  # a continued last turn is its turns before, the reply's opening, its text
    _bos_to_tokenizer: ClassVar[bool]  # a BOS text written first is left to the tokenizer (one BOS, never two)

    @property
    @abstractmethod
    def knows_tools(self) -> bool:
        """The template renders tools (and the calls and answers that go with them)."""

    @abstractmethod
    def _text(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...],
        thinking: Thinking,
        variables: Mapping[str, Any] | None,
        *,
        generation_prompt: bool,
    ) -> str:
        """The template's text for ``messages``. Raises InvalidRequest when the template fails."""

    def _turns(self, messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
        """``messages`` as the template takes them."""
        return messages

    def _reasoning_tags(self) -> tuple[str, str] | None:
        """The tags around an assistant turn's thinking, for a continued turn."""
        return None

    def render(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...] = (),
        thinking: Thinking = AS_TEMPLATE_HAS_IT,
        variables: Mapping[str, Any] | None = None,
        ending: PromptEnd = "reply",
    ) -> RenderedPrompt:
        """The prompt for ``messages``, with ``tools`` offered to the model (see engine/tools.py for a template
        that knows none), and more ``variables`` for the template (a request's ``chat_template_kwargs``); a
        reasoning model's thinking switched and its effort given as ``thinking`` says (``enable_thinking``,
        ``reasoning_effort``, which the templates of Qwen3, gpt-oss and others read); ending as ``ending`` says.
        Rendered as llama-server renders it. Raises InvalidRequest when the template fails on the messages."""
        uses_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in messages)
        if uses_tools and not self.knows_tools:
            messages, tools = described_tools(messages, tools), ()
        messages = self._turns(messages)
        thinking_open = False
        if ending == "continue" and messages and self._continues_turns:
            head, last = messages[:-1], messages[-1]
            closed = self._text(head, tools, thinking, variables, generation_prompt=False)
            opened = self._text(head, tools, thinking, variables, generation_prompt=True)
            text, thinking_open = continued(closed, opened, last, self._reasoning_tags())
        else:
            text = self._text(messages, tools, thinking, variables, generation_prompt=ending == "reply")
        bos = self._facts.bos_token
        if self._bos_to_tokenizer and self._facts.add_bos and bos and text.startswith(bos):
            text = text[len(bos) :]  # the tokenizer adds it, as llama.cpp strips it
        if ending == "reply":
            text, thinking_open = with_thinking(text, self._facts.thinking, thinking.enabled)
        # A template that writes BOS for a model whose tokenizer adds none: its text is the one BOS token.
        return RenderedPrompt(
            text, self._stop, add_special=not (bos and text.startswith(bos)), thinking_open=thinking_open
        )


class ChatTemplate(_Rendering):
    """Renders messages for one model with its Jinja template (or the fallback): the BOS text it writes first is
    left to the tokenizer, and the last turn continued is the turns before it, the template's generation prompt and
    that turn's text. Raises InvalidRequest when the template fails on the messages."""

    _continues_turns = True
    _bos_to_tokenizer = True

    def __init__(self, facts: ModelFacts) -> None:
        self._facts = facts
        self._knows_tools = bool(facts.chat_template) and "tools" in (facts.chat_template or "")
        if facts.chat_template:
            source, self.kind, self._stop = facts.chat_template, "model", ()
        elif facts.has_chatml_tokens:
            source, self.kind, self._stop = CHATML_TEMPLATE, "chatml-fallback", ()
        else:
            source, self.kind, self._stop = TRANSCRIPT_TEMPLATE, "transcript-fallback", ("\nUser:",)
        env = environment()
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

    def _reasoning_tags(self) -> tuple[str, str] | None:
        return self._tags

    @functools.cached_property
    def _tags(self) -> tuple[str, str] | None:
        """The tags the template writes around an assistant turn's thinking (engine/continuation.py), else the
        model's own thinking markers."""
        found = reasoning_tags(
            lambda messages, thinking, opened: self._text(
                messages, (), Thinking(enabled=thinking), None, generation_prompt=opened
            )
        )
        markers = self._facts.thinking
        if found is None and markers is not None and not markers.harmony:
            return markers.open, markers.close
        return found

    @functools.cached_property
    def _system_role(self) -> bool:
        """The template writes a system turn (Gemma 2's refuses one), found as llama.cpp finds it: by rendering
        one."""
        probe = (ChatMessage("system", SYSTEM_PROBE), ChatMessage("user", "User message"))
        try:
            return SYSTEM_PROBE in self._text(probe, (), AS_TEMPLATE_HAS_IT, None, generation_prompt=True)
        except InvalidRequest:
            return False

    def _turns(self, messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
        if messages and messages[0].role == "system" and not self._system_role:
            return without_system_turn(messages)
        return messages

    def _text(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...],
        thinking: Thinking,
        variables: Mapping[str, Any] | None,
        *,
        generation_prompt: bool,
    ) -> str:
        """The template's text for ``messages``, given the variables llama.cpp's renderer gives (and in its order:
        ``chat_template_kwargs`` over the rest, ``add_generation_prompt`` only when true). Raises InvalidRequest
        when the template fails."""
        context: dict[str, Any] = {
            "messages": [template_message(m, self._facts.thinking) for m in messages],
            "bos_token": self._facts.bos_token,
            "eos_token": self._facts.eos_token,
            # llama-server: on unless turned off (for a template that reads it, one that can think)
            "enable_thinking": thinking.enabled is not False,
        }
        if tools:
            context["tools"] = openai_tools(tools)
        context.update(dates())
        if thinking.effort is not None:
            context["reasoning_effort"] = thinking.effort
        context.update(variables or {})
        if thinking.enabled is not None:  # what the request decided, over a kwarg it overrode
            context["enable_thinking"] = thinking.enabled
        if generation_prompt:
            context["add_generation_prompt"] = True
        try:
            return self._template.render(**context)
        except InvalidRequest:
            raise
        except Exception as exc:  # a template can fail in any way: sandbox refusals, type errors, bad filters
            raise InvalidRequest(f"the model's chat template failed: {exc}", param="messages") from exc


def without_system_turn(messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
    """``messages`` for a template without a system turn, as llama.cpp gives them to one: the system text put
    before the next turn's on a line of its own (dropped when nothing follows)."""
    system, rest = messages[0], messages[1:]
    if not rest:
        return rest
    first = dataclasses.replace(rest[0], content=f"{system.content}\n{rest[0].content}")
    return (first, *rest[1:])


class BuiltinChatTemplate(_Rendering):
    """One of llama.cpp's built-in templates, by name, rendered by llama.cpp (as llama-server renders one without
    Jinja). It writes no tools: they are described in a system turn, as for a model's template that knows none. It
    reads no variables, so thinking is only switched off (by an empty block after the prompt). A prompt that does
    not end with the reply's opening ends as the turns end (as llama-server without Jinja renders it)."""

    _continues_turns = False
    _bos_to_tokenizer = False

    def __init__(self, name: str, facts: ModelFacts) -> None:
        self.kind = f"llama.cpp's built-in {name}"
        self._name = name
        self._facts = facts

    @property
    def knows_tools(self) -> bool:
        return False

    def _text(
        self,
        messages: tuple[ChatMessage, ...],
        tools: tuple[Tool, ...],
        thinking: Thinking,
        variables: Mapping[str, Any] | None,
        *,
        generation_prompt: bool,
    ) -> str:
        from localinfer.backends.llamacpp.chat_builtin import apply_builtin_template

        try:
            return apply_builtin_template(
                self._name, [(m.role, m.content) for m in messages], add_assistant=generation_prompt
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="messages") from exc
