"""A real MCP server, written with the official SDK (``mcp``), for the tests of the app's tools.

``python mcp_test_server.py stdio NAME`` serves over standard input and output; ``python mcp_test_server.py http
NAME PORT`` serves Streamable HTTP on 127.0.0.1:PORT at ``/mcp``. Its tools: ``add`` (read-only), ``echo``,
``touch`` (no arguments),
``fail`` (raises), ``hang`` (never returns), ``big`` (an output of SIZE characters), ``die`` (the process exits
mid-call), ``env_length`` (how long an environment variable's value is, never the value); a prompt ``review``
and a resource ``note://hello``.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations


def build(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> str:
        """Add two whole numbers."""
        return f"{name}: {a + b}"

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return f"{name} echoes {text}"

    @server.tool()
    def touch() -> str:
        """Mark the note as touched (it takes no arguments, and changes something: not read-only)."""
        return f"{name}: touched"

    @server.tool()
    def fail(why: str) -> str:
        """Always fails (as a tool reports a failure it saw coming: its message goes to the model)."""
        raise ToolError(f"failed on purpose: {why}")

    @server.tool()
    async def hang() -> str:
        """Never returns."""
        await anyio.sleep_forever()
        return "never"

    @server.tool()
    def big(size: int) -> str:
        """An output of ``size`` characters."""
        return "x" * size

    @server.tool()
    def die() -> str:
        """The server exits in the middle of the call."""
        os._exit(3)

    @server.tool()
    def env_length(variable: str) -> str:
        """How many characters the environment variable holds (never its value)."""
        return str(len(os.environ.get(variable, "")))

    @server.prompt()
    def review(code: str) -> str:
        """Ask for a review of some code."""
        return f"Please review this code:\n{code}"

    @server.resource("note://hello", name="hello", description="A short note")
    def hello() -> str:
        return f"hello from {name}"

    return server


def main() -> None:
    transport, name = sys.argv[1], sys.argv[2]
    server = build(name)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))


if __name__ == "__main__":
    main()
