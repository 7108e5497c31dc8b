"""One backend class per engine, so a loaded model says which engine serves it (``/api/ps``, ``ps``)."""

from __future__ import annotations

from typing import ClassVar

from localinfer.backends.engine_process.backend import EngineProcessBackend
from localinfer.backends.engine_process.recipe import Recipe
from localinfer.backends.engine_process.recipes.vllm import VLLM


class VllmBackend(EngineProcessBackend):
    name: ClassVar[str] = "vllm"
    default_recipe: ClassVar[Recipe | None] = VLLM
