"""The vLLM backend over a stand-in engine started by its own command line: load, generate through /v1/completions,
abort, unload."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

import httpx
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.engine_process.completions import completion_body, error_for
from localinfer.backends.engine_process.engines import VllmBackend
from localinfer.backends.engine_process.facts import DEFAULT_CONTEXT, model_facts
from localinfer.backends.engine_process.recipes.vllm import VLLM
from localinfer.errors import GenerationFailed, InvalidRequest, ModelLoadError, ModelNotReady
from localinfer.types import GenerationOptions, GenerationRequest, ResponseFormat, SamplingParams, TokenChunk
from tests.app.server.conftest import tokens_predicted
from tests.backends.engine_process.conftest import group_members, standin_env
from tests.backends.engine_process.standins import install_standin


def request(prompt: str, max_tokens: int | None, **options: object) -> GenerationRequest:
    sampling = SamplingParams(temperature=0, seed=1)
    return GenerationRequest("r1", prompt, GenerationOptions(sampling=sampling, max_tokens=max_tokens, **options))  # type: ignore[arg-type]


def test_a_request_becomes_a_streamed_completion_in_vllm_terms() -> None:
    schema = {"type": "object"}
    body = completion_body(
        "org/model",
        request("Hi", None, stop=("\nUser:",), response_format=ResponseFormat("json_schema", schema)),
    )
    assert body["model"] == "org/model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] is None
    assert body["repetition_penalty"] == 1.0
    assert body["stop"] == ["\nUser:"]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def test_engine_errors_become_localinfer_errors() -> None:
    refused = error_for(400, json.dumps({"error": {"message": "too long", "param": "prompt"}}).encode())
    assert isinstance(refused, InvalidRequest)
    assert (refused.message, refused.param) == ("too long", "prompt")
    assert isinstance(error_for(502, b'{"error": {"message": "gone"}}'), GenerationFailed)
    assert isinstance(error_for(503, b"loading"), ModelNotReady)


def test_facts_come_from_the_card_and_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 32768})
    )
    tokenizer = {
        "chat_template": "{{ messages }}",
        "bos_token": None,
        "eos_token": {"content": "<|im_end|>"},
        "added_tokens_decoder": {"1": {"content": "<|im_start|>"}, "2": {"content": "<|im_end|>"}},
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (tmp_path / "model.safetensors").write_bytes(b"0" * 100)
    facts = model_facts(tmp_path, {"id": "m", "max_model_len": 8192}, VLLM, extra_args=["--max-num-seqs=32"])
    assert (facts.n_ctx, facts.n_ctx_train, facts.architecture) == (8192, 32768, "Qwen2ForCausalLM")
    assert (facts.chat_template, facts.bos_token, facts.eos_token) == ("{{ messages }}", "", "<|im_end|>")
    assert facts.has_chatml_tokens
    assert (facts.n_slots, facts.model_bytes) == (32, 100)


def test_a_repo_id_gets_default_facts() -> None:
    facts = model_facts(Path("org/not-here"), {"id": "org/not-here"}, VLLM)
    assert (facts.n_ctx, facts.chat_template, facts.architecture) == (DEFAULT_CONTEXT, None, "unknown")


async def test_a_failed_load_leaves_nothing_running(tmp_path: Path) -> None:
    failing = dataclasses.replace(
        VLLM, command=lambda: [sys.executable, "-c", "print('no such model'); raise SystemExit(1)"]
    )
    backend = VllmBackend(recipe=failing, log_dir=tmp_path)
    with pytest.raises(ModelLoadError, match="no such model"):
        await backend.load(LoadSpec(path=Path("org/model")))
    assert backend.process is None
    with pytest.raises(ModelNotReady):
        backend.facts  # noqa: B018


@pytest.mark.model
async def test_the_backend_loads_generates_aborts_and_unloads(smollm2_gguf: Path, tmp_path: Path) -> None:
    env = standin_env(tmp_path, **install_standin("vllm", tmp_path), STANDIN_GGUF=str(smollm2_gguf))
    backend = VllmBackend(log_dir=tmp_path, env=env, ready_timeout=60)
    await backend.load(LoadSpec(path=smollm2_gguf))
    process = backend.process
    assert process is not None
    try:
        assert backend.facts.n_ctx == DEFAULT_CONTEXT  # localinfer's /v1/models has no max_model_len
        chunks = [c async for c in backend.generate(request("The capital of France is", 8))]
        assert "".join(c.text for c in chunks)
        last = chunks[-1]
        assert last.finish_reason == "length"
        assert last.usage is not None and last.usage.completion_tokens == 8
        assert last.timings is not None and last.timings.predicted_n == 8

        before = tokens_predicted(process.url, process.api_key)
        stream = backend.generate(request("Once upon a time", 400, ignore_eos=True))
        first: TokenChunk = await anext(stream)
        assert first.text
        assert await slots_processing(process.url) == 1
        await stream.aclose()
        assert await wait_idle(process.url)
        # judged by what the engine generated, not by how soon it was idle: far short of the 400 asked for
        assert tokens_predicted(process.url, process.api_key) - before < 200, "closing did not abort the request"
    finally:
        await backend.unload()
    assert not process.alive
    assert not group_members(process.pid or 0)
    with pytest.raises(ModelNotReady):
        await anext(backend.generate(request("Hi", 4)))


async def slots_processing(url: str) -> int:
    async with httpx.AsyncClient() as client:
        processing: int = (await client.get(f"{url}/health")).json()["slots_processing"]
        return processing


async def wait_idle(url: str, timeout: float = 300.0) -> bool:
    """Whether the engine at ``url`` has no request in flight within ``timeout`` seconds (a bound on the wait only)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await slots_processing(url) == 0:
            return True
        await asyncio.sleep(0.1)
    return False
