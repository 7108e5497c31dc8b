"""An engine that dies or cannot be reached: clear 502s before the first byte, a prompt end with an error event
mid-stream, never a hang."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from localinfer.backends.engine_process.launcher import free_port
from localinfer.backends.engine_process.proxy import EngineProxy, EngineStreamBroken, ProxyResponse
from tests.backends.engine_process.conftest import group_members, serving_proxy, start_localinfer

JSON = [("content-type", "application/json")]


async def assert_engine_unavailable(answer: ProxyResponse) -> None:
    assert answer.status == 502
    error = json.loads(await answer.read())["error"]
    assert error == {"message": error["message"], "type": "server_error", "param": None, "code": "engine_unavailable"}
    assert error["message"]


async def test_an_unreachable_engine_answers_502_in_openai_shape() -> None:
    proxy = EngineProxy(f"http://127.0.0.1:{free_port()}", "key")
    try:
        await assert_engine_unavailable(await proxy.forward("POST", "/v1/completions", JSON, b"{}"))
    finally:
        await proxy.aclose()


async def test_an_exited_engine_answers_502_without_a_connection() -> None:
    proxy = EngineProxy("http://192.0.2.1:9", "key", alive=lambda: False)
    try:
        await assert_engine_unavailable(await proxy.forward("GET", "/v1/models", [], b""))
    finally:
        await proxy.aclose()


class FakeEngine:
    """A raw HTTP server that answers every request with ``head`` and then hangs, or closes with ``close``."""

    def __init__(self, head: bytes, *, close: bool = False) -> None:
        self.head = head
        self.close = close
        self.release = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.answering: set[asyncio.Task[object]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()
        await asyncio.gather(*self.answering, return_exceptions=True)  # each connection closed by its answer

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.answering.add(task)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(self.head)
        await writer.drain()
        if not self.close:
            await self.release.wait()
        writer.close()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


async def test_a_stream_from_an_engine_that_exits_but_keeps_its_connection_ends_with_an_error() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    head += chunked(b'data: {"n": 1}\n\n', b'data: {"partial')
    alive = True
    async with FakeEngine(head) as url:
        proxy = EngineProxy(url, "key", alive=lambda: alive)
        try:
            answer = await proxy.forward("POST", "/v1/completions", JSON, b"{}")
            assert answer.status == 200
            first = await anext(answer.body)
            alive = False
            started = time.monotonic()
            rest = await asyncio.wait_for(answer.read(), 5)
        finally:
            await proxy.aclose()
    assert time.monotonic() - started < 1
    assert first == b'data: {"n": 1}\n\n'
    assert rest.startswith(b"data: {") and rest.endswith(b"\n\n")
    assert json.loads(rest[6:])["error"]["code"] == "engine_unavailable"


async def test_a_reader_cancelled_while_the_engine_runs_is_cancelled_not_told_the_engine_exited() -> None:
    """The relay watches the engine with one task per answer, which cancels a waiting read once the engine is gone;
    a read cancelled for another reason (the client left) stays cancelled."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    head += chunked(b'data: {"n": 1}\n\n')
    async with FakeEngine(head) as url:
        proxy = EngineProxy(url, "key", alive=lambda: True)
        try:
            answer = await proxy.forward("POST", "/v1/completions", JSON, b"{}")
            assert await anext(answer.body) == b'data: {"n": 1}\n\n'
            reader = asyncio.ensure_future(anext(answer.body))  # the engine sends nothing more: it waits
            await asyncio.sleep(0)  # the read starts waiting
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            await answer.aclose()
        finally:
            await proxy.aclose()


async def test_a_json_body_cut_short_breaks_the_relay() -> None:
    head = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"choices": ['
    async with FakeEngine(head, close=True) as url:
        proxy = EngineProxy(url, "key")
        try:
            answer = await proxy.forward("POST", "/v1/completions", JSON, b"{}")
            assert answer.status == 200
            assert ("content-length", "100") in answer.headers
            with pytest.raises(EngineStreamBroken):
                await answer.read()
        finally:
            await proxy.aclose()


@pytest.mark.model
def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_then_answers_502(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    engine = start_localinfer(smollm2_gguf, tmp_path)
    try:
        with serving_proxy(engine) as url:
            body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True}
            events: list[str] = []
            with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=30) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                for line in lines:
                    if line:
                        events.append(line)
                    if len(events) == 3:
                        os.killpg(engine.pid or 0, signal.SIGKILL)
                        killed = time.monotonic()
                        break
                events += [line for line in lines if line]
            assert time.monotonic() - killed < 5
            assert events[-1] != "data: [DONE]"
            error = json.loads(events[-1].removeprefix("data: "))["error"]
            assert error["code"] == "engine_unavailable"
            assert all(json.loads(e.removeprefix("data: "))["object"] == "text_completion" for e in events[:-1])

            client = openai.OpenAI(base_url=f"{url}/v1", api_key="front-key", max_retries=0, timeout=30)
            with pytest.raises(openai.APIStatusError) as caught:
                client.completions.create(model="smollm2", prompt="Hello", max_tokens=4)
            assert caught.value.status_code == 502
            assert caught.value.code == "engine_unavailable"
    finally:
        asyncio.run(engine.stop(grace=2))
    assert not group_members(engine.pid or 0)
