"""Chat templates: the model's own Jinja template from its GGUF metadata, rendered in a sandbox.

A template can call only the few helpers given here; the immutable sandbox keeps it away from Python
internals, attribute tricks and the filesystem (there is no loader, so ``include`` and ``import`` fail).

A model without a template gets a documented fallback:
- if its vocabulary has ChatML's control tokens, ChatML (what such models were tuned on);
- otherwise a plain transcript (``System:``/``User:``/``Assistant:`` lines) that a base model can continue,
  with ``\\nUser:`` as a stop string so the reply ends where the model starts the next turn.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, NoReturn

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localinfer.backends.base import ModelFacts
from localinfer.errors import InvalidRequest
from localinfer.types import ChatMessage

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TRANSCRIPT_TEMPLATE = (
    "{% for message in messages %}{{ message.role | capitalize }}: {{ message.content }}\n\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    stop: tuple[str, ...]
    add_special: bool


def _raise_exception(message: str) -> NoReturn:
    raise InvalidRequest(f"the model's chat template refused the messages: {message}", param="messages")


def _strftime_now(fmt: str) -> str:
    return dt.datetime.now().strftime(fmt)


class ChatTemplate:
    """Renders messages for one model. Raises InvalidRequest when the template fails on the messages."""

    def __init__(self, facts: ModelFacts) -> None:
        self._facts = facts
        self._stop: tuple[str, ...]
        if facts.chat_template:
            source, self.kind, self._stop = facts.chat_template, "model", ()
        elif facts.has_chatml_tokens:
            source, self.kind, self._stop = CHATML_TEMPLATE, "chatml-fallback", ()
        else:
            source, self.kind, self._stop = TRANSCRIPT_TEMPLATE, "transcript-fallback", ("\nUser:",)
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            self._template = env.from_string(CHATML_TEMPLATE if facts.has_chatml_tokens else TRANSCRIPT_TEMPLATE)
            self.kind = f"fallback (the model's template does not parse: {exc})"

    def render(self, messages: tuple[ChatMessage, ...]) -> RenderedPrompt:
        context: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "add_generation_prompt": True,
            "bos_token": self._facts.bos_token,
            "eos_token": self._facts.eos_token,
            "tools": None,
            "documents": None,
        }
        try:
            text = self._template.render(**context)
        except InvalidRequest:
            raise
        except Exception as exc:  # a template can fail in any way: sandbox refusals, type errors, bad filters
            raise InvalidRequest(f"the model's chat template failed: {exc}", param="messages") from exc
        # A template that writes BOS itself must not get a second one from the tokenizer.
        starts_with_bos = bool(self._facts.bos_token) and text.startswith(self._facts.bos_token)
        return RenderedPrompt(text=text, stop=self._stop, add_special=not starts_with_bos)
