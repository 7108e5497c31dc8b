"""A Modelfile's ``ADAPTER`` is applied when its model runs: the model made from SmolLM2 with the derived LoRA
adapter answers what SmolLM2 served with ``--lora`` of the same file answers (scale 1, as Ollama applies it), and
not what SmolLM2 alone answers; an ``ADAPTER`` naming the PEFT folder of the same numbers is converted on the way
into the store and answers the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.backends.base import LoraState
from localinfer.bootstrap import local_stack
from localinfer.config import Settings
from localinfer.models.create import create, spec_from_modelfile
from localinfer.models.library import ModelLibrary
from localinfer.models.modelfile import parse
from localinfer.models.store import Manifest, ModelStore, local_manifest
from localinfer.quantize.for_create import adapter_converter
from localinfer.types import CompletionRequest, GenerationOptions, SamplingParams
from tests.lora_model import LoraFiles

pytestmark = pytest.mark.model
PROMPT = "The capital of France is"  # tests/backends/llamacpp/test_lora.py: the adapter at scale 1 changes its text


async def _greedy(
    settings: Settings, library: ModelLibrary, model: str, *, served: Manifest | None = None
) -> tuple[str, tuple[LoraState, ...]]:
    """The model's greedy continuation of a prompt the derived adapter changes, and the adapters it runs with."""
    stack = local_stack(settings, library=library, served=served)
    options = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=20)
    try:
        text = "".join([c.text async for c in stack.engine.complete(CompletionRequest(model, PROMPT, options))])
        return text, await stack.engine.lora_adapters(model)
    finally:
        await stack.client.close()


async def test_a_modelfiles_adapter_is_applied_as_lora_applies_it(
    smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path: Path
) -> None:
    settings = Settings().with_overrides(home=tmp_path / "home", threads=2, ctx_size=512, parallel=1)
    store = ModelStore(settings.models_dir)
    base = local_manifest(smollm2.path, name="base", sha256=smollm2.files[0].sha256)
    store.register(base)
    library = ModelLibrary(store, roots=None)
    create(
        library, "adapted", spec_from_modelfile(parse(f"FROM base\nADAPTER {smollm2_lora.gguf}\n"), tmp_path), settings
    )

    made, adapters = await _greedy(settings, library, "adapted")
    with_flag, _ = await _greedy(settings.with_overrides(lora=[str(smollm2_lora.gguf)]), library, "base", served=base)
    plain, none = await _greedy(settings, library, "base")
    assert adapters == (LoraState(0, smollm2_lora.gguf, 1.0),)
    assert none == ()
    assert made == with_flag
    assert made != plain


async def test_a_modelfiles_peft_adapter_is_converted_into_the_store_and_answers_as_the_gguf_one(
    smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path: Path
) -> None:
    settings = Settings().with_overrides(home=tmp_path / "home", threads=2, ctx_size=512, parallel=1)
    store = ModelStore(settings.models_dir)
    store.register(local_manifest(smollm2.path, name="base", sha256=smollm2.files[0].sha256))
    library = ModelLibrary(store, roots=None)
    convert = adapter_converter(store)
    for name, adapter in (("from-gguf", smollm2_lora.gguf), ("from-peft", smollm2_lora.peft)):
        spec = spec_from_modelfile(parse(f"FROM base\nADAPTER {adapter}\n"), tmp_path)
        create(library, name, spec, settings, adapter_converter=convert)

    made = library.find("from-peft")
    assert made is not None and len(made.adapters) == 1
    assert made.adapters[0].path.parent == store.blobs_dir and made.adapters[0].sha256 is not None
    assert not any(store.tmp_dir.iterdir())  # the conversion's partial file is gone
    assert (await _greedy(settings, library, "from-peft"))[0] == (await _greedy(settings, library, "from-gguf"))[0]
