"""Small modal dialogs: confirm, ask for a line of text, edit a conversation's settings."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.validation import Number
from textual.widgets import Button, Input, Label, Select, TextArea

from localinfer.app.tools.sessions import ToolInfo
from localinfer.app.tui.conversations import ConversationSettings
from localinfer.app.tui.widgets.tool_settings import ToolSettings


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no; Enter or y confirms, Esc or n declines."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__(classes="dialog")
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(self.question, markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class TextInputScreen(ModalScreen[str | None]):
    """One line of text; Enter accepts, Esc cancels (None)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, value: str = "", *, placeholder: str = "") -> None:
        super().__init__(classes="dialog")
        self.title_text = title
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(self.title_text, markup=False)
            yield Input(self.value, placeholder=self.placeholder, id="text")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _valid(field: Input) -> bool:
    result = field.validate(field.value)
    return result is None or result.is_valid


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


THINK_CHOICES: dict[str, bool | None] = {"model default": None, "on": True, "off": False}
"""The think switch's choices: what the F2 dialog says, and what the request asks (None: as the model's template
has it)."""


class SettingsScreen(ModalScreen[ConversationSettings | None]):
    """A conversation's system prompt, sampling settings, and a reasoning model's think switch and thinking
    budget. Ctrl+S saves, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(
        self, settings: ConversationSettings, tools: list[ToolInfo] | None = None, default_steps: int = 8
    ) -> None:
        """``tools``: the connected MCP servers' tools, whose part is shown when there are some."""
        super().__init__(classes="dialog")
        self.settings = settings
        self.tools = tools or []
        self.default_steps = default_steps

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(classes="dialog-box settings"):
            yield Label("System prompt")
            yield TextArea(s.system_prompt, id="system-prompt", soft_wrap=True, tab_behavior="focus")
            with Grid(classes="settings-grid"):
                yield Label("Temperature")
                yield Input(str(s.temperature), id="temperature", validators=[Number(minimum=0, maximum=2)])
                yield Label("Top p")
                yield Input(str(s.top_p), id="top-p", validators=[Number(minimum=0.01, maximum=1)])
                yield Label("Max tokens")
                yield Input(
                    str(s.max_tokens or ""), id="max-tokens", placeholder="no limit", validators=[Number(minimum=1)]
                )
                yield Label("Context")
                yield Input(
                    str(s.context_length or ""),
                    id="context-length",
                    placeholder="the model's",
                    validators=[Number(minimum=256)],
                )
                yield Label("Think")
                think = next(name for name, value in THINK_CHOICES.items() if value == s.think)
                yield Select([(name, name) for name in THINK_CHOICES], value=think, allow_blank=False, id="think")
                yield Label("Think budget")
                yield Input(
                    str(s.thinking_budget if s.thinking_budget is not None else ""),
                    id="thinking-budget",
                    placeholder="no limit",
                    validators=[Number(minimum=0)],
                )
            if self.tools:
                yield ToolSettings(s, self.tools, self.default_steps)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="save")
                yield Button("Cancel (Esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        inputs = {i.id: i for i in self.query(Input)}
        invalid = [i for i in inputs.values() if i.value.strip() and not _valid(i)]
        if invalid:
            invalid[0].focus()
            self.notify(f"{invalid[0].id}: out of range", severity="error")
            return
        temperature = _number(inputs["temperature"].value)
        top_p = _number(inputs["top-p"].value)
        max_tokens = _number(inputs["max-tokens"].value)
        context = _number(inputs["context-length"].value)
        budget = _number(inputs["thinking-budget"].value)
        think = self.query_one("#think", Select).value
        chosen = replace(
            self.settings,
            system_prompt=self.query_one("#system-prompt", TextArea).text.strip(),
            temperature=self.settings.temperature if temperature is None else temperature,
            top_p=self.settings.top_p if top_p is None else top_p,
            max_tokens=int(max_tokens) if max_tokens is not None else None,
            context_length=int(context) if context is not None else None,
            think=THINK_CHOICES.get(str(think)),
            thinking_budget=int(budget) if budget is not None else None,
        )
        self.dismiss(self.query_one(ToolSettings).chosen(chosen) if self.tools else chosen)

    def action_cancel(self) -> None:
        self.dismiss(None)
