"""llama-server's ``__verbose`` on its OpenAI routes: with ``--verbose`` (or a request's ``verbose``), the answer
carries the native answer llama-server's ``/completion`` would give for it (server-task.cpp's
``to_json_non_oaicompat``): the prompt as the model got it, the text generated, the counts, the settings and the
timings. Chat's answer and a stream's first closing chunk carry it; text completions' streamed pieces too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from localinfer.app.server.llamacpp.responses import Served, final_body, streamed_piece
from localinfer.app.server.llamacpp.wire import generation_settings
from localinfer.engine.engine import Engine
from localinfer.types import ChatRequest, CompletionRequest, InfillRequest, TokenChunk


def verbose_asked(request: Request, asked: bool) -> bool:
    """Whether answers carry ``__verbose``: the server was started with ``--verbose``, or the request asks."""
    return asked or bool(getattr(request.app.state, "verbose_answers", False))


@dataclass
class VerboseBodies:
    """The ``__verbose`` of each choice of one request (``served[i]`` for choice ``i``)."""

    served: list[Served]
    stream: bool

    def __post_init__(self) -> None:
        self._predicted = [0] * len(self.served)

    def piece(self, index: int, chunk: TokenChunk) -> dict[str, Any]:
        """A streamed piece's, as llama-server's partial result reads natively."""
        self._predicted[index] += len(chunk.tokens)
        return streamed_piece(index, chunk, self._predicted[index])

    def final(self, index: int, content: str, last: TokenChunk) -> dict[str, Any]:
        """The finished choice's (a stream's: its text already sent, so ``content`` is empty)."""
        return final_body(self.served[index], content, last, stream=self.stream, index=index)


async def verbose_bodies(
    engine: Engine,
    cores: list[ChatRequest] | list[CompletionRequest | InfillRequest],
    n: int,
    *,
    stream: bool,
) -> VerboseBodies:
    """What ``__verbose`` repeats for each of the ``n`` choices of each of ``cores``: the model, its prompt (a
    chat's rendered by its template, as the model gets it) and the settings served."""
    served: list[Served] = []
    for core in cores:
        facts = await engine.facts(core.model)
        if isinstance(core, ChatRequest):
            prompt = (await engine.render(core)).text
        else:  # a fill-in-the-middle request's: the text before the gap, as its prompt
            prompt = core.prompt if isinstance(core, CompletionRequest) else core.prefix + core.prompt
        settings = generation_settings(core.options, facts.n_ctx, facts.eog_ids, stream=stream)
        served.extend([Served(core.model, prompt, settings)] * n)
    return VerboseBodies(served, stream)
