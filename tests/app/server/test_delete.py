"""Deleting models is atomic: a refused delete changes nothing (the served model stays loaded), a delete of the
loaded model unloads it first and then removes it, and /health tells the truth afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.errors import ModelManagedElsewhere, ModelNotFound
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest, ModelStore, local_manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.management import SERVED, ManagedServer, managed_server
from tests.idle_backend import IdleBackend

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def chat(url: str, model: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": model, **CHAT}, timeout=60)


def loaded(url: str) -> list[str]:
    return [m["name"].removesuffix(":latest") for m in httpx.get(f"{url}/api/ps").json()["models"]]


@pytest.fixture(scope="module")
def path_server(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """``localinfer serve /tmp/.../served-copy.gguf``: a model served from a path, registered nowhere."""
    root = tmp_path_factory.mktemp("delete-path")
    copy = root / "served-copy.gguf"
    shutil.copyfile(smollm2.path, copy)
    env = {"LOCALINFER_DISCOVER": "false"}
    with serving(str(copy), root / "home", root, "--ctx-size", "512", "--threads", "1", env=env) as server:
        yield server, copy


@pytest.mark.model
def test_a_refused_delete_of_the_served_model_leaves_it_serving(path_server: tuple[Server, Path]) -> None:
    server, copy = path_server
    for target in ("served-copy", str(copy)):
        refused = httpx.request("DELETE", f"{server.url}/api/delete", json={"model": target})
        assert refused.status_code == 404, target
        assert refused.json()["error"].startswith(f"model '{target}' not found")
        assert loaded(server.url) == ["served-copy"]
        answer = chat(server.url, "served-copy")
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"]
        health = httpx.get(f"{server.url}/health")
        assert (health.status_code, health.json()["status"]) == (200, "ok")
    assert copy.exists()
    assert chat(server.url, str(copy)).status_code == 404  # started from a path, it answers to its name only


@pytest.fixture
def registered_server(smollm2: Manifest, tmp_path: Path) -> Iterator[ManagedServer]:
    with managed_server(smollm2, tmp_path, "--ctx-size", "512", "--threads", "1", api_key=None) as server:
        yield server


@pytest.mark.model
def test_deleting_the_loaded_model_unloads_it_then_removes_it_and_the_server_serves_on_without_it(
    registered_server: ManagedServer, smollm2: Manifest
) -> None:
    url = registered_server.url
    assert chat(url, SERVED).status_code == 200
    assert loaded(url) == [SERVED]

    deleted = httpx.request("DELETE", f"{url}/api/delete", json={"model": SERVED})

    assert deleted.status_code == 200
    assert loaded(url) == []
    assert registered_server.store.get(SERVED) is None
    assert SERVED not in [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    health = httpx.get(f"{url}/health")
    assert health.status_code == 200  # the server itself is well: models load on demand, none loading now
    assert health.json()["slots_idle"] == 0 and health.json()["slots_processing"] == 0  # no model loaded
    gone = chat(url, SERVED)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "model_not_found"
    assert smollm2.path.exists()  # registered in place: its file is never deleted


class RecordingBackend(IdleBackend):
    """Records, when it is unloaded, whether its model was still registered."""

    def __init__(self, store: ModelStore, log: list[str]) -> None:
        super().__init__()
        self._store = store
        self._log = log

    async def load(self, spec: LoadSpec) -> None:
        await super().load(spec)
        self._log.append(f"load {spec.name}")

    async def unload(self) -> None:
        assert self.spec is not None
        registered = self._store.get(self.spec.name) is not None
        self._log.append(f"unload {self.spec.name} ({'registered' if registered else 'gone'})")


def test_delete_unloads_before_removing_and_a_refused_delete_unloads_nothing(tmp_path: Path) -> None:
    model_file, served_file = tmp_path / "m.gguf", tmp_path / "served.gguf"
    model_file.write_bytes(b"GGUF")
    served_file.write_bytes(b"GGUF")
    store = ModelStore(tmp_path / "models")
    store.register(local_manifest(model_file, name="kept"))
    other = local_manifest(served_file, name="unregistered")  # served from a path, as 'serve ./served.gguf'

    library = ModelLibrary(store, None)
    settings = Settings(home=tmp_path, discover=False)
    log: list[str] = []

    async def scenario() -> None:
        engine = Engine(settings, ServedModels(library, other), lambda: RecordingBackend(store, log))
        client = LocalClient(engine, library, settings)
        await engine.load("kept")
        await engine.load("unregistered")
        with pytest.raises(ModelNotFound):
            await client.remove("unregistered")  # loaded, but not registered: refused
        with pytest.raises(ModelNotFound):
            await client.remove("/etc/passwd")
        assert sorted(m.name for m in engine.loaded()) == ["kept", "unregistered"]
        assert engine.health() == "ready"
        await client.remove("kept")
        assert log[-1] == "unload kept (registered)"  # unloaded first, then removed
        assert store.get("kept") is None
        assert [m.name for m in engine.loaded()] == ["unregistered"]
        await engine.unload("unregistered")
        assert engine.loaded() == [] and engine.health() == "ready"  # none loaded; they load on demand

    asyncio.run(scenario())


def test_a_delete_of_another_tools_model_is_refused_and_unloads_nothing(tmp_path: Path) -> None:
    class Elsewhere(ModelLibrary):
        def discovered(self) -> list[Manifest]:
            return [local_manifest(model_file, name="ollama-model")]

    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    library = Elsewhere(ModelStore(tmp_path / "models"), None)
    settings = Settings(home=tmp_path, discover=False)

    async def scenario() -> None:
        engine = Engine(settings, ServedModels(library), IdleBackend)
        client = LocalClient(engine, library, settings)
        await engine.load("ollama-model")
        with pytest.raises(ModelManagedElsewhere):
            await client.remove("ollama-model")
        assert [m.name for m in engine.loaded()] == ["ollama-model"]

    asyncio.run(scenario())


class GatedUnloadBackend(IdleBackend):
    """Its unload says it began and waits for the test."""

    def __init__(self, unloading: asyncio.Event, release: asyncio.Event) -> None:
        super().__init__()
        self._unloading = unloading
        self._release = release

    async def unload(self) -> None:
        self._unloading.set()
        await self._release.wait()


def test_a_model_loaded_again_while_its_delete_unloads_it_is_unloaded_once_it_is_removed(tmp_path: Path) -> None:
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    store = ModelStore(tmp_path / "models")
    store.register(local_manifest(model_file, name="kept"))
    library = ModelLibrary(store, None)
    settings = Settings(home=tmp_path, discover=False)

    async def scenario() -> None:
        unloading, release = asyncio.Event(), asyncio.Event()
        engine = Engine(settings, ServedModels(library), lambda: GatedUnloadBackend(unloading, release))
        client = LocalClient(engine, library, settings)
        await engine.load("kept")
        removing = asyncio.create_task(client.remove("kept"))
        await unloading.wait()
        # a request for it while it unloads: still registered, so it loads again once the unload is done
        again = asyncio.create_task(engine.load("kept"))
        await asyncio.sleep(0)
        release.set()
        await removing
        with contextlib.suppress(ModelNotFound):  # it may find the model removed already
            await again
        await engine.wait_unloads()
        assert store.get("kept") is None
        assert engine.loaded() == []
        with pytest.raises(ModelNotFound):
            await engine.load("kept")

    asyncio.run(scenario())
