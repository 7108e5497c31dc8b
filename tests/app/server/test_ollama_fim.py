"""Continue's autocomplete through Ollama's /api/generate with a ``suffix``, on the FIM test model (SmolLM2 with
its FIM tokens declared; see tests/conftest.py): /api/show says ``insert`` and mentions ``.Suffix`` (what Continue
checks before it sends FIM), and the fill is the text llama.cpp's /infill gives for the same prefix and suffix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(2, 3))\n"


@pytest.fixture(scope="module")
def fim_server(smollm2_fim: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_fim.name, test_home, tmp_path_factory.mktemp("serve-ollama-fim"), "--ctx-size", "2048") as s:
        yield s


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


def test_show_says_insert_and_mentions_suffix_for_a_model_with_fim_tokens(
    fim_server: Server, smollm2_fim: Manifest
) -> None:
    shown = post(fim_server, "/api/show", {"name": smollm2_fim.name}).json()  # Continue sends the legacy "name"
    assert "insert" in shown["capabilities"]
    assert ".Suffix" in shown["template"]


def test_continues_fim_request_fills_in_as_infill_does(fim_server: Server, smollm2_fim: Manifest) -> None:
    # the body Continue's Ollama provider sends for autocomplete (core/llm/llms/Ollama.ts, _streamFim and
    # _getGenerateOptions, at continuedev/continue 0108be5e): prompt is the prefix, suffix the rest, streamed
    body = {
        "model": smollm2_fim.name,
        "prompt": PREFIX,
        "suffix": SUFFIX,
        "options": {"temperature": 0, "num_predict": 12, "repeat_penalty": 1.0, "stop": ["\n\n"]},
        "keep_alive": 1800,
        "stream": True,
    }
    reply = post(fim_server, "/api/generate", body)
    assert reply.status_code == 200, reply.text
    lines = [json.loads(line) for line in reply.text.splitlines() if line.strip()]
    fill = "".join(line["response"] for line in lines)
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] > 0
    infill = post(
        fim_server,
        "/infill",
        {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0, "stop": ["\n\n"]},
    ).json()
    assert fill == infill["content"]
    assert fill  # the model wrote something between the two


def test_fim_on_a_model_without_fim_tokens_is_a_400(fim_server: Server, smollm2: Manifest) -> None:
    reply = post(fim_server, "/api/generate", {"model": smollm2.name, "prompt": PREFIX, "suffix": SUFFIX})
    assert reply.status_code == 400
    assert "FIM" in reply.json()["error"] or "fill-in-the-middle" in reply.json()["error"]
