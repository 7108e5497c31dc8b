"""Priority inside one model, in process on SmolLM2 with one slot: a keystroke's completion (high priority) that
arrives while a long chat prompt is being computed takes the slot between two micro-batches; the chat starts
again afterwards and answers what it answers alone. The queue's rules on their own: test_dispatch.py."""

from __future__ import annotations

import asyncio

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, Priority, SamplingParams

pytestmark = pytest.mark.model

CHAT = "Summarise what the keeper wrote.\n" + "The keeper climbed the stairs, lit the lamp and wrote it down. " * 240
GREEDY = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=8, ignore_eos=True, cache_prompt=False)


async def reply(backend: LlamaCppBackend, name: str, prompt: str, priority: Priority, events: list[str]) -> str:
    stream = backend.generate(GenerationRequest(name, prompt, GREEDY, priority=priority))
    text = ""
    async for chunk in stream:
        if chunk.text and not text:
            events.append(f"{name} streams")
        text += chunk.text
    events.append(f"{name} done")
    return text


async def test_a_keystroke_takes_the_slot_of_a_long_chat_prompt_and_the_chat_still_answers_the_same(
    smollm2: Manifest,
) -> None:
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=4096, parallel=1, threads=2, ubatch_size=512))
    try:
        events: list[str] = []
        chat = asyncio.create_task(reply(backend, "chat", CHAT, "normal", events))
        while True:  # the first micro-batch of the chat's prompt is computed
            [slot] = backend.slots()
            if slot.is_processing and slot.n_cached >= 512:
                break
            await asyncio.sleep(0.005)
        # less than half the prompt computed when the keystroke comes, even one micro-batch later
        assert slot.n_prompt - slot.n_cached > slot.n_cached + 1024, (slot.n_prompt, slot.n_cached)
        await reply(backend, "keystroke", "def add(a, b):\n    return", "high", events)
        contested = await chat
        assert events == ["keystroke streams", "keystroke done", "chat streams", "chat done"]
        alone = await reply(backend, "alone", CHAT, "normal", [])
        assert contested == alone and contested.strip()
    finally:
        await backend.unload()
