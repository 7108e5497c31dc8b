"""One backend class per engine, so a loaded model says which engine serves it (``/api/ps``, ``ps``)."""

from __future__ import annotations

from typing import ClassVar

from localinfer.backends.engine_process.backend import EngineProcessBackend
from localinfer.backends.engine_process.recipe import Recipe
from localinfer.backends.engine_process.recipes.sglang import SGLANG
from localinfer.backends.engine_process.recipes.tgi import TGI
from localinfer.backends.engine_process.recipes.trtllm import TRTLLM
from localinfer.backends.engine_process.recipes.vllm import VLLM


class VllmBackend(EngineProcessBackend):
    name: ClassVar[str] = "vllm"
    default_recipe: ClassVar[Recipe | None] = VLLM


class SglangBackend(EngineProcessBackend):
    name: ClassVar[str] = "sglang"
    default_recipe: ClassVar[Recipe | None] = SGLANG


class TgiBackend(EngineProcessBackend):
    name: ClassVar[str] = "tgi"
    default_recipe: ClassVar[Recipe | None] = TGI


class TrtllmBackend(EngineProcessBackend):
    name: ClassVar[str] = "trtllm"
    default_recipe: ClassVar[Recipe | None] = TRTLLM


ENGINE_BACKENDS: dict[str, type[EngineProcessBackend]] = {
    b.name: b for b in (VllmBackend, SglangBackend, TgiBackend, TrtllmBackend)
}
