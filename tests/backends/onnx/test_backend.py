"""The ONNX Runtime backend in-process, on SmolLM2 converted to int8 ONNX by ``localinfer convert``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.backends.onnx.model import CPU, GenaiModel
from localinfer.engine.templates import ChatTemplate
from localinfer.errors import ContextLengthExceeded, ModelLoadError, QueueFull
from localinfer.models.store import Manifest
from localinfer.types import (
    ChatMessage,
    GenerationOptions,
    GenerationRequest,
    ResponseFormat,
    SamplingParams,
    TokenChunk,
)
from tests.capital_answer import CAPITAL_SCHEMA, capital_in

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0)


@pytest.fixture
async def backend(smollm2_onnx: Manifest) -> AsyncIterator[OnnxBackend]:
    onnx = OnnxBackend()
    await onnx.load(LoadSpec(path=smollm2_onnx.path, ctx_size=2048, max_queue=1))
    yield onnx
    await onnx.unload()


def chat(backend: OnnxBackend, question: str, **options: Any) -> GenerationRequest:
    """A greedy chat request rendered with the model's template; ``options`` replace GenerationOptions fields."""
    rendered = ChatTemplate(backend.facts).render((ChatMessage("user", question),))
    generation = dataclasses.replace(GenerationOptions(sampling=GREEDY, stop=rendered.stop), **options)
    return GenerationRequest("test", rendered.text, generation, add_special=rendered.add_special)


async def eventually(condition: Callable[[], object], timeout: float = 300.0) -> bool:
    """Whether ``condition`` holds within ``timeout`` seconds (polled: the backend's thread changes it). The timeout
    only bounds the wait; what a test checks never depends on how soon it holds."""
    for _ in range(int(timeout / 0.005)):
        if condition():
            return True
        await asyncio.sleep(0.005)
    return bool(condition())


async def collect(backend: OnnxBackend, request: GenerationRequest) -> list[TokenChunk]:
    return [chunk async for chunk in backend.generate(request)]


async def test_facts_come_from_the_folder_so_the_engine_renders_the_models_chatml_template(
    backend: OnnxBackend,
) -> None:
    facts = backend.facts
    assert (facts.n_ctx, facts.n_ctx_train, facts.architecture, facts.n_slots) == (2048, 8192, "llama", 1)
    assert facts.has_chatml_tokens
    assert facts.chat_template is not None and "<|im_start|>" in facts.chat_template
    assert (facts.bos_token, facts.eos_token, facts.add_bos) == ("<|im_start|>", "<|im_end|>", False)
    template = ChatTemplate(facts)
    assert template.kind == "model"
    assert template.render((ChatMessage("user", "Hi"),)).text.endswith("<|im_start|>assistant\n")


async def test_greedy_chat_answers_and_ends_with_usage_and_timings(backend: OnnxBackend) -> None:
    # the answer held to a choice of capitals as JSON (tests/capital_answer.py): free greedy text differs between CPUs
    capital = ResponseFormat("json_schema", CAPITAL_SCHEMA)
    question = "What is the capital city of France? Answer in one word."
    chunks = await collect(backend, chat(backend, question, response_format=capital))
    text = "".join(c.text for c in chunks)
    assert capital_in(text) == "Paris"
    last = chunks[-1]
    assert last.finish_reason == "stop"
    assert last.usage is not None and last.usage.prompt_tokens > 20
    assert last.usage.completion_tokens == len(chunks) - 1 >= 5  # one token per chunk, the end carries none
    # as llama-server counts them: every token sampled, the end token that stopped the reply included
    assert last.timings is not None and last.timings.predicted_n == last.usage.completion_tokens + 1
    assert last.timings.predicted_per_second > 0 and last.timings.prompt_ms > 0


async def test_max_tokens_ends_with_length(backend: OnnxBackend) -> None:
    chunks = await collect(backend, chat(backend, "Write a long story about a dragon.", max_tokens=5, ignore_eos=True))
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


async def test_a_stop_string_is_cut_and_ends_the_reply(backend: OnnxBackend) -> None:
    counting = ResponseFormat("json_schema", {"const": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"})  # written out, not hoped for
    request = chat(backend, "Count from 1 to 10, separated by commas.", stop=("5",), response_format=counting)
    chunks = await collect(backend, request)
    text = "".join(c.text for c in chunks)
    assert text.replace(" ", "") == '"1,2,3,4,'
    assert chunks[-1].finish_reason == "stop"


async def test_the_same_seed_samples_the_same_reply(backend: OnnxBackend) -> None:
    sampling = SamplingParams(temperature=1.0, top_p=0.95, top_k=40, seed=7)
    replies = [
        "".join(c.text for c in await collect(backend, chat(backend, "Invent a name for a cat.", sampling=sampling)))
        for _ in range(2)
    ]
    assert replies[0] == replies[1] != ""


async def test_json_object_format_gives_json(backend: OnnxBackend) -> None:
    request = chat(backend, "Give me a JSON object with a key colour.", response_format=ResponseFormat("json_object"))
    text = "".join(c.text for c in await collect(backend, request))
    assert isinstance(json.loads(text), dict)


async def test_a_prompt_longer_than_the_context_is_refused_before_generating(smollm2_onnx: Manifest) -> None:
    small = OnnxBackend()
    await small.load(LoadSpec(path=smollm2_onnx.path, ctx_size=16))
    try:
        with pytest.raises(ContextLengthExceeded):
            await collect(small, GenerationRequest("long", "word " * 40, GenerationOptions(sampling=GREEDY)))
    finally:
        await small.unload()


async def test_closing_a_stream_early_stops_generating_at_once(
    backend: OnnxBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="localinfer.backends.onnx.job")
    endless = GenerationRequest(
        "endless", "Once upon a time", GenerationOptions(sampling=GREEDY, max_tokens=4000, ignore_eos=True)
    )
    stream = backend.generate(endless)
    async for _ in stream:
        break
    await stream.aclose()
    assert await eventually(lambda: backend.slot_usage().processing == 0)
    # judged by what was generated, not by how soon the slot freed: the request was cancelled far short of its 4000
    [cancelled] = [r for r in caplog.records if r.msg == "request %s cancelled after %d tokens"]
    assert isinstance(cancelled.args, tuple)
    request_id, tokens = cancelled.args
    assert request_id == "endless" and isinstance(tokens, int) and tokens < 1000
    chunks = await collect(backend, chat(backend, "Hi", max_tokens=1))
    assert chunks[-1].finish_reason in ("length", "stop")


async def test_requests_take_turns_and_a_full_queue_says_so(backend: OnnxBackend) -> None:
    story = chat(backend, "Write a long story about a dragon.", max_tokens=20, ignore_eos=True)
    first = asyncio.create_task(collect(backend, story))
    assert await eventually(lambda: backend.slot_usage().processing)
    second = asyncio.create_task(collect(backend, chat(backend, "Name three colours.", max_tokens=5, ignore_eos=True)))
    assert await eventually(lambda: backend.slot_usage().waiting)
    with pytest.raises(QueueFull):  # max_queue=1: one waits, the next is turned away
        await collect(backend, chat(backend, "Hi", max_tokens=1))
    done = await asyncio.gather(first, second)
    assert [chunks[-1].finish_reason for chunks in done] == ["length", "length"]


async def test_a_provider_that_fails_to_start_falls_back_to_the_cpu_with_the_reason_logged(
    smollm2_onnx: Manifest, caplog: pytest.LogCaptureFixture
) -> None:
    onnx = OnnxBackend()
    with caplog.at_level(logging.WARNING, logger="localinfer.backends.onnx"):
        await onnx.load(LoadSpec(path=smollm2_onnx.path, ctx_size=512, provider="CUDAExecutionProvider"))
    try:
        assert onnx.provider == CPU
        warning = next(r.getMessage() for r in caplog.records if "CUDAExecutionProvider" in r.getMessage())
        assert "could not start CUDAExecutionProvider" in warning and "on the CPU" in warning
        assert "cuda" in warning.lower().split("(", 1)[1]  # onnxruntime-genai's own reason is in the line
        chunks = await collect(onnx, chat(onnx, "Hi", max_tokens=3))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    finally:
        await onnx.unload()


def test_a_folder_without_genai_config_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"no genai_config\.json"):
        GenaiModel.load(tmp_path, None, 0)


def test_without_onnxruntime_genai_the_backend_imports_and_says_how_to_install_it(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['onnxruntime_genai'] = None\n"
        "from pathlib import Path\n"
        "import localinfer.engine.engine\n"
        "from localinfer.backends.onnx.model import GenaiModel\n"
        "from localinfer.errors import ModelLoadError\n"
        "try:\n"
        f"    GenaiModel.load(Path({str(tmp_path)!r}), None, 0)\n"
        "except ModelLoadError as exc:\n"
        "    print(exc.message, '|', exc.hint)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "onnxruntime-genai is not available" in done.stdout
    assert "pip install 'localinfer[onnx]'" in done.stdout
