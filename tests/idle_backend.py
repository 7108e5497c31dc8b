"""A backend that loads at once and never generates, for tests of what the engine and the server do around a
model (choosing its backend, planning its load, listing it): never the proof that a model runs."""

from __future__ import annotations

from typing import ClassVar

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage
from localinfer.types import GenerationRequest, TokenStream


class IdleBackend(Backend):
    """Remembers the ``LoadSpec`` it was loaded with; its facts name ``architecture`` and ``gpu_layers``."""

    name: ClassVar[str] = "idle"
    capabilities: ClassVar[Capabilities] = Capabilities(formats=("gguf", "onnx", "hf"))

    def __init__(self, architecture: str = "idle", *, gpu_layers: int = 0, n_ctx: int = 1024) -> None:
        self.architecture = architecture
        self.gpu_layers = gpu_layers
        self.n_ctx = n_ctx
        self.spec: LoadSpec | None = None

    async def load(self, spec: LoadSpec) -> None:
        self.spec = spec

    @property
    def facts(self) -> ModelFacts:
        return ModelFacts(
            self.n_ctx, self.n_ctx, None, "", "", False, False, self.architecture, 0, gpu_layers=self.gpu_layers
        )

    async def generate(self, request: GenerationRequest) -> TokenStream:
        raise AssertionError("an idle backend generates nothing")
        yield  # pragma: no cover

    async def unload(self) -> None:
        return None

    def slot_usage(self) -> SlotUsage:
        return SlotUsage()
