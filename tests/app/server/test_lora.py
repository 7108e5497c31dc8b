"""LoRA adapters on ``localinfer serve``, as on llama-server: ``--lora``, ``GET``/``POST /lora-adapters``, and a
request's ``lora`` on ``/completion`` and the OpenAI routes. The same requests go to the real llama-server
(built from the same llama.cpp) with the same files and flags, and the greedy texts are compared: requests of
different scales sent side by side in parallel, as llama.cpp's own test_lora.py sends them, each answer what
llama-server answers. Bad input is refused as a 400 in llama-server's error shape; ``/api/ps`` lists the adapters."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving, start_server
from tests.llama_cpp_tools import llama_server
from tests.lora_model import LoraFiles

# two servers on a shared CPU, each answering a dozen greedy requests
pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

FLAGS = ("-c", "2048", "-np", "4")
PROMPT = "Look in thy glass"
SCALES = [0.0, 0.5, 1.0, 1.0]  # one request per slot, as test_lora.py's per-request test sends them
CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a haiku."}]


def complete(url: str, **body: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": 10, "temperature": 0, "seed": 42, "cache_prompt": False, **body}
    reply = httpx.post(f"{url}/completion", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def side_by_side(url: str) -> list[str]:
    """Each scale of SCALES in its own request, all sent at once."""
    with ThreadPoolExecutor(len(SCALES)) as pool:
        answers = pool.map(lambda scale: complete(url, lora=[{"id": 0, "scale": scale}])["content"], SCALES)
        return list(answers)


def chat(url: str, scale: float) -> str | None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
    reply = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=8, temperature=0, extra_body={"lora": [{"id": 0, "scale": scale}]}
    )
    return reply.choices[0].message.content


def exchange(url: str) -> dict[str, Any]:
    """What the tests compare: the adapters listed, texts of each scale in parallel, chat at two scales, and the
    text after the global scale is set to 0."""
    answers: dict[str, Any] = {"listed": httpx.get(f"{url}/lora-adapters", timeout=60).json()}
    answers["parallel"] = side_by_side(url)
    answers["chat"] = [chat(url, 0.0), chat(url, 1.0)]
    answers["global_1"] = complete(url)["content"]
    set_zero = httpx.post(f"{url}/lora-adapters", json=[{"id": 0, "scale": 0.0}], timeout=60)
    answers["set"] = (set_zero.status_code, set_zero.json())
    answers["global_0"] = complete(url)["content"]
    answers["listed_after"] = httpx.get(f"{url}/lora-adapters", timeout=60).json()
    return answers


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    logs = tmp_path_factory.mktemp("llama-server")
    with llama_server(smollm2.path, logs, *FLAGS, "--lora", str(smollm2_lora.gguf)) as url:
        return exchange(url)


@pytest.fixture(scope="module")
def server(
    theirs: dict[str, Any],
    smollm2: Manifest,
    smollm2_lora: LoraFiles,
    test_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    logs = tmp_path_factory.mktemp("serve-lora")
    with serving(smollm2.name, test_home, logs, *FLAGS, "--lora", str(smollm2_lora.gguf)) as running:
        yield running


@pytest.fixture(scope="module")
def ours(server: Server) -> dict[str, Any]:
    return exchange(server.url)


def fields(listed: list[dict[str, Any]]) -> list[tuple[int, str, float]]:
    return [(a["id"], a["path"], a["scale"]) for a in listed]


def test_the_adapters_are_listed_as_llama_server_lists_them(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert fields(ours["listed"]) == fields(theirs["listed"])
    assert [a["scale"] for a in ours["listed"]] == [1.0]


def test_requests_of_different_scales_in_parallel_answer_as_llama_server(
    ours: dict[str, Any], theirs: dict[str, Any]
) -> None:
    assert len(set(theirs["parallel"])) >= 2  # the scales give other texts: the comparison can tell them apart
    assert ours["parallel"] == theirs["parallel"]


def test_chat_completions_take_a_requests_lora_as_llama_server(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["chat"] == theirs["chat"] and ours["chat"][0] != ours["chat"][1]


def test_the_global_scale_serves_requests_that_name_none_and_is_set_by_post(
    ours: dict[str, Any], theirs: dict[str, Any]
) -> None:
    assert ours["global_1"] == theirs["global_1"]
    assert ours["set"] == theirs["set"] == (200, {"success": True})
    assert ours["global_0"] == theirs["global_0"] != ours["global_1"]
    assert fields(ours["listed_after"]) == fields(theirs["listed_after"])


def test_lora_init_without_apply_serves_the_base_text_until_asked(
    theirs: dict[str, Any], smollm2: Manifest, smollm2_lora: LoraFiles, test_home: Path, tmp_path: Path
) -> None:
    flags = (*FLAGS, "--lora", str(smollm2_lora.gguf), "--lora-init-without-apply")
    with serving(smollm2.name, test_home, tmp_path, *flags) as running:
        assert complete(running.url)["content"] == theirs["global_0"]  # llama-server's README: scale 0 at start
        assert [a["scale"] for a in httpx.get(f"{running.url}/lora-adapters").json()] == [0.0]
        assert complete(running.url, lora=[{"id": 0, "scale": 1.0}])["content"] == theirs["global_1"]


def test_bad_lora_fields_are_400s_naming_them(server: Server) -> None:
    unknown = httpx.post(f"{server.url}/completion", json={"prompt": PROMPT, "lora": [{"id": 7, "scale": 1.0}]})
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert error["type"] == "invalid_request_error" and "no LoRA adapter has id 7" in error["message"]
    openai_side = httpx.post(
        f"{server.url}/v1/completions", json={"prompt": PROMPT, "lora": [{"id": 7, "scale": 1.0}], "max_tokens": 2}
    )
    assert openai_side.status_code == 400 and "no LoRA adapter has id 7" in openai_side.json()["error"]["message"]
    not_a_list = httpx.post(f"{server.url}/lora-adapters", json={"id": 0, "scale": 1.0})
    assert not_a_list.status_code == 400 and "must be an array" in not_a_list.json()["error"]["message"]
    no_id = httpx.post(f"{server.url}/lora-adapters", json=[{"scale": 1.0}])
    assert no_id.status_code == 400


def test_api_ps_lists_the_adapters_with_their_scale(server: Server, smollm2_lora: LoraFiles) -> None:
    [running] = httpx.get(f"{server.url}/api/ps").json()["models"]
    assert [(a["path"], a["scale"]) for a in running["adapters"]] == [
        (str(smollm2_lora.gguf), httpx.get(f"{server.url}/lora-adapters").json()[0]["scale"])
    ]


def test_a_missing_adapter_file_stops_serve_with_one_line(smollm2: Manifest, test_home: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as failed:
        start_server(smollm2.name, test_home, tmp_path, "--lora", str(tmp_path / "missing.gguf"))
    lines = [line for line in str(failed.value).splitlines()[1:] if line.strip()]
    assert lines[0] == f"localinfer: LoRA adapter not found: {tmp_path / 'missing.gguf'}"
    assert lines[1].startswith("hint:") and len(lines) == 2
