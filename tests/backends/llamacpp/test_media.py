"""Pictures in the llama.cpp backend, with the real SmolLM2 and the test projector: a projector of another width is
refused at load in one line; the same picture gets the same ids (and another picture other ids) whatever prompt it
is in; a picture's embeddings are decoded once per cache and encoded once while its embeddings are kept; pictures on a
model without a projector, or more markers than pictures, are refused; a slot holding a picture the
next prompt lacks is taken last."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.media import media_affinity, text_run
from localinfer.errors import InvalidRequest, ModelLoadError
from localinfer.models.store import Manifest
from localinfer.types import MEDIA_MARKER, GenerationOptions, GenerationRequest, MediaPart, SamplingParams, Timings
from tests.images import png
from tests.vision_model import TOKENS_PER_IMAGE, projector_once

pytestmark = pytest.mark.model

ASK = f"<|im_start|>user\nWhat is {MEDIA_MARKER} this?<|im_end|>\n<|im_start|>assistant\n"


def picture(seed: int) -> MediaPart:
    return MediaPart("image", png(seed=seed), "image/png")


async def ask(backend: LlamaCppBackend, seed: int, prompt: str = ASK) -> tuple[str, Timings]:
    options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=6)
    request = GenerationRequest("test", prompt, options, media=(picture(seed),))
    chunks = [chunk async for chunk in backend.generate(request)]
    timings = chunks[-1].timings
    assert timings is not None
    return "".join(chunk.text for chunk in chunks), timings


async def test_a_projector_of_another_width_is_refused_at_load_in_one_line(smollm2: Manifest, tmp_path: Path) -> None:
    wrong = projector_once(tmp_path, text_width=64)
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError) as refused:
        await backend.load(LoadSpec(path=smollm2.path, ctx_size=256, parallel=1, threads=2, mmproj=wrong))
    message = refused.value.message
    assert "\n" not in message and wrong.name in message
    assert "576" in message and "64" in message  # the two widths, as llama.cpp names them
    assert refused.value.hint is not None and "--mmproj" in refused.value.hint


async def test_a_picture_is_decoded_once_per_cache_and_encoded_once(smollm2: Manifest, smollm2_mmproj: Path) -> None:
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=512, parallel=2, threads=2, mmproj=smollm2_mmproj))
    try:
        assert backend.facts.modalities == ("vision",)
        first_text, first = await ask(backend, 1)
        assert (first.media_n, first.cache_n) == (TOKENS_PER_IMAGE, 0) and first.encode_ms > 0
        _, other = await ask(backend, 2)  # to the other slot: the first picture's slot keeps it
        assert other.media_n == TOKENS_PER_IMAGE
        again_text, again = await ask(backend, 1)
        assert again.media_n == 0 and again.prompt_n == 1 and again_text == first_text
        longer = ASK.replace("this?", "this, in a few words?")
        _, reworded = await ask(backend, 1, longer)  # the same picture, other text after it: only that text
        assert reworded.media_n == 0 and reworded.cache_n >= first.cache_n + TOKENS_PER_IMAGE
        stats = backend.decode_stats()
        assert stats is not None and stats.media_tokens == 2 * TOKENS_PER_IMAGE
    finally:
        await backend.unload()


async def test_embeddings_kept_spare_the_encoder_when_the_cache_moved_on(
    smollm2: Manifest, smollm2_mmproj: Path
) -> None:
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=512, parallel=1, threads=2, mmproj=smollm2_mmproj))
    try:
        first_text, _ = await ask(backend, 3)
        await ask(backend, 4)  # one slot: this picture replaces the first in the cache
        again_text, again = await ask(backend, 3)
        assert again.media_n == TOKENS_PER_IMAGE and again.encode_ms == 0.0  # decoded again, not encoded
        assert again_text == first_text
    finally:
        await backend.unload()


async def test_what_cannot_be_seen_is_refused(smollm2: Manifest, smollm2_mmproj: Path) -> None:
    plain = LlamaCppBackend()
    await plain.load(LoadSpec(path=smollm2.path, ctx_size=256, parallel=1, threads=2))
    try:
        with pytest.raises(InvalidRequest, match="loaded without a projector"):
            await ask(plain, 1)
    finally:
        await plain.unload()
    seeing = LlamaCppBackend()
    await seeing.load(LoadSpec(path=smollm2.path, ctx_size=256, parallel=1, threads=2, mmproj=smollm2_mmproj))
    try:
        ends, _ = await ask(seeing, 1, f"Look: {MEDIA_MARKER}")  # gemma3's projector closes a picture with text
        assert isinstance(ends, str)
        with pytest.raises(InvalidRequest, match="2 media markers"):
            await ask(seeing, 1, ASK + MEDIA_MARKER)
        broken: Any = MediaPart("image", png()[:60], "image/png")
        request = GenerationRequest("test", ASK, GenerationOptions(max_tokens=2), media=(broken,))
        with pytest.raises(InvalidRequest, match="could not be decoded"):
            [chunk async for chunk in seeing.generate(request)]
        assert (await ask(seeing, 1))[0]  # and it goes on seeing
    finally:
        await seeing.unload()


def test_a_slot_holding_a_picture_the_prompt_lacks_is_taken_last() -> None:
    prompt = [1, 2, -1, -2, 3]
    holding_it = [1, 2, -1, -2, 9]
    holding_another = [1, 2, -7, -8, 9]
    text_only = [1, 5]
    empty: list[int] = []
    scores = {
        "holding it": media_affinity(holding_it, prompt, 4),
        "holding another": media_affinity(holding_another, prompt, 2),
        "text only": media_affinity(text_only, prompt, 1),
        "empty": media_affinity(empty, prompt, 0),
    }
    assert max(scores, key=scores.__getitem__) == "holding it"
    assert scores["text only"] > scores["empty"] > scores["holding another"]
    # two slots holding other pictures, serving as much: the one used longest ago is taken
    assert media_affinity(holding_another, prompt, 2, idle_for=3) > media_affinity(holding_another, prompt, 2)


def test_a_steps_text_stops_before_a_picture() -> None:
    assert text_run([5, 6, -1, -2, 7], 10) == [5, 6]
    assert text_run([5, 6, 7], 2) == [5, 6]
    assert text_run([-1, 5], 10) == []
