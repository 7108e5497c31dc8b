"""Ollama's ``think`` field on ``/api/chat`` and ``/api/generate``, as Ollama reads it (its ``api.ThinkValue``).

``true`` or ``false``, or a level, ``"low"``, ``"medium"``, ``"high"`` or ``"max"``: a level turns thinking on and
is given to the chat template as its reasoning effort (``reasoning_effort``, which gpt-oss's template reads; others
read none, so for them a level is ``true``). Absent, a model that reasons thinks (Ollama's default since thinking
came apart from the answer), unless the server was started with ``--reasoning off``. ``false`` turns it off through
the template and leaves whatever the model still writes in the answer, as Ollama does. Thinking asked of a model
that does not reason is Ollama's 400, ``"<model>" does not support thinking``. gpt-oss (a harmony model) always
thinks: ``true`` and ``false`` change nothing there and its thinking still comes apart, ``"max"`` is ``"high"`` (the
levels its template knows), as Ollama serves it.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from localinfer.app.server.core.reasoning import requested_thinking
from localinfer.errors import InvalidRequest
from localinfer.types import ChatRequest, Thinking, ThinkingMarkers

LEVELS: Final = ("high", "medium", "low", "max")  # Ollama's order, in its error message

ThinkValue = bool | str | None


def checked(value: ThinkValue) -> ThinkValue:
    """``value`` if Ollama takes it; raises InvalidRequest with Ollama's message otherwise."""
    if isinstance(value, str) and value not in LEVELS:
        raise InvalidRequest(
            f'invalid think value: "{value}" (must be "high", "medium", "low", "max", true, or false)', param="think"
        )
    return value


def asks_thinking(value: ThinkValue) -> bool:
    """Whether ``value`` turns thinking on: ``true`` or a level."""
    return value is True or isinstance(value, str)


def requested(value: ThinkValue) -> Thinking:
    """The thinking ``value`` asks for, over the server's defaults. Raises InvalidRequest for a value Ollama
    refuses."""
    value = checked(value)
    if value is False:  # off, and nothing taken out of the answer: Ollama parses no thinking then
        return requested_thinking(enabled=False, reasoning_format="none")
    return requested_thinking(enabled=None if value is None else True, effort=value if isinstance(value, str) else None)


def for_model(request: ChatRequest, value: ThinkValue, name: str, markers: ThinkingMarkers | None) -> ChatRequest:
    """``request`` as the model it goes to (whose thinking ``markers`` are None when it does not reason) takes it:
    thinking on, for a model that reasons, where neither the request nor the server (``--reasoning``,
    ``--chat-template-kwargs``) said otherwise. Raises InvalidRequest as ``refuse_unless_reasoning``."""
    refuse_unless_reasoning(value, name, markers)
    if markers is not None and markers.harmony:
        thinking = requested(None if isinstance(value, bool) else value)
        effort = "high" if thinking.effort == "max" else thinking.effort
        return dataclasses.replace(request, thinking=dataclasses.replace(thinking, effort=effort))
    if markers is None or request.thinking.enabled is not None or "enable_thinking" in request.template_kwargs:
        return request
    return dataclasses.replace(request, thinking=dataclasses.replace(request.thinking, enabled=True))


def refuse_unless_reasoning(value: ThinkValue, name: str, markers: ThinkingMarkers | None) -> None:
    """Ollama's 400, naming the model as the request ``name``d it, for thinking asked of a model that does not
    reason (``markers`` None)."""
    if markers is None and asks_thinking(value):
        raise InvalidRequest(f'"{name}" does not support thinking', param="think")
