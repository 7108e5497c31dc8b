"""LoRA adapters in process on SmolLM2 (lora.py, the step loop's batches by adapter scales): scale 0 is the base
model's text, a request's own scales override the global ones, requests of different scales run side by side and
each answers what it answers alone, and what cannot load is refused in one line. Against llama-server:
tests/app/server/test_lora.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localinfer.backends.base import LoadSpec, LoraAdapter, LoraState
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.lora import TURN_STEPS, next_group
from localinfer.errors import InvalidRequest, ModelLoadError
from localinfer.models.store import Manifest
from localinfer.quantize.peft_lora import convert_peft_lora
from tests.lora_model import LoraFiles, adapter_pairs, write_gguf_adapter

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
Lora = tuple[tuple[int, float], ...] | None


def spec(model: Manifest, *adapters: LoraAdapter, parallel: int = 4) -> LoadSpec:
    return LoadSpec(path=model.path, ctx_size=512, parallel=parallel, threads=2, lora=adapters)


async def greedy(backend: LlamaCppBackend, lora: Lora = None, prompt: str = PROMPT) -> str:
    from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams

    options = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=20, lora=lora)
    return "".join([chunk.text async for chunk in backend.generate(GenerationRequest("lora", prompt, options))])


@pytest.fixture
async def base_text(smollm2: Manifest) -> str:
    backend = LlamaCppBackend()
    await backend.load(spec(smollm2, parallel=1))
    try:
        return await greedy(backend)
    finally:
        await backend.unload()


@pytest.fixture
async def adapted(smollm2: Manifest, smollm2_lora: LoraFiles) -> AsyncIterator[LlamaCppBackend]:
    backend = LlamaCppBackend()
    await backend.load(spec(smollm2, LoraAdapter(smollm2_lora.gguf, 1.0)))
    try:
        yield backend
    finally:
        await backend.unload()


async def test_scale_0_gives_the_base_models_text_and_scale_1_another(adapted: LlamaCppBackend, base_text: str) -> None:
    assert await greedy(adapted, ((0, 0.0),)) == base_text
    assert await greedy(adapted) != base_text  # loaded at scale 1: the global scale serves a request naming none


async def test_requests_of_different_scales_side_by_side_answer_what_each_answers_alone(
    adapted: LlamaCppBackend,
) -> None:
    scales = [0.0, 1.0, 0.5, 1.0, 0.0, 0.5]
    alone = {scale: await greedy(adapted, ((0, scale),)) for scale in set(scales)}
    assert len(set(alone.values())) == 3  # three scales, three texts: the test can tell them apart
    together = await asyncio.gather(*(greedy(adapted, ((0, scale),)) for scale in scales))
    assert together == [alone[scale] for scale in scales]


async def test_the_global_scales_serve_requests_that_name_none_and_are_listed(
    adapted: LlamaCppBackend, base_text: str, smollm2_lora: LoraFiles
) -> None:
    assert adapted.lora_adapters() == (LoraState(0, smollm2_lora.gguf, 1.0),)
    await adapted.set_lora_scales({})  # adapters left out: scale 0
    assert adapted.lora_adapters()[0].scale == 0.0
    assert await greedy(adapted) == base_text
    await adapted.set_lora_scales({0: 1.0})
    assert await greedy(adapted) == await greedy(adapted, ((0, 1.0),))


async def test_an_unknown_adapter_id_is_refused_naming_the_field(adapted: LlamaCppBackend) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await greedy(adapted, ((3, 1.0),))
    assert refused.value.param == "lora" and "3" in refused.value.message
    with pytest.raises(InvalidRequest):
        await adapted.set_lora_scales({1: 0.5})


async def test_a_missing_adapter_file_is_refused_at_load(smollm2: Manifest, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as refused:
        await LlamaCppBackend().load(spec(smollm2, LoraAdapter(tmp_path / "nope.gguf")))
    assert "LoRA adapter not found" in refused.value.message and "\n" not in refused.value.message


async def test_an_adapter_for_another_models_shapes_is_refused_with_llama_cpps_reason(
    smollm2: Manifest, gemma3: Manifest, tmp_path: Path
) -> None:
    pairs = {name: (a[:, :-1], b) for name, (a, b) in list(adapter_pairs(smollm2.path).items())[:2]}  # 1 input short
    wrong = tmp_path / "wrong.gguf"
    write_gguf_adapter(smollm2.path, wrong, pairs)
    with pytest.raises(ModelLoadError) as refused:
        await LlamaCppBackend().load(spec(smollm2, LoraAdapter(wrong)))
    assert "incorrect shape" in refused.value.message and "\n" not in refused.value.message
    with pytest.raises(ModelLoadError) as other_arch:  # SmolLM2's adapter on Gemma 3
        await LlamaCppBackend().load(spec(gemma3, LoraAdapter(wrong)))
    assert "could not load the LoRA adapter" in other_arch.value.message


async def test_the_converted_peft_folder_gives_the_gguf_adapters_text(
    smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path: Path, adapted: LlamaCppBackend
) -> None:
    converted = convert_peft_lora(smollm2_lora.peft, smollm2.path, tmp_path / "converted.gguf")
    assert converted.pairs == 210 and converted.alpha == 8.0
    backend = LlamaCppBackend()
    await backend.load(spec(smollm2, LoraAdapter(converted.path), parallel=1))
    try:
        assert await greedy(backend) == await greedy(adapted)
    finally:
        await backend.unload()


def test_each_set_of_scales_gets_its_turn_of_several_steps() -> None:
    groups = [(0.0,), (1.0,), (0.5,)]
    assert next_group(groups, None) == (0.0,)
    assert next_group(groups, (0.0,), 1) == (0.0,)  # its turn goes on
    assert next_group(groups, (0.0,), TURN_STEPS - 1) == (0.0,)
    assert next_group(groups, (0.0,), TURN_STEPS) == (1.0,)  # its turn is over: the next set's
    assert next_group(groups, (0.5,), TURN_STEPS) == (0.0,)
    assert next_group(groups, (2.0,), 1) == (0.0,)  # the last set batched has ended
    assert next_group([(0.0,)], (0.0,), 100) == (0.0,)  # alone, a set keeps the batch
