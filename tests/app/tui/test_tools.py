"""Tools in the app's chat, with a real MCP server (stdio, the official SDK) and the model's replies scripted (so
the pictures and the flow do not depend on a CPU's greedy text; the loop on real decoding is
tests/app/tools/test_loop_model.py's): the approval dialog, a folded result, the call saved with the
conversation and shown when it is reopened, Ctrl+C on a running tool, /mcp, /prompt and /resource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.servers import ServerSpec
from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.approval import ApprovalScreen
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.tools.toolbox import Toolbox
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.tool_call import ToolCallView
from localinfer.types import ToolCall
from tests.app.tools.conftest import ScriptedClient, call, stdio_spec
from tests.app.tui.conftest import wait_for


def tool_app(
    tmp_path: Path, replies: list[str | list[ToolCall]], *, specs: dict[str, ServerSpec] | None = None, **settings: Any
) -> LocalInferApp:
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    store.create(model="scripted", settings=ConversationSettings(**settings))
    hub = McpHub(specs or {"calc": stdio_spec("calc")})
    client = ScriptedClient(list(replies))
    return LocalInferApp(
        client, store, default_model="scripted", export_dir=tmp_path, poll_status=False, toolbox=Toolbox(hub)
    )


async def connected(pilot: Pilot[None]) -> ChatScreen:
    app = pilot.app
    assert isinstance(app, LocalInferApp) and app.toolbox is not None
    box = app.toolbox
    await wait_for(lambda: bool(box.hub.tools()), what="the MCP server to connect")
    chat = app.screen
    assert isinstance(chat, ChatScreen)
    return chat


async def send(pilot: Pilot[None], text: str) -> None:
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.text = text
    await pilot.press("enter")


async def test_a_call_waits_for_approval_then_runs_and_its_result_is_folded_and_saved(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [[call("echo", text="hello")], "It said hello."])
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await send(pilot, "Echo hello")
        await wait_for(lambda: isinstance(app.screen, ApprovalScreen), what="the approval dialog")
        view = chat.query_one(ToolCallView)
        assert view.state == "asking" and view.key == "calc/echo"
        await pilot.press("y")
        await wait_for(lambda: not chat.generating, what="the reply")
        assert view.state == "ok" and view.output == "calc echoes hello" and "folded" in view.classes
        assert list(chat.query(MessageView))[-1].content.strip() == "It said hello."
        assert chat.conversation is not None
        stored = app.store.messages(chat.conversation.id)
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[2].content == "calc echoes hello"
        await chat.open_conversation(app.store.get(chat.conversation.id))  # reopened: the call is shown again
        reopened = chat.query_one(ToolCallView)
        assert reopened.key == "calc/echo" and reopened.output == "calc echoes hello"


async def test_a_denied_call_tells_the_model_the_reason(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [[call("echo", text="x")], "Fine."])
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await send(pilot, "Echo x")
        await wait_for(lambda: isinstance(app.screen, ApprovalScreen), what="the approval dialog")
        await pilot.press("n", *"no need", "enter")
        await wait_for(lambda: not chat.generating, what="the reply")
        assert chat.query_one(ToolCallView).state == "denied"
        client = app.client
        assert isinstance(client, ScriptedClient)
        assert client.requests[1].messages[-1].content == "The user denied this call. Their reason: no need"


async def test_always_for_this_tool_is_kept_in_the_conversation_settings(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [[call("echo", text="x")], "ok", [call("echo", "c2", text="y")], "ok"])
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await send(pilot, "one")
        await wait_for(lambda: isinstance(app.screen, ApprovalScreen), what="the approval dialog")
        await pilot.press("a")
        await wait_for(lambda: not chat.generating, what="the reply")
        assert chat.conversation is not None and chat.conversation.settings.auto_approve == ("calc/echo",)
        await send(pilot, "two")
        await wait_for(lambda: not chat.generating and len(chat.query(ToolCallView)) == 2, what="the second call")
        assert not isinstance(app.screen, ApprovalScreen)
        assert [v.state for v in chat.query(ToolCallView)] == ["ok", "ok"]


async def test_ctrl_c_stops_a_running_tool_and_the_reply_goes_on(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [[call("hang")], "Stopped, then."], auto_approve=("calc/hang",))
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await send(pilot, "hang")
        await wait_for(lambda: chat.check_action("stop_tool", ()) is True, what="the tool to run")
        await pilot.press("ctrl+c")
        await wait_for(lambda: not chat.generating, what="the reply")
        assert chat.query_one(ToolCallView).state == "stopped"
        assert list(chat.query(MessageView))[-1].content.strip() == "Stopped, then."


async def test_a_server_that_fails_to_start_is_one_line_and_the_chat_goes_on(tmp_path: Path) -> None:
    specs = {"broken": ServerSpec("broken", "stdio", command="/nonexistent/server"), "calc": stdio_spec("calc")}
    app = tool_app(tmp_path, ["plain answer"], specs=specs)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await wait_for(lambda: any("broken" in str(n.message) for n in app._notifications), what="the warning")
        await send(pilot, "hi")
        await wait_for(lambda: not chat.generating and len(chat.query(MessageView)) == 2, what="the reply")


async def test_prompt_and_resource_commands_insert_into_the_message(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [])
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await connected(pilot)
        await send(pilot, '/prompt review code="x = 1"')
        prompt = chat.query_one(PromptInput)
        await wait_for(lambda: prompt.text == "Please review this code:\nx = 1", what="the prompt's text")
        await send(pilot, "/resource note://hello")
        await wait_for(lambda: prompt.text.endswith("hello from calc"), what="the resource's text")
        assert not app.store.messages(chat.conversation.id if chat.conversation else 0)  # nothing was sent


async def test_mcp_disconnect_and_connect_again(tmp_path: Path) -> None:
    app = tool_app(tmp_path, [])
    async with app.run_test(size=(100, 30)) as pilot:
        await connected(pilot)
        assert app.toolbox is not None
        hub = app.toolbox.hub
        await send(pilot, "/mcp disconnect calc")
        await wait_for(lambda: not hub.tools(), what="the disconnection")
        await send(pilot, "/mcp connect calc")
        await wait_for(lambda: bool(hub.tools()), what="the connection")


async def test_f2_turns_a_tool_off_sets_the_step_limit_and_the_next_reply_follows(tmp_path: Path) -> None:
    from textual.widgets import Input, SelectionList

    from localinfer.app.tui.screens.dialogs import SettingsScreen

    app = tool_app(tmp_path, ["plain"])
    async with app.run_test(size=(100, 40)) as pilot:
        chat = await connected(pilot)
        await pilot.press("f2")
        await wait_for(lambda: isinstance(app.screen, SettingsScreen), what="the settings")
        dialog = app.screen
        dialog.query_one("#tools-on", SelectionList).deselect("calc/echo")
        dialog.query_one("#auto-approve", SelectionList).select("calc/add")
        dialog.query_one("#tool-steps", Input).value = "3"
        await pilot.press("ctrl+s")
        await wait_for(lambda: app.screen is chat, what="the settings to close")
        assert chat.conversation is not None
        settings = chat.conversation.settings
        assert (settings.tools_off, settings.auto_approve, settings.tool_steps) == (("calc/echo",), ("calc/add",), 3)
        await send(pilot, "hi")
        await wait_for(lambda: not chat.generating and len(chat.query(MessageView)) == 2, what="the reply")
        client = app.client
        assert isinstance(client, ScriptedClient)
        offered = {t.name for t in client.requests[0].tools}
        assert "add" in offered and "echo" not in offered
