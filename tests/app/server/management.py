"""A real ``localinfer serve`` whose models can be managed: its own home, SmolLM2 registered there, a Hub stand-in.

The home is a temporary folder, so pulls and deletes through the server never touch the persistent test home:
SmolLM2 is registered there in place (its file stays where the ``smollm2`` fixture put it, and is never deleted),
and the Hub stand-in offers SmolLM2's file as ``SMOL_REPO`` for pulls into a temporary Hugging Face cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localinfer.models.store import Manifest, ModelFile, ModelStore
from tests.app.server.conftest import Server, serving
from tests.hub_standin import HubStandIn

SMOL_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
SERVED = "smol"  # the name the served SmolLM2 is registered under
API_KEY = "test-key"


@dataclass
class ManagedServer:
    server: Server
    hub: HubStandIn
    home: Path
    hf_home: Path

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def store(self) -> ModelStore:
        return ModelStore(self.home / "models")


@contextmanager
def managed_server(
    smollm2: Manifest, root: Path, *extra: str, api_key: str | None = API_KEY
) -> Iterator[ManagedServer]:
    """``localinfer serve smol --api-key API_KEY *extra`` in a home under ``root``, pulling from a Hub stand-in
    (no key at all with ``api_key=None``)."""
    home = root / "home"
    in_place = tuple(dataclasses.replace(f, owned=False) for f in smollm2.files)
    ModelStore(home / "models").register(
        dataclasses.replace(smollm2, name=SERVED, source=f"file:{smollm2.path}", files=in_place)
    )
    assert all(isinstance(f, ModelFile) and not f.owned for f in in_place)
    with HubStandIn() as hub:
        hub.add_repo(SMOL_REPO, {SMOL_FILE: smollm2.path})
        env = {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(root / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "LOCALINFER_DISCOVER": "false",
        }
        key = ("--api-key", api_key) if api_key is not None else ()
        with serving(SERVED, home, root, *key, *extra, env=env) as server:
            yield ManagedServer(server, hub, home, root / "hf")
