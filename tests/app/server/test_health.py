"""/health follows the engine: 503 while a model loads, 200 once it is ready.

The backend here is a stand-in whose load waits for the test, so the loading window can be observed; the
real model's readiness is what every other server test waits for.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from localinfer.app.server.app import create_app
from localinfer.backends.base import LoadSpec
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.store import ModelStore, local_manifest
from tests.idle_backend import IdleBackend


class SlowLoadingBackend(IdleBackend):
    def __init__(self, release: asyncio.Event) -> None:
        super().__init__()
        self._release = release

    async def load(self, spec: LoadSpec) -> None:
        await self._release.wait()


def test_health_is_503_while_the_model_loads_and_200_once_ready(tmp_path: Path) -> None:
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")

    async def scenario() -> None:
        release = asyncio.Event()
        settings = Settings(home=tmp_path)
        engine = Engine(settings, ModelStore(settings.models_dir), lambda: SlowLoadingBackend(release))
        app = create_app(engine)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            runner = engine.preload(local_manifest(model_file))
            loading = await client.get("/health")
            assert loading.status_code == 503
            assert loading.json()["status"] == "loading model"
            release.set()
            await runner.ready  # the load is done
            ready = await client.get("/health")
            assert ready.status_code == 200
            assert ready.json()["status"] == "ok"

    asyncio.run(scenario())
