"""Real MCP servers for the tools' tests (``mcp_test_server.py``, written with the official SDK): over stdio as a
child process, or Streamable HTTP on 127.0.0.1; and a scripted client whose replies are given, for the tests of
the loop's own logic (the loop on real llama.cpp decoding is test_loop_model.py's)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from localinfer.app.tools.servers import ServerSpec
from localinfer.client.base import ClientStatus
from localinfer.progress import ProgressEvent
from localinfer.types import ChatRequest, ModelInfo, TokenChunk, ToolCall

SERVER_SCRIPT = Path(__file__).with_name("mcp_test_server.py")


def stdio_spec(name: str, **fields: object) -> ServerSpec:
    """The test server ``name`` over stdio."""
    return ServerSpec(name, "stdio", command=sys.executable, args=(str(SERVER_SCRIPT), "stdio", name), **fields)  # type: ignore[arg-type]


def stdio_entry(name: str) -> dict[str, object]:
    """The same, as an ``mcpServers`` entry."""
    return {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio", name]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class HttpServer:
    name: str
    url: str
    process: subprocess.Popen[bytes]

    def spec(self, **fields: object) -> ServerSpec:
        return ServerSpec(self.name, "http", url=self.url, **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """The test server ``web`` over Streamable HTTP on 127.0.0.1, until the module's tests are done."""
    port = free_port()
    log = tmp_path_factory.mktemp("mcp-http") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "http", "web", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not _accepts(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the MCP test server did not start: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield HttpServer("web", f"http://127.0.0.1:{port}/mcp", process)
    finally:
        process.terminate()
        process.wait(timeout=20)


@dataclass
class ScriptedClient:
    """An InferenceClient whose replies are given in order: text, or calls (``ToolCall``s); it keeps the requests
    it got. For the loop's logic only: the loop on the real engine is tested on real models."""

    replies: list[str | Sequence[ToolCall]]
    requests: list[ChatRequest] = field(default_factory=list)

    @property
    def where(self) -> str:
        return "scripted"

    async def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        self.requests.append(request)
        reply = self.replies.pop(0) if self.replies else "done"
        if isinstance(reply, str):
            for word in reply.split(" "):
                yield TokenChunk(word + " ")
            yield TokenChunk("", finish_reason="stop")
        else:
            yield TokenChunk("", finish_reason="tool_calls", tool_calls=tuple(reply))

    async def models(self) -> list[ModelInfo]:
        return [ModelInfo("scripted", "", 0, loaded=True)]

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        return None

    async def pull(self, ref: str) -> AsyncGenerator[ProgressEvent, None]:
        if False:
            yield ProgressEvent(ref)

    async def remove(self, model: str) -> int:
        return 0

    async def status(self) -> ClientStatus:
        return ClientStatus(where="scripted")

    async def close(self) -> None:
        return None


def call(name: str, call_id: str = "call_1", **arguments: object) -> ToolCall:
    return ToolCall(call_id, name, dict(arguments))
