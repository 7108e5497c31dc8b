"""Model names from HTTP resolve only to what the library lists (CVE-2024-37032 was a path from a client made into
a file path): every path form gets the same 404 as any unknown name, on every route, whether or not the file
exists, and is not listed afterwards; ``/api/pull`` takes no paths. Against a real ``localinfer serve``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localinfer.errors import ModelNotFound
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest, ModelStore, local_manifest
from tests.app.server.management import SERVED, ManagedServer, managed_server

pytestmark = pytest.mark.model

NOT_FOUND_HINT = "run 'localinfer ls' to see the models here, or 'localinfer pull MODEL' to get one"
DELETE_HINT = "run 'localinfer ls' to see the models here"


@pytest.fixture(scope="module")
def server(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    with managed_server(
        smollm2, tmp_path_factory.mktemp("model-names"), "--ctx-size", "512", "--threads", "1", api_key=None
    ) as s:
        yield s


@pytest.fixture(scope="module")
def gguf_copy(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real GGUF file in a temporary folder, which no library lists."""
    copy = tmp_path_factory.mktemp("elsewhere") / "stolen.gguf"
    shutil.copyfile(smollm2.path, copy)
    return copy


def path_forms(gguf: Path) -> list[str]:
    return [
        str(gguf),
        os.path.relpath(gguf, Path.cwd()),  # the server runs in the tests' folder
        "~nosuchuser/x.gguf",
        "~/x.gguf",
        "../x",
        "../" + gguf.name,
        "/etc/passwd",
        "stolen.gguf",
    ]


def test_every_path_form_is_the_same_404_as_an_unknown_name_on_every_route(
    server: ManagedServer, gguf_copy: Path
) -> None:
    url = server.url
    # a server of one model answers any other name with its model, as llama-server does, except a path's
    # (test_one_model_names.py): every path form keeps the 404 an unknown name gets on a server of several
    for name in path_forms(gguf_copy):
        chat = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
            timeout=60,
        )
        assert chat.status_code == 404, name
        assert chat.json()["error"] == {
            "message": f"model '{name}' not found; {NOT_FOUND_HINT}",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
        completion = httpx.post(f"{url}/v1/completions", json={"model": name, "prompt": "Hi", "max_tokens": 2})
        assert completion.status_code == 404, name
        assert completion.json()["error"]["message"] == f"model '{name}' not found; {NOT_FOUND_HINT}"
        deleted = httpx.request("DELETE", f"{url}/api/delete", json={"model": name})
        assert deleted.status_code == 404, name
        assert deleted.json() == {"error": f"model '{name}' not found; {DELETE_HINT}"}

    listed = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert listed == [SERVED]  # the file asked for was never loaded nor listed
    tags = [m["name"] for m in httpx.get(f"{url}/api/tags").json()["models"]]
    assert tags == [f"{SERVED}:latest"]
    assert httpx.get(f"{url}/api/ps").json()["models"][0]["name"] == f"{SERVED}:latest"
    assert len(httpx.get(f"{url}/api/ps").json()["models"]) == 1
    assert httpx.get(f"{url}/health").status_code == 200


def test_pull_over_http_refuses_paths_with_one_message_whether_they_exist_or_not(
    server: ManagedServer, gguf_copy: Path
) -> None:
    answers = []
    for path in [str(gguf_copy), str(gguf_copy.with_name("missing.gguf")), "/etc/passwd", "./x.gguf", "~nobody/x"]:
        for stream in (True, False):
            reply = httpx.post(f"{server.url}/api/pull", json={"model": path, "stream": stream}, timeout=60)
            answers.append((reply.status_code, reply.json()))
    assert answers[0] == (
        400,
        {
            "error": "a local file cannot be pulled over HTTP; register it on the server's machine with "
            "'localinfer pull PATH'; over HTTP, pull a Hub reference (org/repo[:QUANT]), a catalog name or "
            "pypi:PACKAGE"
        },
    )
    assert all(answer == answers[0] for answer in answers)
    assert [m.name for m in server.store.list()] == [SERVED]  # nothing was registered


def test_a_served_model_answers_to_its_name_and_never_to_a_path(tmp_path: Path, gguf_copy: Path) -> None:
    """The source the server hands its engine, in process: the CLI's model (a path) is known by its name only."""
    library = ModelLibrary(ModelStore(tmp_path / "models"), None)
    served = local_manifest(gguf_copy)
    models = ServedModels(library, served)
    assert models.resolve("stolen") == served
    assert [m.name for m in models.list()] == ["stolen"]
    for name in path_forms(gguf_copy):
        with pytest.raises(ModelNotFound) as refused:
            models.resolve(name)
        assert refused.value.message == f"model '{name}' not found"
