"""A llama-server command line starts ``localinfer serve`` and means what it means there: ``--seed``, ``--temp`` and
``--n-predict`` serve what a request leaves unset, ``-c`` with ``-np`` is the whole cache split into slots,
``--alias a,b`` names the model twice, ``--no-slots`` turns /slots off, ``--host`` takes several addresses,
``--chat-template NAME`` and ``--chat-template-file`` replace the model's template (compared with llama-server's
/apply-template), and llama-server's switches that change nothing here are accepted. Against real servers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, free_port, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one."},
    ]
}
TEMPLATE_FILE = (
    "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
)
LLAMA_SERVER_LINE = (
    "--seed", "42", "--temp", "0", "--n-predict", "6",
    "-c", "2048", "-np", "2",
    "--alias", "first-name,second-name",
    "--no-slots", "--jinja", "--metrics", "--embeddings", "--slots", "--no-webui",
    "--cont-batching",
)  # fmt: skip


@pytest.fixture(scope="module")
def server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("flags"), *LLAMA_SERVER_LINE) as server:
        yield server


def test_seed_temp_and_n_predict_serve_what_a_request_leaves_unset(server: Server) -> None:
    props = httpx.get(f"{server.url}/props", timeout=30).json()["default_generation_settings"]["params"]
    assert props["seed"] == 42 and props["temperature"] == 0 and props["n_predict"] == 6
    unset = httpx.post(f"{server.url}/completion", json={"prompt": "Once upon a time"}, timeout=120).json()
    assert unset["tokens_predicted"] == 6 and unset["stop_type"] == "limit"
    greedy = httpx.post(
        f"{server.url}/completion", json={"prompt": "Once upon a time", "temperature": 0, "n_predict": 6}, timeout=120
    ).json()
    assert unset["content"] == greedy["content"]  # --temp 0: greedy
    asked = httpx.post(f"{server.url}/completion", json={"prompt": "Once upon a time", "n_predict": 2}, timeout=120)
    assert asked.json()["tokens_predicted"] == 2  # what the request sets wins
    chat = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "ignore_eos": True}, timeout=120).json()
    assert chat["usage"]["completion_tokens"] == 6 and chat["choices"][0]["finish_reason"] == "length"
    ollama = httpx.post(
        f"{server.url}/api/generate",
        json={"model": "first-name", "prompt": "Once upon a time", "stream": False},  # a story: no end in 6
        timeout=120,
    ).json()
    assert ollama["eval_count"] == 6 and ollama["done_reason"] == "length"


def test_ctx_size_with_parallel_is_the_whole_cache_split_into_slots(server: Server) -> None:
    props = httpx.get(f"{server.url}/props", timeout=30).json()
    assert props["total_slots"] == 2
    assert props["default_generation_settings"]["n_ctx"] == 1024  # -c 2048 -np 2, as llama-server


def test_every_alias_names_the_model_and_the_first_one_answers(server: Server) -> None:
    names = [m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]]
    assert names[0] == "first-name"
    for name in ("first-name", "second-name"):
        body = {**CHAT, "model": name, "max_tokens": 2}
        reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200 and reply.json()["model"] == "first-name"


def test_no_slots_answers_501_in_llama_servers_shape(server: Server) -> None:
    reply = httpx.get(f"{server.url}/slots", timeout=30)
    assert reply.status_code == 501
    assert reply.json()["error"]["type"] == "not_supported_error" and reply.json()["error"]["code"] == 501


def test_host_takes_several_comma_separated_addresses(smollm2: Manifest, test_home: Path, tmp_path: Path) -> None:
    hosts = "127.0.0.1,127.0.0.2"
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", "--host", hosts) as server:
        port = server.url.rsplit(":", 1)[1]
        for host in hosts.split(","):
            reply = httpx.get(f"http://{host}:{port}/health", timeout=30)
            assert reply.status_code == 200, host


@pytest.fixture(scope="module")
def llama_server_templates(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The prompts llama-server renders for CHAT with llama3 (without Jinja: its built-in template) and with a
    template file (with Jinja)."""
    folder = tmp_path_factory.mktemp("template")
    template = folder / "template.jinja"
    template.write_text(TEMPLATE_FILE)
    prompts = {}
    for key, flags in (
        ("llama3", ("--no-jinja", "--chat-template", "llama3")),
        ("file", ("--jinja", "--chat-template-file", str(template))),
    ):
        with llama_server(smollm2.path, folder, "-c", "512", "-np", "1", *flags) as url:
            prompts[key] = httpx.post(f"{url}/apply-template", json=CHAT, timeout=120).json()["prompt"]
    return prompts


@pytest.mark.parametrize("key", ["llama3", "file"])
def test_a_chat_template_flag_renders_the_prompt_llama_server_renders(
    key: str, llama_server_templates: dict[str, str], smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE_FILE)
    flags = ("--chat-template", "llama3") if key == "llama3" else ("--chat-template-file", str(template))
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", *flags) as server:
        ours = httpx.post(f"{server.url}/apply-template", json=CHAT, timeout=120).json()["prompt"]
        assert ours == llama_server_templates[key]
        reply = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 2}, timeout=120)
        assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--chat-template", "llama-3"), "llama.cpp has no built-in chat template named 'llama-3'"),
        (("--chat-template", "{% for m in messages %}"), "the chat template does not parse"),
        (("--chat-template-file", "/nonexistent/t.jinja"), "cannot read the chat template file"),
        (("-c", "2", "-np", "4"), "leaves none a token"),
    ],
)
def test_a_bad_llama_server_flag_is_one_line_with_a_fix(
    flags: tuple[str, ...], message: str, smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    env = {"LOCALINFER_HOME": str(test_home), "LOCALINFER_CONFIG": str(tmp_path / "none.toml")}
    result = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", smollm2.name, "--port", str(free_port()), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_model_given_with_llama_servers_m_flag_is_served(smollm2: Manifest, test_home: Path, tmp_path: Path) -> None:
    flags = ("-m", str(smollm2.path), "-c", "512", "-b", "256", "-ub", "128")
    with serving("", test_home, tmp_path, *flags) as server:
        reply = httpx.post(f"{server.url}/completion", json={"prompt": "Hello", "n_predict": 2}, timeout=120)
        assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 2
        assert reply.json()["model"] in [
            m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]
        ]


def test_models_list_the_aliases_and_tags_as_llama_server_lists_them(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    flags = ("-c", "512", "--alias", "second-name,first-name", "--tags", "tag-b,tag-a")
    with llama_server(smollm2.path, tmp_path, *flags) as url:
        theirs = httpx.get(f"{url}/v1/models", timeout=60).json()["data"][0]
    with serving(smollm2.name, test_home, tmp_path, *flags) as server:
        ours = httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]
    served = next(card for card in ours if card["id"] == "second-name")  # the first given names it (docs say why)
    assert served["aliases"] == theirs["aliases"] == ["first-name", "second-name"]
    assert served["tags"] == theirs["tags"] == ["tag-a", "tag-b"]
    assert all(card["aliases"] == [] and card["tags"] == [] for card in ours if card is not served)
