"""Ollama's ``/api/create``, ``/api/copy`` and ``/api/blobs`` on a real ``localinfer serve``, driven by the official
``ollama`` client, and the model made there run with SmolLM2: its system prompt and few-shot turns in the prompt,
its parameters in every dialect under a request's own fields. Properties only: no CPU's greedy text."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import pytest

from localinfer.models.modelfile import parse
from localinfer.models.store import Manifest
from tests.app.server.management import API_KEY, SERVED, SMOL_REPO, ManagedServer, managed_server
from tests.conftest import MakeGGUF

AUTH = {"Authorization": f"Bearer {API_KEY}"}
SYSTEM = "You are Captain Zork, a pirate."
SHOTS = [{"role": "user", "content": "Who goes there?"}, {"role": "assistant", "content": "Shiver me timbers!"}]


@pytest.fixture(scope="module")
def managed(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    with managed_server(
        smollm2, tmp_path_factory.mktemp("ollama-create"), "--ctx-size", "512", "--threads", "1"
    ) as server:
        yield server


@pytest.fixture(scope="module")
def client(managed: ManagedServer) -> Iterator[ollama.Client]:
    c = ollama.Client(host=managed.url, headers=AUTH, timeout=120)
    try:
        yield c
    finally:
        c.close()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def pirate(client: ollama.Client) -> str:
    """A model made from the served SmolLM2 with a system prompt, few-shot turns and parameters."""
    lines = client.create(
        model="pirate",
        from_=SERVED,
        system=SYSTEM,
        messages=SHOTS,
        parameters={"num_predict": 2, "stop": ["ZQX"], "temperature": 0},
        license="MIT",
        stream=True,
    )
    statuses = [line.status for line in lines]
    assert statuses[-1] == "success"
    assert "writing manifest" in statuses
    return "pirate"


def post(managed: ManagedServer, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{managed.url}{path}", json=body, headers=AUTH, timeout=120)


@pytest.mark.model
def test_show_gives_the_made_models_modelfile_system_and_parameters(
    managed: ManagedServer, client: ollama.Client, pirate: str
) -> None:
    shown = client.show(pirate)
    commands = {(c.instruction, c.key): c.value for c in parse(shown.modelfile or "")}
    assert commands[("SYSTEM", "")] == SYSTEM
    assert commands[("PARAMETER", "num_predict")] == "2"
    assert commands[("MESSAGE", "assistant")] == "Shiver me timbers!"
    assert shown.license == "MIT"
    assert 'stop                           "ZQX"' in (shown.parameters or "")
    raw = post(managed, "/api/show", {"model": pirate}).json()
    assert raw["system"] == SYSTEM
    assert raw["messages"] == SHOTS


@pytest.mark.model
def test_the_system_prompt_and_few_shot_turns_come_before_the_chat(managed: ManagedServer, pirate: str) -> None:
    prompt = post(managed, "/apply-template", {"model": pirate, "messages": [{"role": "user", "content": "Where?"}]})
    text = prompt.json()["prompt"]
    assert text.index(SYSTEM) < text.index("Who goes there?") < text.index("Shiver me timbers!") < text.index("Where?")
    own = [{"role": "system", "content": "Be plain."}, {"role": "user", "content": "Where?"}]
    text = post(managed, "/apply-template", {"model": pirate, "messages": own}).json()["prompt"]
    assert "Be plain." in text and SYSTEM not in text  # a request's own system prompt wins
    assert text.index("Be plain.") < text.index("Shiver me timbers!") < text.index("Where?")


@pytest.mark.model
def test_num_predict_applies_in_every_dialect_and_a_requests_own_limit_wins(
    managed: ManagedServer, client: ollama.Client, pirate: str
) -> None:
    forced = {"model": pirate, "prompt": "1, 2, 3,", "ignore_eos": True}  # no end of text: the limit ends it
    assert post(managed, "/v1/completions", forced).json()["usage"]["completion_tokens"] == 2
    assert post(managed, "/v1/completions", {**forced, "max_tokens": 5}).json()["usage"]["completion_tokens"] == 5
    responses = {"model": pirate, "input": "1, 2, 3,", "ignore_eos": True}
    assert post(managed, "/v1/responses", responses).json()["usage"]["output_tokens"] == 2
    assert post(managed, "/completion", forced).json()["tokens_predicted"] == 2
    assert post(managed, "/completion", {**forced, "n_predict": 4}).json()["tokens_predicted"] == 4
    reply = client.generate(model=pirate, prompt="Count to twenty.", options={"temperature": 0})
    assert (reply.eval_count or 0) <= 2


@pytest.mark.model
def test_the_models_stop_string_ends_the_text_unless_the_request_gives_its_own(
    managed: ManagedServer, pirate: str
) -> None:
    forced = {"model": pirate, "prompt": "Say it:", "grammar": 'root ::= "ahoyZQXmore"', "n_predict": 30}
    assert post(managed, "/completion", forced).json()["content"] == "ahoy"
    own = post(managed, "/completion", {**forced, "stop": ["more"]}).json()["content"]
    assert own == "ahoyZQX"


@pytest.mark.model
def test_copy_and_delete_keep_the_files_the_copy_uses(
    managed: ManagedServer, client: ollama.Client, pirate: str
) -> None:
    client.copy(pirate, "pirate-copy")
    client.delete(pirate)
    names = [m.model for m in client.list().models]
    assert "pirate-copy:latest" in names and "pirate:latest" not in names
    reply = client.generate(model="pirate-copy", prompt="Hello", options={"temperature": 0})
    assert reply.done and (reply.eval_count or 0) <= 2  # its files are there, its parameters came with it


@pytest.mark.model
def test_a_model_from_uploaded_blobs(managed: ManagedServer, client: ollama.Client, make_gguf: MakeGGUF) -> None:
    weights = make_gguf("uploaded.gguf")
    digest = client.create_blob(weights)
    assert digest == "sha256:" + hashlib.sha256(weights.read_bytes()).hexdigest()
    assert httpx.head(f"{managed.url}/api/blobs/{digest}", headers=AUTH).status_code == 200
    client.create(model="uploaded", files={"uploaded.gguf": digest}, system="From a file.")
    made = managed.store.get("uploaded")
    assert made is not None
    assert made.path == managed.store.blob_path(digest.removeprefix("sha256:"))
    assert made.defaults.system == "From a file."


@pytest.mark.model
def test_a_hub_base_that_is_not_here_is_pulled_first(managed: ManagedServer, client: ollama.Client) -> None:
    lines = list(client.create(model="hubbed", from_=f"{SMOL_REPO}:Q4_K_M", system="Pulled.", stream=True))
    assert lines[-1].status == "success"
    base, made = managed.store.get(f"{SMOL_REPO}:Q4_K_M"), managed.store.get("hubbed")
    assert base is not None and made is not None
    assert made.files == base.files and made.defaults.system == "Pulled."


@pytest.mark.model
def test_an_upload_whose_digest_differs_is_refused_and_not_kept(managed: ManagedServer) -> None:
    wrong = "sha256:" + "0" * 64
    reply = httpx.post(f"{managed.url}/api/blobs/{wrong}", content=b"GGUF not what was named", headers=AUTH)
    assert reply.status_code == 400
    assert "digest mismatch" in reply.json()["error"]
    assert httpx.head(f"{managed.url}/api/blobs/{wrong}", headers=AUTH).status_code == 404


@pytest.mark.model
@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        ({"from_": SERVED, "template": '{{ printf "%s" .Prompt }}'}, 400, "printf"),
        ({"from_": SERVED, "parameters": {"temperature": "hot"}}, 400, "temperature takes a number"),
        ({"from_": SERVED, "parameters": {"mirostat": 1}}, 400, "mirostat"),
        ({"from_": SERVED, "messages": [{"role": "tool", "content": "x"}]}, 400, "role 'tool'"),
        ({"from_": "/etc/hostname"}, 404, "not found"),
        ({"from_": SERVED, "quantize": "Q8_0"}, 400, "already quantized"),
        ({"files": {"x.gguf": "sha256:" + "1" * 64}}, 400, "upload it"),
    ],
)
def test_a_create_that_cannot_make_a_model_is_an_error_and_registers_nothing(
    managed: ManagedServer, client: ollama.Client, fields: dict[str, Any], status: int, says: str
) -> None:
    before = sorted(p.name for p in managed.store.manifests_dir.iterdir())
    with pytest.raises(ollama.ResponseError) as caught:
        client.create(model="broken", **fields)
    assert caught.value.status_code == status
    assert says in caught.value.error
    assert sorted(p.name for p in managed.store.manifests_dir.iterdir()) == before
