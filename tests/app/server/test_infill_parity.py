"""At temperature 0, localinfer's /infill and /v1/completions with a suffix write the same text as llama.cpp's own
llama-server's /infill on the same GGUF (the FIM test model): the prompt is laid out token for token as
llama-server lays it out.

llama-server is the one bench/build-llama-cpp builds from the llama.cpp source llama-cpp-python vendors (the same
code as our backend). It is started with the context, slots and batch localinfer is started with, and with flash
attention on: llama.cpp's default ("auto") turns it on in the contexts our backend creates, while llama-server's
"auto" leaves it off on a CPU, and this model (never trained on FIM) has near-tied logits where the two
arithmetics pick different tokens. Each request sets cache_prompt false, so both compute the whole prompt in one
batch, whatever was asked before.
"""

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

CTX = 2048

REQUESTS: list[dict[str, Any]] = [
    {"input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n", "prompt": "    return"},
    {
        "input_prefix": "import math\n\ndef area(r):\n    ",
        "input_suffix": "\n\ndef main():\n    print(area(2))\n",
        "input_extra": [
            {"filename": "util.py", "text": "def square(x):\n    return x * x\n"},
            {"filename": "consts.py", "text": "PI = 3.14159\n"},
        ],
    },
    {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n"},
    {  # a prefix longer than 3/4 of a batch: both keep its last 384 tokens
        "input_prefix": "".join(f"total_{i} = total_{i - 1} + {i}\n" for i in range(1, 200)),
        "input_suffix": "\nprint(total_199)\n",
    },
]
SETTINGS = {"n_predict": 24, "temperature": 0, "cache_prompt": False}


@pytest.fixture(scope="module")
def llama_server_answers(smollm2_fim: Manifest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """llama-server's /infill answers to REQUESTS; it runs only while they are asked, alone."""
    # llama-server's own batch sizes (-b 2048 -ub 512), which are localinfer's too: the batch sizes the prefix and
    # the suffix an infill takes
    settings = ("-c", str(CTX), "-np", "1", "-fa", "on")
    with llama_server(smollm2_fim.path, tmp_path_factory.mktemp("llama-server"), *settings) as url:
        answers = []
        for body in REQUESTS:
            reply = httpx.post(f"{url}/infill", json={**body, **SETTINGS}, timeout=300)
            assert reply.status_code == 200, reply.text
            answers.append(reply.json())
        return answers


@pytest.fixture(scope="module")
def parity_server(
    llama_server_answers: list[dict[str, Any]],
    smollm2_fim: Manifest,
    test_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    """localinfer on the same file, with the same context, slots and batch (started once llama-server is gone)."""
    log_dir = tmp_path_factory.mktemp("serve-parity")
    extra = ("--ctx-size", str(CTX), "--parallel", "1")  # and the default batch sizes
    with serving(smollm2_fim.name, test_home, log_dir, *extra) as server:
        yield server


@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_infill_writes_what_llama_server_writes(
    parity_server: Server, llama_server_answers: list[dict[str, Any]], index: int
) -> None:
    theirs = llama_server_answers[index]
    reply = httpx.post(f"{parity_server.url}/infill", json={**REQUESTS[index], **SETTINGS}, timeout=300)
    assert reply.status_code == 200, reply.text
    ours = reply.json()
    assert ours["tokens_evaluated"] == theirs["tokens_evaluated"]  # the same prompt, token for token
    assert theirs["content"] and ours["content"] == theirs["content"]
    assert ours["stop_type"] == theirs["stop_type"]
    assert ours["tokens_predicted"] == theirs["tokens_predicted"]  # an end token counted by both


@pytest.mark.parametrize("index", [i for i, r in enumerate(REQUESTS) if "input_extra" not in r and "prompt" not in r])
def test_completions_with_a_suffix_write_what_llama_servers_infill_writes(
    parity_server: Server, llama_server_answers: list[dict[str, Any]], index: int
) -> None:
    body = {
        "model": "smollm2-fim",
        "prompt": REQUESTS[index]["input_prefix"],
        "suffix": REQUESTS[index]["input_suffix"],
        "max_tokens": SETTINGS["n_predict"],
        "temperature": 0,
        "cache_prompt": False,
    }
    reply = httpx.post(f"{parity_server.url}/v1/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] == llama_server_answers[index]["content"]
