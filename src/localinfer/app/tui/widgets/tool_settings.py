"""The tools part of a conversation's settings (F2): which tools of the connected MCP servers are offered, which
run without asking, and the most rounds of calls in a reply."""

from __future__ import annotations

from dataclasses import replace

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.validation import Number
from textual.widgets import Input, Label, SelectionList

from localinfer.app.tools.sessions import ToolInfo
from localinfer.app.tui.conversations import ConversationSettings


class ToolSettings(Vertical):
    def __init__(self, settings: ConversationSettings, tools: list[ToolInfo], default_steps: int) -> None:
        super().__init__(classes="tool-settings")
        self.settings = settings
        self.tools = tools
        self.default_steps = default_steps

    def compose(self) -> ComposeResult:
        s = self.settings
        off = set(s.tools_off)
        with Horizontal(classes="tool-steps-row"):
            yield Label("Tool steps ")
            yield Input(
                str(s.tool_steps or ""),
                placeholder=f"{self.default_steps} (the setting)",
                id="tool-steps",
                validators=[Number(minimum=1, maximum=100)],
            )
        yield Label("Tools offered (space toggles)")
        yield SelectionList[str](
            *[(t.key, t.key, t.server not in off and t.key not in off) for t in self.tools], id="tools-on"
        )
        yield Label("Run without asking")
        yield SelectionList[str](*[(t.key, t.key, t.key in s.auto_approve) for t in self.tools], id="auto-approve")

    def chosen(self, settings: ConversationSettings) -> ConversationSettings:
        """``settings`` with this part's choices; tools of servers not connected now keep their old choices."""
        shown = {t.key for t in self.tools}
        on = set(self.query_one("#tools-on", SelectionList).selected)
        approved = set(self.query_one("#auto-approve", SelectionList).selected)
        kept_off = [k for k in self.settings.tools_off if k not in shown and "/" in k]
        kept_servers = [
            k for k in self.settings.tools_off if "/" not in k and not any(t.server == k for t in self.tools)
        ]
        kept_approved = [k for k in self.settings.auto_approve if k not in shown]
        steps = self.query_one("#tool-steps", Input).value.strip()
        return replace(
            settings,
            tools_off=tuple(sorted({*kept_off, *kept_servers, *(shown - on)})),
            auto_approve=tuple(sorted({*kept_approved, *approved})),
            tool_steps=int(float(steps)) if steps else None,
        )
