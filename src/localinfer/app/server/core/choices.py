"""Several choices from one prompt (OpenAI's ``n``, llama-server's ``n_cmpl``), computed once and decoded side by side.

Each prompt's first choice runs first; the others of that prompt start once its first token has come, so the
backend finds the prompt already in a cache and copies it rather than computing it again (the llama.cpp step loop
borrows a cached prefix from another slot), then every choice decodes in the same batch. Choice ``i`` of a request
with a ``seed`` samples with ``seed + i``, as llama-server seeds its child tasks, so sampled choices differ and a
request repeated with the same seed gives the same choices.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Protocol, TypeVar

from localinfer.app.server.core.streams import Collected
from localinfer.types import GenerationOptions, TokenChunk, TokenStream, Usage

MAX_SEED = 2**64
MAX_CHOICES = 128  # as OpenAI's bound on n: they all run at once, and one request must not take the whole queue


class _HasOptions(Protocol):
    @property
    def options(self) -> GenerationOptions: ...


R = TypeVar("R", bound=_HasOptions)


def with_seed_offset(core: R, offset: int) -> R:
    """``core`` for the choice ``offset`` places after the first: its seed moved on by ``offset`` (none stays none:
    each choice then draws its own)."""
    seed = core.options.sampling.seed
    if offset == 0 or seed is None:
        return core
    sampling = dataclasses.replace(core.options.sampling, seed=(seed + offset) % MAX_SEED)
    options = dataclasses.replace(core.options, sampling=sampling)
    return dataclasses.replace(core, options=options)  # type: ignore[type-var]


def choice_streams(cores: Sequence[R], n: int, generate: Callable[[R], TokenStream]) -> list[TokenStream]:
    """The ``len(cores) * n`` generations of ``n`` choices per request, indexed as llama-server indexes them (the
    choices of the first prompt, then those of the next). A prompt's choices after its first start when the first
    has its first token (or has ended), so the prompt is computed once. Nothing starts before it is iterated."""
    streams: list[TokenStream] = []
    for core in cores:
        ready = asyncio.Event()
        streams.append(_signalling(generate(core), ready))
        streams.extend(_after(ready, generate, with_seed_offset(core, i)) for i in range(1, n))
    return streams


async def _signalling(stream: TokenStream, ready: asyncio.Event) -> TokenStream:
    try:
        async with aclosing(stream):
            async for chunk in stream:
                ready.set()
                yield chunk
    finally:
        ready.set()


async def _after(ready: asyncio.Event, generate: Callable[[R], TokenStream], core: R) -> TokenStream:
    await ready.wait()
    stream = generate(core)
    async with aclosing(stream):
        async for chunk in stream:
            yield chunk


async def merged(streams: Sequence[TokenStream]) -> AsyncGenerator[tuple[int, TokenChunk], None]:
    """The chunks of all ``streams`` as they come, each with its stream's index. The first error of any stream is
    raised here; closing this iterator (or an error) closes every stream, which frees their slots at once."""
    queue: asyncio.Queue[tuple[int, TokenChunk | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: TokenStream) -> None:
        try:
            async with aclosing(stream):
                async for chunk in stream:
                    queue.put_nowait((index, chunk))
        except Exception as exc:
            queue.put_nowait((index, exc))
            return
        queue.put_nowait((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def collect_all(streams: Sequence[TokenStream]) -> list[Collected]:
    """Every stream gathered whole, run side by side; the first error of any is raised (and the others closed)."""
    results = [Collected() for _ in streams]
    async with aclosing(merged(streams)) as chunks:
        async for index, chunk in chunks:
            results[index].add(chunk)
    return [result.done() for result in results]


def choices_usage(usages: Sequence[Usage | None], n: int) -> Usage:
    """The usage of a request whose choices (``n`` per prompt) used ``usages``, as OpenAI counts it: each prompt's
    tokens (and cached tokens) once, from its first choice, and every choice's completion tokens."""
    total = Usage(0, 0, 0)
    for index, usage in enumerate(usages):
        if usage is None:
            continue
        first = index % n == 0
        total = total + (usage if first else Usage(0, usage.completion_tokens, 0))
    return total
