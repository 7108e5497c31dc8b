"""What a request asks of a reasoning model's thinking, in every dialect: switched on or off, budgeted, kept apart
from the answer or not; over the server's defaults (llama-server's ``--reasoning``, ``--reasoning-budget``,
``--reasoning-format``, ``--chat-template-kwargs``). The engine does the rest (engine/thinking_split.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from localinfer.app.server.core.defaults import current_defaults
from localinfer.errors import InvalidRequest
from localinfer.types import Thinking

REASONING_FORMATS: Final = ("auto", "deepseek", "none")  # llama-server's, but its deepseek-legacy
SWITCHES: Final = {"on": True, "off": False, "auto": None}


def requested_thinking(
    *,
    enabled: bool | None = None,
    budget: int | None = None,
    effort: str | None = None,
    reasoning_format: str | None = None,
    budget_param: str = "reasoning_budget_tokens",
) -> Thinking:
    """The thinking a request asks for (None: as the server's defaults say). A ``budget`` below 0 is no limit;
    0 ends the thinking at once. Raises InvalidRequest for a reasoning format we do not have, naming the field."""
    defaults = current_defaults()
    if enabled is None:
        enabled = SWITCHES.get(defaults.reasoning)
    if budget is None or budget < 0:
        budget = defaults.reasoning_budget
    chosen = reasoning_format or defaults.reasoning_format
    if chosen not in REASONING_FORMATS:
        raise InvalidRequest(
            f"reasoning_format '{chosen}' is not supported: use one of {', '.join(REASONING_FORMATS)}",
            param="reasoning_format",
        )
    if budget is not None and budget > 1_000_000_000:
        raise InvalidRequest(f"{budget_param} is {budget}: too many tokens", param=budget_param)
    return Thinking(enabled=enabled, budget=budget if budget >= 0 else None, effort=effort, separate=chosen != "none")


def template_variables(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The chat template's extra variables: the server's (``--chat-template-kwargs``), then the request's."""
    return {**current_defaults().template_kwargs, **(given or {})}
