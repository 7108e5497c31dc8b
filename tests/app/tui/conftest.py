"""Fixtures for the TUI: a fresh home whose store registers the real test models in place, and an app factory
that wires the real engine (in-process client) and a real conversation store, as ``localinfer`` does."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.client.base import ClientStatus, InferenceClient
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.hub import HubClient
from localinfer.models.library import ModelLibrary
from localinfer.models.store import Manifest, ModelStore
from localinfer.progress import ProgressEvent
from localinfer.types import ChatRequest, ModelInfo, TokenChunk

AppFactory = Callable[..., LocalInferApp]


class ForwardingClient:
    """The app's real client, every call passed on: tests override the one call they change."""

    def __init__(self, client: InferenceClient) -> None:
        self.client = client

    @property
    def where(self) -> str:
        return self.client.where

    def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        return self.client.chat(request)

    async def models(self) -> list[ModelInfo]:
        return await self.client.models()

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        await self.client.load(model, context_length=context_length)

    def pull(self, ref: str) -> AsyncGenerator[ProgressEvent, None]:
        return self.client.pull(ref)

    async def remove(self, model: str) -> int:
        return await self.client.remove(model)

    async def status(self) -> ClientStatus:
        return await self.client.status()

    async def close(self) -> None:
        await self.client.close()


@pytest.fixture
def tui_settings(tmp_path: Path) -> Settings:
    """A home of its own, no discovery of this machine's other tools, and a small engine."""
    return Settings().with_overrides(
        home=tmp_path / "home", discover=False, ctx_size=2048, parallel=1, threads=2, log_level="warning"
    )


def register(settings: Settings, manifest: Manifest, name: str) -> None:
    """Register a test model's files in place under ``name``: not owned by this store, so never deleted by it."""
    ModelStore(settings.models_dir).register(dataclasses.replace(manifest, name=name))


@pytest.fixture
def with_smollm2(tui_settings: Settings, smollm2: Manifest) -> Settings:
    register(tui_settings, smollm2, "smollm2")
    return tui_settings


@pytest.fixture
def conversations(tui_settings: Settings) -> Iterator[ConversationStore]:
    """The conversation store of the test home, to set up what the app will find."""
    store = ConversationStore(tui_settings.home / "conversations.sqlite3")
    yield store
    store.close()


@pytest.fixture
def short_chat(conversations: ConversationStore) -> int:
    """A conversation (the one the app opens) whose replies stop after 48 tokens: sampled replies of a small
    model can otherwise ramble to the end of the context."""
    return conversations.create(model="smollm2", settings=ConversationSettings(max_tokens=48)).id


@pytest.fixture
def make_app(tui_settings: Settings, tmp_path: Path) -> AppFactory:
    """``make_app(hub=None, settings=None, **kwargs)``: the app on the real engine (with ``settings``, default
    ``tui_settings``), pulling from ``hub``; kwargs go to LocalInferApp."""

    def factory(hub: HubClient | None = None, settings: Settings | None = None, **kwargs: Any) -> LocalInferApp:
        settings = settings or tui_settings
        library = ModelLibrary.from_settings(settings)
        client = LocalClient(Engine(settings, library), library, settings, hub=hub)
        store = ConversationStore(tui_settings.home / "conversations.sqlite3")
        options: dict[str, Any] = {"default_model": "smollm2", "export_dir": tmp_path / "exports"}
        options.update(kwargs)
        return LocalInferApp(client, store, **options)

    return factory


async def wait_for(
    predicate: Callable[[], bool | Awaitable[bool]], *, timeout: float = 60.0, what: str = "the condition"
) -> None:
    """Let the app run until ``predicate`` (a function or a coroutine function) holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _holds(predicate):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _holds(predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
    result = predicate()
    return await result if inspect.isawaitable(result) else result


async def loaded_models(app: LocalInferApp) -> list[str]:
    """The names of the models the app's client has loaded, as its status bar learns them."""
    return [m.name for m in (await app.client.status()).loaded]
