"""Snapshots of a tool call in the chat: the approval dialog, and the result folded once the call ran. The MCP
server is real (stdio, the official SDK); the model's replies are scripted and the app's clock stands still, so
the pictures do not depend on the CPU. Update after a deliberate change with ``--snapshot-update``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from localinfer.app.tools.hub import McpHub
from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationStore
from localinfer.app.tui.screens.approval import ApprovalScreen
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.tools.toolbox import Toolbox
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.tool_call import ToolCallView
from tests.app.tools.conftest import ScriptedClient, call, stdio_spec
from tests.app.tui.conftest import wait_for


def make(tmp_path: Path) -> LocalInferApp:
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    store.create(model="scripted")
    client = ScriptedClient([[call("add", a=2, b=3)], "2 plus 3 is 5."])
    return LocalInferApp(
        client,
        store,
        default_model="scripted",
        export_dir=tmp_path,
        poll_status=False,
        clock=lambda: 0.0,
        toolbox=Toolbox(McpHub({"calc": stdio_spec("calc")})),
    )


async def asking(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, LocalInferApp) and app.toolbox is not None
    hub = app.toolbox.hub
    await wait_for(lambda: bool(hub.tools()), what="the MCP server")
    chat = app.screen
    assert isinstance(chat, ChatScreen)
    prompt = chat.query_one(PromptInput)
    prompt.cursor_blink = False
    prompt.text = "What is 2 plus 3?"
    await pilot.press("enter")
    await wait_for(lambda: isinstance(app.screen, ApprovalScreen), what="the approval dialog")
    await pilot.pause()


async def answered(pilot: Pilot[None]) -> None:
    await asking(pilot)
    await pilot.press("y")
    app = pilot.app
    chat = app.screen_stack[1]
    assert isinstance(chat, ChatScreen)
    await wait_for(lambda: not chat.generating, what="the reply")
    assert chat.query_one(ToolCallView).state == "ok"
    await pilot.pause()


def test_the_approval_dialog(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(make(tmp_path), terminal_size=(100, 30), run_before=asking)


def test_a_folded_tool_result(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(make(tmp_path), terminal_size=(100, 30), run_before=answered)
