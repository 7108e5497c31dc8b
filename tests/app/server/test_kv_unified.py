"""``-c 512 -np 2 --kv-unified``: one request may use the whole 512-token context, as llama-server's unified cache
lets it; without ``--kv-unified`` each slot has 256 and the same prompt is refused with llama-server's
``exceed_context_size_error`` and its numbers (plain and streamed). ``-c 256 -np 4``: llama.cpp rounds each slot up
to 256 tokens, and so does localinfer. The same requests to llama-server (built from the same source) and to
``localinfer serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

LONG = {"prompt": "hello " * 300, "n_predict": 2, "temperature": 0}  # past 256 tokens, within 512


def answers(url: str) -> dict[str, Any]:
    """What a server says of its slots' context and to a prompt past a quarter of it, plain and streamed."""
    n_ctx = httpx.get(f"{url}/props", timeout=60).json()["default_generation_settings"]["n_ctx"]
    plain = httpx.post(f"{url}/completion", json=LONG, timeout=120)
    streamed = httpx.post(f"{url}/completion", json={**LONG, "stream": True}, timeout=120)
    return {
        "n_ctx": n_ctx,
        "plain": (plain.status_code, plain.json()),
        "streamed": (streamed.status_code, streamed.json() if streamed.status_code != 200 else None),
    }


@pytest.mark.parametrize("unified", [True, False], ids=["kv-unified", "split"])
def test_a_request_may_use_the_whole_cache_only_when_it_is_unified(
    unified: bool, smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    flags = ("-c", "512", "-np", "2", *(("--kv-unified",) if unified else ()))
    with llama_server(smollm2.path, tmp_path, *flags) as url:
        theirs = answers(url)
    with serving(smollm2.name, test_home, tmp_path, *flags) as server:
        ours = answers(server.url)
    assert ours["n_ctx"] == theirs["n_ctx"] == (512 if unified else 256)
    for way in ("plain", "streamed"):
        (their_status, their_body), (our_status, our_body) = theirs[way], ours[way]
        assert our_status == their_status == (200 if unified else 400), (theirs, ours)
        if unified:
            continue
        their_error, our_error = their_body["error"], our_body["error"]
        assert our_error["type"] == their_error["type"] == "exceed_context_size_error"
        assert our_error["n_ctx"] == their_error["n_ctx"] == 256
        assert our_error["n_prompt_tokens"] == their_error["n_prompt_tokens"]
    if unified:
        assert ours["plain"][1]["tokens_evaluated"] == theirs["plain"][1]["tokens_evaluated"] > 256


def test_each_slots_context_is_rounded_up_to_256_tokens_as_llama_cpp_rounds_it(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    flags = ("-c", "256", "-np", "4")
    with llama_server(smollm2.path, tmp_path, *flags) as url:
        theirs = httpx.get(f"{url}/props", timeout=60).json()["default_generation_settings"]["n_ctx"]
    with serving(smollm2.name, test_home, tmp_path, *flags) as server:
        ours = httpx.get(f"{server.url}/props", timeout=60).json()["default_generation_settings"]["n_ctx"]
    assert ours == theirs == 256
