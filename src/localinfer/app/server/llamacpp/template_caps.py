"""What a model's chat template does with a reasoning model's thinking, for ``/props``' ``chat_template_caps``.

llama-server lists two such capabilities there, found by rendering the template on probe conversations
(llama.cpp's common/jinja/caps.cpp), and they are found here the same way, through the template the model's
chats render with:

- ``supports_preserve_reasoning``: an earlier assistant turn's thinking (``reasoning_content``, not only the last
  turn's) is written into the prompt;
- ``supports_reasoning_effort``: the template reads ``reasoning_effort`` (here: the prompt for ``low`` differs from
  the one for ``high``; llama.cpp watches the variable being read).

``supports_thinking`` is localinfer's: the model reasons (its file's thinking markers), which llama-server decides
at start (``common_chat_templates_support_enable_thinking``) but lists nowhere. A template that refuses a probe
conversation has the capability it probes for as false.
"""

from __future__ import annotations

from typing import Final

from localinfer.backends.base import ModelFacts
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest
from localinfer.types import ChatMessage, ChatRequest, Thinking

PLACEHOLDER: Final = "<earlier thinking placeholder>"
USER: Final = ChatMessage("user", "User message")
EARLIER_THINKING: Final = (
    USER,
    ChatMessage("assistant", "Assistant message", reasoning=PLACEHOLDER),
    USER,
    ChatMessage("assistant", "Assistant message", reasoning="Reasoning content"),
    USER,
)


async def reasoning_caps(engine: Engine, model: str, facts: ModelFacts) -> dict[str, bool]:
    """The thinking capabilities of loaded ``model`` (whose facts are ``facts``), as ``/props`` lists them."""
    kept = await _prompt(engine, ChatRequest(model, EARLIER_THINKING, thinking=Thinking(enabled=True)))
    low = await _prompt(engine, ChatRequest(model, (USER,), thinking=Thinking(enabled=True, effort="low")))
    high = await _prompt(engine, ChatRequest(model, (USER,), thinking=Thinking(enabled=True, effort="high")))
    return {
        "supports_preserve_reasoning": kept is not None and PLACEHOLDER in kept,
        "supports_reasoning_effort": low != high,
        "supports_thinking": facts.thinking is not None,
    }


async def _prompt(engine: Engine, request: ChatRequest) -> str | None:
    """The prompt ``request`` renders to; None when the template refuses it."""
    try:
        return (await engine.render(request)).text
    except InvalidRequest:
        return None
