"""Response header names go out on the wire spelt as llama-server spells them (``Access-Control-Allow-Origin``,
``Process-Start-Time-Unix``, ``Content-Type``), for clients that look them up case-sensitively: the raw bytes of
the same requests to llama-server (built from the same source) and to ``localinfer serve``."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from localinfer.app.server.header_case import canonical
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

REQUESTS = {
    "preflight": (
        "OPTIONS /v1/chat/completions HTTP/1.1\r\nOrigin: http://localhost:5173\r\n"
        "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
    ),
    "cors get": "GET /v1/models HTTP/1.1\r\nOrigin: http://localhost:5173\r\n",
    "metrics": "GET /metrics HTTP/1.1\r\n",
    "health": "GET /health HTTP/1.1\r\n",
}


def header_names(url: str, head: str) -> list[str]:
    """The header names of the answer to the request ``head`` (its first lines), as they are on the wire."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(f"{head}Host: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, data
            data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return [line.split(":", 1)[0] for line in lines]


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("llama-server")
    with llama_server(smollm2.path, folder, "-c", "512", "--metrics") as url:
        return {name: header_names(url, head) for name, head in REQUESTS.items()}


@pytest.fixture(scope="module")
def ours(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("ours"), "--ctx-size", "512") as server:
        yield server


@pytest.mark.model
@pytest.mark.parametrize("asked", list(REQUESTS))
def test_header_names_are_spelt_as_llama_server_spells_them(
    asked: str, theirs: dict[str, list[str]], ours: Server
) -> None:
    our_names = header_names(ours.url, REQUESTS[asked])
    shared = {name.lower() for name in theirs[asked]} & {name.lower() for name in our_names}
    assert "content-type" in shared or asked == "preflight"
    for name in theirs[asked]:
        if name.lower() in shared:
            assert name in our_names, (name, our_names)


@pytest.mark.model
def test_cors_and_metrics_headers_are_written_in_llama_servers_case(ours: Server) -> None:
    assert "Access-Control-Allow-Origin" in header_names(ours.url, REQUESTS["preflight"])
    assert "Access-Control-Allow-Origin" in header_names(ours.url, REQUESTS["cors get"])
    assert "Process-Start-Time-Unix" in header_names(ours.url, REQUESTS["metrics"])
    assert {"Date", "Server"} <= set(header_names(ours.url, REQUESTS["health"]))  # uvicorn's own, spelt too


def test_a_name_is_written_with_each_word_capitalised() -> None:
    assert canonical(b"access-control-allow-origin") == b"Access-Control-Allow-Origin"
    assert canonical(b"process-start-time-unix") == b"Process-Start-Time-Unix"
    assert canonical(b"etag") == b"ETag"
