"""KV cache types: a quantized cache loads, answers and is shown; its memory is measured; what cannot use it says so.

The memory figure is measured, not computed: the bytes llama.cpp saves for one sequence's cache after the same
prompt (``llama_state_seq_get_size``), f16 against q8_0 and q4_0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import llama_cpp.llama_cpp as lc
import openai
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.model import LlamaModel, kv_bytes_per_token
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

PROMPT = "The lighthouse keeper climbed the stairs every evening and wrote in his log what the sea had done. " * 8


@pytest.fixture(scope="module")
def q8_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    extra = ("--parallel", "1", "--ctx-size", "2048", "--cache-type-k", "q8_0", "-ctv", "Q8_0")
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("kv"), *extra) as server:
        yield server


def test_a_q8_0_cache_answers_and_ps_shows_it(q8_server: Server, smollm2: Manifest) -> None:
    client = openai.OpenAI(base_url=f"{q8_server.url}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model=smollm2.name, messages=[{"role": "user", "content": "What is 2 + 2?"}], max_tokens=16, temperature=0
    )
    assert (answer.choices[0].message.content or "").strip()
    [running] = httpx.get(f"{q8_server.url}/api/ps").json()["models"]
    assert running["kv_cache_type"] == {"k": "q8_0", "v": "q8_0"}
    listed = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "ps", "--url", q8_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    header, row = listed.stdout.splitlines()[:2]
    assert "KV CACHE" in header and " q8_0 " in row


def test_an_onnx_model_is_refused_with_the_types_set(
    q8_server: Server, smollm2_onnx: Manifest, smollm2: Manifest
) -> None:
    body = {"model": smollm2_onnx.name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    response = httpx.post(f"{q8_server.url}/v1/chat/completions", json=body, timeout=120)
    # the server's settings, not the request, are what cannot be served: a load failure, as Ollama answers one
    assert response.status_code == 500 and response.json()["error"]["code"] == "model_load_failed", response.text
    message = response.json()["error"]["message"]
    assert "(onnx) is served by onnx" in message and "--cache-type-k/--cache-type-v apply to GGUF" in message
    # the GGUF model is still served
    again = {"model": smollm2.name, "prompt": "Hi", "max_tokens": 2}
    assert httpx.post(f"{q8_server.url}/v1/completions", json=again, timeout=120).status_code == 200


def test_plain_attention_asked_with_quantized_values_is_refused_at_start_with_the_fix(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "LOCALINFER_HOME": str(test_home), "LOCALINFER_CONFIG": str(tmp_path / "none.toml")}
    answer = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", smollm2.name, "-ctv", "q8_0", "--flash-attn", "off"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert answer.returncode == 1, answer.stderr
    assert "a q8_0 value cache needs flash attention, and --flash-attn is off" in answer.stderr
    assert "hint: drop --flash-attn off, or keep the values in f16 (--cache-type-v f16)" in answer.stderr
    assert "Traceback" not in answer.stderr


def test_an_unknown_cache_type_is_a_one_line_error_listing_the_types() -> None:
    answer = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", "--cache-type-v", "q9_9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert answer.returncode == 2
    assert "no KV cache type 'q9_9'" in answer.stderr and "q8_0" in answer.stderr
    assert "Traceback" not in answer.stderr


def cache_bytes(manifest: Manifest, cache_type: str) -> tuple[int, int]:
    """One sequence's cache after PROMPT, as llama.cpp saves it, and the per-token estimate the planner uses."""
    model = LlamaModel.load(
        LoadSpec(
            path=manifest.path, ctx_size=1024, parallel=1, threads=2, cache_type_k=cache_type, cache_type_v=cache_type
        )
    )
    try:
        tokens = model.tokenize(PROMPT, add_special=True, parse_special=False)
        array = (lc.llama_token * len(tokens))(*tokens)
        assert lc.llama_decode(model.ctx, lc.llama_batch_get_one(array, len(tokens))) == 0
        assert model.model is not None
        estimate = kv_bytes_per_token(model.model, cache_type, cache_type) * len(tokens)
        return int(lc.llama_state_seq_get_size(model.ctx, 0)), estimate
    finally:
        model.free()


@pytest.mark.parametrize("manifest_name", ["smollm2", "gemma3"])
def test_a_q8_0_cache_takes_at_most_55_percent_of_f16s_memory(
    manifest_name: str, request: pytest.FixtureRequest
) -> None:
    manifest: Manifest = request.getfixturevalue(manifest_name)
    f16, f16_estimate = cache_bytes(manifest, "f16")
    q8_0, q8_0_estimate = cache_bytes(manifest, "q8_0")
    q4_0, _ = cache_bytes(manifest, "q4_0")
    assert q8_0 <= 0.55 * f16, (q8_0, f16)
    assert q4_0 < q8_0
    # the planner's estimate is what llama.cpp holds (a saved state adds a small header per layer)
    assert f16_estimate <= f16 <= f16_estimate * 1.05
    assert q8_0_estimate <= q8_0 <= q8_0_estimate * 1.05
