"""A reasoning model says it reasons, from its file: Ollama's ``/api/show`` lists the ``thinking`` capability
(without loading the model), and llama-server's ``/props`` says what llama-server says of the same model (its
template's thinking capabilities, the raw-text defaults) with ``supports_thinking`` added. SmolLM2 made a reasoning
model (tests/reasoning_model.py) against the plain SmolLM2; ``localinfer show``'s are in tests/app/commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

RAW_TEXT_DEFAULTS = ("chat_format", "reasoning_format", "reasoning_in_content", "generation_prompt")
LLAMA_SERVER_CAPS = ("supports_preserve_reasoning", "supports_reasoning_effort")


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_think.name, test_home, tmp_path_factory.mktemp("serve-think"), "--parallel", "1") as running:
        yield running


@pytest.fixture(scope="module")
def theirs(smollm2_think: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's /props on the reasoning model."""
    with llama_server(smollm2_think.path, tmp_path_factory.mktemp("llama-server"), "--jinja", "-np", "1") as url:
        props: dict[str, Any] = httpx.get(f"{url}/props", timeout=60).json()
    return props


def props_of(server: Server) -> dict[str, Any]:
    props: dict[str, Any] = httpx.get(f"{server.url}/props", timeout=60).json()
    return props


def capabilities(server: Server, model: str) -> list[str]:
    answer = httpx.post(f"{server.url}/api/show", json={"model": model}, timeout=60)
    assert answer.status_code == 200, answer.text
    listed: list[str] = answer.json()["capabilities"]
    return listed


# -- /api/show ------------------------------------------------------------------------------------------------------


def test_api_show_lists_thinking_last_for_a_reasoning_model(server: Server, smollm2_think: Manifest) -> None:
    assert capabilities(server, smollm2_think.name) == ["completion", "tools", "thinking"]


def test_api_show_lists_no_thinking_for_a_model_that_does_not_reason(smollm2_server: Server, smollm2: Manifest) -> None:
    assert capabilities(smollm2_server, smollm2.name) == ["completion"]


# -- /props ---------------------------------------------------------------------------------------------------------


def test_props_lists_the_templates_thinking_capabilities_as_llama_server_does(
    server: Server, theirs: dict[str, Any]
) -> None:
    ours = props_of(server)["chat_template_caps"]
    assert {key: ours[key] for key in LLAMA_SERVER_CAPS} == {
        key: theirs["chat_template_caps"][key] for key in LLAMA_SERVER_CAPS
    }


def test_props_says_the_reasoning_model_thinks(server: Server) -> None:
    assert props_of(server)["chat_template_caps"]["supports_thinking"] is True


def test_props_says_a_model_that_does_not_reason_does_not_think(smollm2_server: Server) -> None:
    assert props_of(smollm2_server)["chat_template_caps"]["supports_thinking"] is False


def test_props_default_settings_are_raw_text_as_llama_servers(server: Server, theirs: dict[str, Any]) -> None:
    ours = props_of(server)["default_generation_settings"]["params"]
    params = theirs["default_generation_settings"]["params"]
    assert {key: ours[key] for key in RAW_TEXT_DEFAULTS} == {key: params[key] for key in RAW_TEXT_DEFAULTS}


def test_props_finds_a_template_that_keeps_earlier_thinking(
    smollm2_think: Manifest, test_home: Path, tmp_path: Path
) -> None:
    keeping = "{% for m in messages %}{{ m.role }}:{{ m.reasoning_content or '' }}|{{ m.content }}\n{% endfor %}"
    with serving(smollm2_think.name, test_home, tmp_path, "--chat-template", keeping) as running:
        caps = props_of(running)["chat_template_caps"]
    assert (caps["supports_preserve_reasoning"], caps["supports_reasoning_effort"]) == (True, False)
