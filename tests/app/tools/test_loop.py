"""The tool loop on real MCP servers, with the model's replies scripted (the loop on real decoding is
test_loop_model.py's): a call approved, denied with a reason, auto-approved, one that raises, one that hangs and
is stopped, a 5 MB output capped, a server that exits mid-call, and the step limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.loop import (
    CallAsked,
    CallEnded,
    CallStarted,
    Decision,
    LoopEvent,
    StepLimitReached,
    ToolLoop,
    ToolPolicy,
    ToolRecord,
    cap,
    model_tools,
)
from localinfer.app.tools.sessions import ToolInfo
from localinfer.types import ChatMessage, ChatRequest, ToolCall
from tests.app.tools.conftest import ScriptedClient, call, stdio_spec

REQUEST = ChatRequest("scripted", (ChatMessage("user", "Use the tools."),))


@pytest.fixture
async def hub() -> AsyncIterator[McpHub]:
    hub = McpHub({"s": stdio_spec("s")})
    await hub.connect("s")
    yield hub
    await hub.close()


@dataclass
class Run:
    """A loop with its events and the approvals it asked for, answered by ``answers`` in order."""

    hub: McpHub
    replies: list[str | list[ToolCall]]
    answers: list[Decision] = field(default_factory=list)
    allowed: set[str] = field(default_factory=set)
    steps: int = 4
    output_max: int = 16_000
    timeout: float = 60
    events: list[LoopEvent] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = ScriptedClient(list(self.replies))
        self.loop = ToolLoop(
            self.client, self.hub, ToolPolicy(set(self.allowed)), self.approve, self.record,
            steps=self.steps, output_max=self.output_max, timeout=self.timeout,
        )  # fmt: skip

    async def approve(self, tool: ToolInfo, tool_call: ToolCall) -> Decision:
        self.asked.append(tool.key)
        return self.answers.pop(0)

    async def record(self, event: LoopEvent) -> None:
        self.events.append(event)

    async def run(self) -> list[ChatMessage]:
        return await self.loop.run(REQUEST)

    @property
    def records(self) -> list[ToolRecord]:
        return [e.record for e in self.events if isinstance(e, CallEnded)]


async def test_an_approved_call_runs_and_its_result_goes_back_to_the_model(hub: McpHub) -> None:
    run = Run(hub, [[call("echo", text="hi")], "The tool said hi."], answers=[Decision(True)])
    added = await run.run()
    assert run.asked == ["s/echo"]
    assert [r.status for r in run.records] == ["ok"]
    assert [m.role for m in added] == ["assistant", "tool", "assistant"]
    assert added[1].content == "s echoes hi" and added[1].tool_call_id == "call_1"
    second = run.client.requests[1]
    assert second.messages[-1] == added[1]  # the result was fed back
    assert second.messages[-2].tool_calls == (call("echo", text="hi"),)
    assert {t.name for t in second.tools} >= {"echo", "add"}


async def test_a_denied_call_does_not_run_and_the_model_is_told_why(hub: McpHub) -> None:
    run = Run(hub, [[call("echo", text="hi")], "OK."], answers=[Decision(False, reason="not now")])
    added = await run.run()
    assert not any(isinstance(e, CallStarted) for e in run.events)
    assert run.records[0].status == "denied"
    assert added[1].content == "The user denied this call. Their reason: not now"


async def test_a_tool_allowed_always_is_asked_once(hub: McpHub) -> None:
    calls: list[str | list[ToolCall]] = [[call("echo", "c1", text="a")], [call("echo", "c2", text="b")], "done"]
    run = Run(hub, calls, answers=[Decision(True, always=True)])
    await run.run()
    assert run.asked == ["s/echo"]
    assert [r.output for r in run.records] == ["s echoes a", "s echoes b"]
    assert "s/echo" in run.loop.policy.allowed


async def test_an_auto_approved_tool_runs_without_asking(hub: McpHub) -> None:
    run = Run(hub, [[call("add", a=2, b=3)], "5"], allowed={"s/add"})
    await run.run()
    assert run.asked == [] and not any(isinstance(e, CallAsked) for e in run.events)
    assert run.records[0].output == "s: 5"


async def test_without_an_approver_a_call_not_allowed_is_denied(hub: McpHub) -> None:
    client = ScriptedClient([[call("echo", text="x")], "ok"])
    events: list[LoopEvent] = []

    async def record(event: LoopEvent) -> None:
        events.append(event)

    loop = ToolLoop(client, hub, ToolPolicy(), None, record)
    added = await loop.run(REQUEST)
    assert added[1].content == "The user did not approve this call."
    assert not any(isinstance(e, CallStarted) for e in events)


async def test_read_only_tools_run_under_the_yes_policy_and_others_do_not(hub: McpHub) -> None:
    policy = ToolPolicy(read_only=True)
    tools = {t.name: t for t in hub.tools()}
    assert policy.allows(tools["add"]) and not policy.allows(tools["echo"])


async def test_a_tool_that_raises_is_fed_back_as_an_error(hub: McpHub) -> None:
    run = Run(hub, [[call("fail", why="bad input")], "Sorry."], allowed={"s/fail"})
    added = await run.run()
    assert run.records[0].status == "error"
    assert "failed on purpose: bad input" in added[1].content


async def test_a_hanging_tool_stopped_by_the_user_ends_stopped_and_the_loop_goes_on(hub: McpHub) -> None:
    started = asyncio.Event()
    run = Run(hub, [[call("hang")], [call("add", "c2", a=1, b=1)], "done"], allowed={"s/hang", "s/add"})

    async def record(event: LoopEvent) -> None:
        run.events.append(event)
        if isinstance(event, CallStarted) and event.tool.name == "hang":
            started.set()

    run.loop.on_event = record
    task = asyncio.create_task(run.run())
    await started.wait()
    assert run.loop.stop_tool()
    added = await task
    assert [r.status for r in run.records] == ["stopped", "ok"]  # the same server still answers
    assert added[1].content == "The user stopped this call."


async def test_a_call_past_its_timeout_fails_and_the_server_answers_the_next(hub: McpHub) -> None:
    run = Run(hub, [[call("hang")], [call("add", "c2", a=1, b=1)], "done"], allowed={"s/hang", "s/add"}, timeout=0.5)
    added = await run.run()
    assert [r.status for r in run.records] == ["failed", "ok"]  # the same server still answers
    assert "hang on 's' got no result" in added[1].content
    assert added[-1].content.strip() == "done"


async def test_a_5_mb_output_is_capped_before_it_reaches_the_model(hub: McpHub) -> None:
    size = 5_000_000
    run = Run(hub, [[call("big", size=size)], "long"], allowed={"s/big"}, output_max=1000)
    added = await run.run()
    record = run.records[0]
    assert record.cut == size - 1000
    assert added[1].content.startswith("x" * 1000 + "\n[output cut: 4999000 more characters]")
    assert len(run.client.requests[1].messages[-1].content) < 1100


async def test_a_server_that_exits_mid_call_fails_the_call_and_the_reply_goes_on(hub: McpHub) -> None:
    run = Run(hub, [[call("die")], "It failed."], allowed={"s/die"})
    added = await run.run()
    assert run.records[0].status == "failed"
    assert "got no result" in added[1].content
    assert added[-1].content.strip() == "It failed."
    assert run.client.requests[1].tools == ()  # the dead server's tools are not offered again


async def test_the_step_limit_ends_with_a_request_without_tools(hub: McpHub) -> None:
    replies: list[str | list[ToolCall]] = [[call("add", f"c{i}", a=i, b=i)] for i in range(5)]
    run = Run(hub, [*replies, "enough"], allowed={"s/add"}, steps=2)
    added = await run.run()
    assert len(run.records) == 2
    assert any(isinstance(e, StepLimitReached) for e in run.events)
    assert run.client.requests[-1].tools == ()
    assert len(run.client.requests) == 3
    assert added[-1].role == "assistant"


async def test_a_forced_tool_choice_holds_for_the_first_request_only(hub: McpHub) -> None:
    run = Run(hub, [[call("add", a=1, b=2)], "3"], allowed={"s/add"})
    await run.loop.run(ChatRequest("scripted", REQUEST.messages, tool_choice="add"))
    assert [r.tool_choice for r in run.client.requests] == ["add", "auto"]


def test_cap_leaves_short_text_alone() -> None:
    assert cap("abc", 3) == ("abc", 0)
    assert cap("abcd", 3) == ("abc\n[output cut: 1 more characters]", 1)


def test_an_open_arguments_schema_is_closed_for_the_model(hub: McpHub) -> None:
    tools = {t.name: t for t in model_tools(hub.tools())}
    assert tools["add"].parameters["additionalProperties"] is False
    assert set(tools["add"].parameters["properties"]) == {"a", "b"}
