"""``Toolbox``: what the app's chat knows of tools: the MCP hub (servers connected with the app, or with
``/mcp connect``), the limits from the settings, and, per conversation, which tools are offered and which run
without asking."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.loop import ToolPolicy
from localinfer.app.tools.sessions import ToolInfo
from localinfer.app.tui.conversations import ConversationSettings


@dataclass
class Toolbox:
    hub: McpHub
    steps: int = 8  # the tool_steps setting: a conversation may set its own
    output_max: int = 16_000
    timeout: float = 120.0
    connect_at_start: bool = True

    def enabled(self, settings: ConversationSettings) -> Callable[[ToolInfo], bool]:
        """Whether a tool is offered in a conversation: neither its server nor itself is turned off there."""
        off = set(settings.tools_off)
        return lambda tool: tool.server not in off and tool.key not in off

    def tools(self, settings: ConversationSettings) -> list[ToolInfo]:
        return self.hub.tools(self.enabled(settings))

    def all_tools(self) -> list[ToolInfo]:
        return self.hub.tools()

    def policy(self, settings: ConversationSettings) -> ToolPolicy:
        """The tools a conversation runs without asking: its own choices and each server's ``autoApprove``."""
        allowed = set(settings.auto_approve)
        for name, spec in self.hub.specs.items():
            allowed.update(f"{name}/{tool}" for tool in spec.auto_approve)
        return ToolPolicy(allowed)

    def steps_for(self, settings: ConversationSettings) -> int:
        return settings.tool_steps or self.steps

    def status(self) -> list[str]:
        """A line per server declared: connected with how many tools, or not."""
        lines = []
        for name, spec in self.hub.specs.items():
            session = self.hub.sessions.get(name)
            if session is not None and session.connected:
                lines.append(f"{name}: connected, {len(session.tools)} tools")
            else:
                lines.append(f"{name}: " + ("disabled" if spec.disabled else "not connected") + f" ({spec.shown()})")
        return lines
