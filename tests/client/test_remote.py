"""``HttpClient`` against a real ``localinfer serve``: the same protocol the TUI uses in-process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import httpx
import pytest

from localinfer.client.base import InferenceClient
from localinfer.client.remote import HttpClient, normalize_url
from localinfer.errors import LocalInferError, ModelNotFound, Unauthorized
from localinfer.models.store import Manifest
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams, TokenChunk
from tests.app.server.conftest import free_port, tokens_predicted
from tests.app.server.management import API_KEY, SERVED, SMOL_FILE, SMOL_REPO, ManagedServer, managed_server

T = TypeVar("T")
CTX = 2048


@pytest.fixture(scope="module")
def managed(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    # strict names: the client's errors for a model nobody serves are under test (a server of one model would answer
    # any name with it, as llama-server does)
    flags = ("--ctx-size", str(CTX), "--threads", "1", "--strict-model-names")
    with managed_server(smollm2, tmp_path_factory.mktemp("remote-client"), *flags) as server:
        yield server


def with_client(url: str, use: Callable[[HttpClient], Awaitable[T]], *, api_key: str | None = API_KEY) -> T:
    """Run ``use`` with a fresh HttpClient on a fresh event loop, closing the client afterwards."""

    async def scenario() -> T:
        client = HttpClient(url, api_key=api_key)
        try:
            return await use(client)
        finally:
            await client.close()

    return asyncio.run(scenario())


def ask(text: str, max_tokens: int, *, ignore_eos: bool = False) -> ChatRequest:
    options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=max_tokens, ignore_eos=ignore_eos)
    return ChatRequest(SERVED, (ChatMessage("user", text),), options)


def health(url: str) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{url}/health").json()
    return body


def test_http_client_is_an_inference_client() -> None:
    client: InferenceClient = HttpClient("127.0.0.1:8080/v1/")
    assert client.where == "http://127.0.0.1:8080"
    assert normalize_url("https://box:9000/") == "https://box:9000"
    asyncio.run(client.close())


@pytest.mark.model
def test_chat_streams_text_then_a_last_chunk_with_usage_and_timings(managed: ManagedServer) -> None:
    request = ask("Say hello.", 8)

    async def use(client: HttpClient) -> list[TokenChunk]:
        return [chunk async for chunk in client.chat(request)]

    chunks = with_client(managed.url, use)

    *texts, last = chunks
    assert len(texts) >= 2 and all(c.text for c in texts)
    assert last.text == "" and last.finish_reason in ("stop", "length")
    assert last.usage is not None and last.timings is not None
    assert 2 <= last.usage.completion_tokens <= 8
    # as llama-server counts them: every token sampled, the end token that stopped the reply included
    assert last.timings.predicted_n == last.usage.completion_tokens + (last.finish_reason == "stop")
    assert last.usage.prompt_tokens > 0 and last.timings.predicted_ms > 0
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
    same = httpx.post(
        f"{managed.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
    ).json()
    assert "".join(c.text for c in texts) == same["choices"][0]["message"]["content"]


@pytest.mark.model
def test_closing_a_chat_early_stops_the_generation_on_the_server(managed: ManagedServer) -> None:
    request = ask("Count to a thousand.", CTX - 100, ignore_eos=True)

    async def use(client: HttpClient) -> None:
        stream = client.chat(request)
        received = 0
        async for chunk in stream:
            received += bool(chunk.text)
            if received == 3:
                break
        assert health(managed.url)["slots_processing"] == 1
        await stream.aclose()

    before = tokens_predicted(managed.url, API_KEY)
    with_client(managed.url, use)
    deadline = time.monotonic() + 300  # a bound on the wait only: what is checked is what was generated
    while health(managed.url)["slots_processing"] != 0:
        assert time.monotonic() < deadline, "the slot was never freed"
        time.sleep(0.02)
    assert tokens_predicted(managed.url, API_KEY) - before < (CTX - 100) // 2  # it stopped when the client left


@pytest.mark.model
def test_models_and_status_describe_the_server(managed: ManagedServer, smollm2: Manifest) -> None:
    models = with_client(managed.url, lambda c: c.models())

    info = models[0]  # loaded ones first
    assert info.name == SERVED and info.loaded and info.context_length == CTX
    assert info.size_bytes == smollm2.size and info.quantization == "Q4_1"
    assert info.created > 0

    full = with_client(managed.url, lambda c: c.status())
    assert full.where == managed.url and full.serving == managed.url
    (loaded,) = full.loaded
    assert loaded.name == SERVED and loaded.backend == "llamacpp"
    assert loaded.context_length == CTX and loaded.slots >= 1
    assert loaded.threads is not None and loaded.threads > 0
    assert loaded.size_bytes > 0
    assert full.memory_total is not None and full.memory_used is not None and 0 < full.memory_used < full.memory_total


@pytest.mark.model
def test_load_returns_once_the_model_is_ready_and_names_a_missing_one(managed: ManagedServer) -> None:
    with_client(managed.url, lambda c: c.load(SERVED))
    with pytest.raises(ModelNotFound) as missing:
        with_client(managed.url, lambda c: c.load("no-such-model"))
    assert missing.value.model == "no-such-model"
    assert "localinfer ls" in missing.value.hint


@pytest.mark.model
def test_pull_reports_progress_then_remove_unregisters(managed: ManagedServer) -> None:
    async def use(client: HttpClient) -> list[str]:
        events = [event async for event in client.pull(SMOL_REPO)]
        assert events[-1].status == "success"
        assert any(e.total and e.completed == e.total and e.digest for e in events)
        listed = [m.name for m in await client.models()]
        assert await client.remove(SMOL_REPO) == 0
        with pytest.raises(ModelNotFound):
            await client.remove(SMOL_REPO)
        return listed

    assert SMOL_REPO in with_client(managed.url, use)
    assert SMOL_REPO not in [m.name for m in with_client(managed.url, lambda c: c.models())]


@pytest.mark.model
def test_closing_a_pull_early_stops_it_on_the_server(managed: ManagedServer) -> None:
    blobs = managed.hf_home / "hub" / ("models--" + SMOL_REPO.replace("/", "--")) / "blobs"

    async def use(client: HttpClient) -> None:
        stream = client.pull(SMOL_REPO)
        async for event in stream:
            if event.completed and event.total and event.completed < event.total:
                break
        await stream.aclose()

    managed.hub.rate_limit = 5_000_000
    try:
        served_before = managed.hub.bytes_served(SMOL_REPO, SMOL_FILE)
        with_client(managed.url, use)
        # the body ends when the server's download leaves the connection, or when all of it is sent (20 s at 5 MB/s)
        assert managed.hub.wait_bodies_ended(SMOL_REPO, SMOL_FILE)
        assert managed.hub.bytes_served(SMOL_REPO, SMOL_FILE) - served_before < 20_000_000  # it left early
    finally:
        managed.hub.rate_limit = None
    assert list(blobs.glob("*.incomplete"))  # kept for a resume
    assert managed.store.get(SMOL_REPO) is None


@pytest.mark.model
def test_errors_come_back_as_localinfer_errors(managed: ManagedServer) -> None:
    with pytest.raises(Unauthorized):
        with_client(managed.url, lambda c: c.models(), api_key=None)

    async def chat_missing(client: HttpClient) -> None:
        async for _ in client.chat(ChatRequest("no-such-model", (ChatMessage("user", "hi"),))):
            pass

    with pytest.raises(ModelNotFound) as missing:
        with_client(managed.url, chat_missing)
    assert missing.value.model == "no-such-model"


def test_an_unreachable_server_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def chat(client: HttpClient) -> None:
        async for _ in client.chat(ChatRequest("m", (ChatMessage("user", "hi"),))):
            pass

    uses: list[Callable[[HttpClient], Awaitable[object]]] = [lambda c: c.models(), chat, lambda c: c.status()]
    for use in uses:
        with pytest.raises(LocalInferError) as unreachable:
            with_client(url, use)
        assert unreachable.value.message == f"cannot reach localinfer at {url}"
        assert unreachable.value.hint == "start it with 'localinfer serve' or check --host"
