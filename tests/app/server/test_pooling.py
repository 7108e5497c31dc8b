"""``serve MODEL --pooling mean|cls|last|rank|none``, as llama-server's: the served model's embeddings pooled as
asked in place of what its file states. ``none`` gives one vector per token on llama.cpp's ``/embeddings``, and the
OpenAI and Ollama routes refuse it, as llama-server's OpenAI route does. Each vector is compared with llama-server's
on the same file (SmolLM2, a generative model that states no pooling)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

TEXT = "The cat sat on the mat."
POOLINGS = ["cls", "none"]


@pytest.fixture(scope="module")
def llama_server_rows(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's /embeddings rows for TEXT under each pooling, and its OpenAI route's answer under none."""
    answers: dict[str, Any] = {}
    for pooling in POOLINGS:
        folder = tmp_path_factory.mktemp(f"llama-server-{pooling}")
        with llama_server(smollm2.path, folder, "-c", "512", "-np", "1", "--embeddings", "--pooling", pooling) as url:
            answers[pooling] = httpx.post(f"{url}/embeddings", json={"content": TEXT}, timeout=120).json()
            if pooling == "none":
                answers["oai-none"] = httpx.post(f"{url}/v1/embeddings", json={"input": TEXT}, timeout=120)
    return answers


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-4) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_pooling_gives_llama_servers_rows(
    pooling: str, llama_server_rows: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    theirs = llama_server_rows[pooling][0]["embedding"]
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", "--pooling", pooling) as server:
        reply = httpx.post(f"{server.url}/embeddings", json={"content": TEXT}, timeout=120)
        assert reply.status_code == 200, reply.text
        ours = reply.json()[0]["embedding"]
        assert len(ours) == len(theirs) == (1 if pooling == "cls" else len(ours))
        if pooling == "none":
            tokens = httpx.post(f"{server.url}/tokenize", json={"content": TEXT, "add_special": True}, timeout=60)
            assert len(ours) == len(tokens.json()["tokens"]) > 1  # a row per token
        assert all(close(mine, reference) for mine, reference in zip(ours, theirs, strict=True))
        if pooling == "none":
            refused = httpx.post(f"{server.url}/v1/embeddings", json={"input": TEXT}, timeout=60)
            assert refused.status_code == llama_server_rows["oai-none"].status_code == 400
            assert refused.json()["error"]["param"] == "input"
            as_content = httpx.post(f"{server.url}/v1/embeddings", json={"content": TEXT}, timeout=60)
            assert as_content.status_code == 400  # as llama-server's OpenAI route, whatever shape is asked
            too_many = httpx.post(f"{server.url}/embeddings", json={"content": [[1] * 500] * 33}, timeout=60)
            assert too_many.status_code == 400 and "16384" in too_many.json()["error"]["message"]
            ollama = httpx.post(f"{server.url}/api/embed", json={"model": smollm2.name, "input": TEXT}, timeout=60)
            assert ollama.status_code == 400 and "pooling none" in ollama.json()["error"]
