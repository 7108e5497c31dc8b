"""The approval of a tool call: what would run, with which arguments, and three answers: allow once (y), allow
always for this tool (a), deny (n, then a reason the model is told). Esc denies."""

from __future__ import annotations

import json
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from localinfer.app.tools.loop import Decision
from localinfer.app.tools.sessions import ToolInfo
from localinfer.types import ToolCall


class ApprovalScreen(ModalScreen[Decision]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "allow", "Allow once"),
        Binding("a", "always", "Always"),
        Binding("n", "deny", "Deny"),
        Binding("escape", "deny_now", "Deny"),
    ]

    def __init__(self, tool: ToolInfo, call: ToolCall) -> None:
        super().__init__(classes="dialog")
        self.tool = tool
        self.call = call

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box approval"):
            yield Label(f"Run the tool {self.tool.key}?", markup=False, classes="approval-title")
            if self.tool.description:
                yield Static(self.tool.description.strip().splitlines()[0], markup=False, classes="approval-help")
            arguments = json.dumps(self.call.arguments, indent=2, ensure_ascii=False)
            yield Static(arguments, markup=False, classes="approval-arguments")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Allow once (y)", variant="primary", id="allow")
                yield Button("Always for this tool (a)", id="always")
                yield Button("Deny (n)", variant="error", id="deny")
            yield Input(placeholder="why not (the model is told); Enter denies", id="reason", classes="hidden")

    def on_mount(self) -> None:
        self.query_one("#allow", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"allow": self.action_allow, "always": self.action_always, "deny": self.action_deny}[str(event.button.id)]()

    def action_allow(self) -> None:
        self.dismiss(Decision(True))

    def action_always(self) -> None:
        self.dismiss(Decision(True, always=True))

    def action_deny(self) -> None:
        """Ask for a reason first (Enter with none is fine)."""
        reason = self.query_one("#reason", Input)
        reason.remove_class("hidden")
        reason.focus()

    def action_deny_now(self) -> None:
        self.dismiss(Decision(False))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(Decision(False, reason=event.value.strip()))
