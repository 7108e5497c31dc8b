"""MCP servers reached through the official SDK: a stdio child and Streamable HTTP on 127.0.0.1; their tools,
prompts and resources listed; a server that does not start, or dies, is one line; two servers with a tool of the
same name; the env a server is given is its secret."""

from __future__ import annotations

import pytest

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.servers import ServerSpec
from localinfer.app.tools.sessions import McpServerFailed, ToolFailed
from localinfer.errors import ConfigError
from tests.app.tools.conftest import HttpServer, stdio_spec

TOOLS = {"add", "echo", "touch", "fail", "hang", "big", "die", "env_length"}


async def test_a_stdio_server_lists_its_tools_prompts_and_resources() -> None:
    hub = McpHub({"files": stdio_spec("files")})
    try:
        session = await hub.connect("files")
        assert {t.name for t in session.tools} == TOOLS
        add = next(t for t in session.tools if t.name == "add")
        assert add.read_only and add.key == "files/add"
        assert set(add.schema["properties"]) == {"a", "b"}
        assert not next(t for t in session.tools if t.name == "echo").read_only
        assert [(p.name, p.required) for p in session.prompts] == [("review", ("code",))]
        assert [r.uri for r in session.resources] == ["note://hello"]
        assert await hub.prompt(session.prompts[0], {"code": "x = 1"}) == "Please review this code:\nx = 1"
        assert await hub.read(session.resources[0]) == "hello from files"
    finally:
        await hub.close()


async def test_a_streamable_http_server_answers_calls(http_server: HttpServer) -> None:
    hub = McpHub({"web": http_server.spec()})
    try:
        await hub.connect("web")
        add = next(t for t in hub.tools() if t.name == "add")
        output = await hub.call(add, {"a": 2, "b": 40}, timeout=30)
        assert output.text == "web: 42" and not output.is_error
    finally:
        await hub.close()


async def test_a_tool_that_raises_answers_an_error_the_model_can_read() -> None:
    hub = McpHub({"s": stdio_spec("s")})
    try:
        await hub.connect("s")
        fail = next(t for t in hub.tools() if t.name == "fail")
        output = await hub.call(fail, {"why": "testing"}, timeout=30)
        assert output.is_error and "failed on purpose: testing" in output.text
    finally:
        await hub.close()


async def test_a_server_that_exits_mid_call_fails_the_call_and_is_reported_once() -> None:
    gone: list[tuple[str, str]] = []
    hub = McpHub({"s": stdio_spec("s")}, on_gone=lambda server, why: gone.append((server, why)))
    try:
        await hub.connect("s")
        die = next(t for t in hub.tools() if t.name == "die")
        with pytest.raises(ToolFailed, match="die on 's' got no result"):
            await hub.call(die, {}, timeout=30)
        assert not hub.sessions["s"].connected
        assert [server for server, _ in gone] == ["s"]
        assert hub.tools() == []  # its tools are no longer offered
        await hub.connect("s")  # /mcp connect starts it again
        assert {t.name for t in hub.tools()} == TOOLS
    finally:
        await hub.close()


async def test_a_server_that_cannot_start_is_one_failure_and_the_others_connect() -> None:
    broken = ServerSpec("broken", "stdio", command="/nonexistent/mcp-server")
    hub = McpHub({"broken": broken, "ok": stdio_spec("ok")})
    try:
        failures = await hub.connect_all()
        assert [f.server for f in failures] == ["broken"]
        assert isinstance(failures[0], McpServerFailed) and "\n" not in failures[0].message
        assert "not found" in failures[0].message
        assert {t.server for t in hub.tools()} == {"ok"}
    finally:
        await hub.close()


async def test_a_server_not_declared_is_a_config_error_naming_the_declared_ones() -> None:
    hub = McpHub({"a": stdio_spec("a")})
    with pytest.raises(ConfigError, match=r"no MCP server 'b' is declared \(declared: a\)"):
        await hub.connect("b")


async def test_two_servers_with_a_tool_of_the_same_name_are_told_apart(http_server: HttpServer) -> None:
    hub = McpHub({"local": stdio_spec("local"), "web": http_server.spec()})
    try:
        assert await hub.connect_all() == []
        exposed = {t.exposed: t for t in hub.tools()}
        assert {"local__add", "web__add"} <= set(exposed)
        assert "add" not in exposed
        assert (await hub.call(exposed["web__add"], {"a": 1, "b": 1}, timeout=30)).text == "web: 2"
        assert (await hub.call(exposed["local__add"], {"a": 1, "b": 2}, timeout=30)).text == "local: 3"
    finally:
        await hub.close()


async def test_a_stdio_server_gets_its_env_which_is_never_shown() -> None:
    spec = stdio_spec("s", env={"API_TOKEN": "s3cr3t-value"})
    assert "s3cr3t" not in repr(spec) and "s3cr3t" not in spec.shown()
    assert "env API_TOKEN" in spec.shown()
    hub = McpHub({"s": spec})
    try:
        await hub.connect("s")
        length = next(t for t in hub.tools() if t.name == "env_length")
        assert (await hub.call(length, {"variable": "API_TOKEN"}, timeout=30)).text == str(len("s3cr3t-value"))
    finally:
        await hub.close()
