"""A body over ``--max-body``, through a real server: the client reads the 413 and its JSON error whatever way it
sends the body (httpx or Python's http.client, with a Content-Length or in chunked transfer encoding;
curl), where a server that closes while the body is still coming makes the client see a reset. A body
past what the server drains (``limits.DRAIN_BYTES``) is cut off unread."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.app.server.limits import DRAIN_BYTES
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

MAX_BODY = 1024 * 1024
FIFTY_MB = 50 * 1000 * 1000
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-oversized")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", "512", "--max-body", str(MAX_BODY)) as server:
        yield server


def fifty_mb_prompt() -> bytes:
    """A completion request of 50 MB: a prompt a user pasted a large file into."""
    head, tail = b'{"model": "smollm2", "max_tokens": 4, "prompt": "', b'"}'
    return head + b"x" * (FIFTY_MB - len(head) - len(tail)) + tail


def in_chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]


def assert_413(status: int, body: bytes) -> None:
    assert status == 413, body[:300]
    error: dict[str, Any] = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_too_large"
    assert f"larger than {MAX_BODY} bytes" in error["message"] and "--max-body" in error["message"]


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def stdlib_post(server: Server, body: bytes, *, chunked: bool) -> tuple[int, bytes]:
    """POST ``body`` with Python's http.client, which writes the whole body, then reads the answer: its status and
    body. ``chunked``: without a Content-Length, in chunked transfer encoding."""
    connection = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=120)
    try:
        headers = {"Content-Type": "application/json"}
        if not chunked:
            headers["Content-Length"] = str(len(body))
        connection.request("POST", "/v1/completions", body=in_chunks(body), headers=headers, encode_chunked=chunked)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_httpx_sending_50_mb_with_its_length_reads_the_413(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/completions",
        content=fifty_mb_prompt(),
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    assert_413(response.status_code, response.content)


def test_http_client_writing_50_mb_in_chunks_with_its_length_reads_the_413(server: Server) -> None:
    assert_413(*stdlib_post(server, fifty_mb_prompt(), chunked=False))


def test_a_chunked_body_without_a_length_going_over_the_limit_reads_the_413(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/completions",
        content=in_chunks(fifty_mb_prompt()),
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    assert "content-length" not in response.request.headers
    assert_413(response.status_code, response.content)


def test_http_client_sending_a_chunked_body_over_the_limit_reads_the_413(server: Server) -> None:
    assert_413(*stdlib_post(server, fifty_mb_prompt(), chunked=True))


def test_curl_posting_a_50_mb_file_reads_the_413(server: Server, tmp_path: Path) -> None:
    """curl asks ``Expect: 100-continue`` first: told 413 instead, it sends nothing and reads the answer."""
    path = tmp_path / "big.json"
    path.write_bytes(fifty_mb_prompt())
    out = tmp_path / "answer.json"
    command = ["curl", "-s", "-o", str(out), "-w", "%{http_code}", "-H", "Content-Type: application/json"]
    sent = subprocess.run(
        [*command, "--data-binary", f"@{path}", f"{server.url}/v1/completions"], capture_output=True, text=True
    )
    assert sent.returncode == 0, sent.stderr
    assert_413(int(sent.stdout), out.read_bytes())


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_past_the_drain_bound_is_cut_off_unread(server: Server, framing: str) -> None:
    """Beyond ``DRAIN_BYTES`` the server reads no more: the connection closes while the client still sends."""
    size = 3 * DRAIN_BYTES
    piece = b"x" * CHUNK
    if framing == "chunked":
        head = b"Transfer-Encoding: chunked\r\n\r\n"
        chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    else:
        head, chunk = b"Content-Length: %d\r\n\r\n" % size, piece
    with socket.create_connection(("127.0.0.1", port_of(server))) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head)
        with pytest.raises(ConnectionError):
            for _ in range(size // CHUNK):
                sock.sendall(chunk)
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_the_client_that_got_a_413_is_served_on_its_next_requests(server: Server) -> None:
    """The 413 closes its connection; the same client's next requests open a new one and are served."""
    with httpx.Client(base_url=server.url, timeout=120) as client:
        assert client.post("/v1/completions", content=in_chunks(fifty_mb_prompt())).status_code == 413
        body = {"model": "smollm2", "prompt": "Hello", "max_tokens": 2}
        first = client.post("/v1/completions", json=body)
        second = client.post("/v1/completions", json=body)
    assert first.status_code == second.status_code == 200
