"""The engines localinfer runs as child processes, one recipe each, by the name ``--engine`` takes."""

from __future__ import annotations

from localinfer.backends.engine_process.recipe import Recipe
from localinfer.backends.engine_process.recipes.sglang import SGLANG
from localinfer.backends.engine_process.recipes.tgi import TGI
from localinfer.backends.engine_process.recipes.trtllm import TRTLLM
from localinfer.backends.engine_process.recipes.vllm import VLLM

RECIPES: dict[str, Recipe] = {r.name: r for r in (VLLM, SGLANG, TGI, TRTLLM)}
ENGINES = tuple(RECIPES)  # vllm, sglang, tgi, trtllm
