"""discover: a multimodal projector found in place goes with its model and is never a model of its own (an
``mmproj*.gguf`` beside a model in the HF cache, LM Studio and extra folders; Ollama's projector layer)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gguf
import pytest

from localinfer.models.discover import discover
from localinfer.models.store import ModelFile
from tests.conftest import write_gguf
from tests.models.test_discover import COMMIT, by_name, hf_file, hf_ref, ollama_blob, roots, sha256_of
from tests.projector_gguf import write_projector

Q4_K_M = gguf.LlamaFileType.MOSTLY_Q4_K_M
Q8_0 = gguf.LlamaFileType.MOSTLY_Q8_0
F16 = gguf.LlamaFileType.MOSTLY_F16
F32 = gguf.LlamaFileType.ALL_F32


def test_an_hf_cache_projector_pairs_with_each_model_by_precision_and_is_no_model(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--ggml-org--gemma-3-4b-it-GGUF"
    hf_ref(repo, COMMIT)
    hf_file(repo, COMMIT, "gemma-3-4b-it-Q4_K_M.gguf", write_gguf(tmp_path / "a", file_type=Q4_K_M))
    hf_file(repo, COMMIT, "gemma-3-4b-it-f16.gguf", write_gguf(tmp_path / "b", file_type=F16))
    p16 = hf_file(repo, COMMIT, "mmproj-model-f16.gguf", write_projector(tmp_path / "p16", file_type=F16))
    hf_file(repo, COMMIT, "mmproj-model-Q8_0.gguf", write_projector(tmp_path / "p8", file_type=Q8_0))
    models = by_name(discover(roots(hf=tmp_path / "hub")))
    assert sorted(models) == ["hf.co/ggml-org/gemma-3-4b-it-GGUF:F16", "hf.co/ggml-org/gemma-3-4b-it-GGUF:Q4_K_M"]
    f16 = models["hf.co/ggml-org/gemma-3-4b-it-GGUF:F16"]
    blob = p16.resolve()
    assert f16.projector == ModelFile(path=p16, size=blob.stat().st_size, sha256=blob.name)
    q4 = models["hf.co/ggml-org/gemma-3-4b-it-GGUF:Q4_K_M"]
    assert q4.projector is not None and q4.projector.path.name == "mmproj-model-Q8_0.gguf"


def test_an_lmstudio_projector_beside_the_model_is_paired_and_one_in_another_folder_is_not(tmp_path: Path) -> None:
    repo = tmp_path / "lms" / "lmstudio-community" / "gemma-3-4b-it-GGUF"
    (repo / "other").mkdir(parents=True)
    write_gguf(repo / "gemma-3-4b-it-Q4_K_M.gguf", file_type=Q4_K_M)
    projector = write_projector(repo / "mmproj-model-f16.gguf")
    write_gguf(repo / "other" / "Text-Q8_0.gguf", file_type=Q8_0)
    write_projector(repo / "other" / "mmproj-other-f32.gguf", file_type=F32)
    models = discover(roots(lmstudio=(tmp_path / "lms",)))
    assert [(m.name, m.projector.path if m.projector else None) for m in models] == [
        ("lmstudio/lmstudio-community/gemma-3-4b-it-GGUF:Q4_K_M", projector),
        # a projector in a folder below the model's is not the model's, as llama.cpp picks them in a repository
        ("lmstudio/lmstudio-community/gemma-3-4b-it-GGUF:Q8_0", repo / "other" / "mmproj-other-f32.gguf"),
    ]


def test_an_extra_folder_model_takes_the_projector_beside_it(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "vl").mkdir(parents=True)
    write_gguf(root / "vl" / "SmolVLM-Q8_0.gguf", file_type=Q8_0)
    projector = write_projector(root / "vl" / "mmproj-SmolVLM-Q8_0.gguf", file_type=Q8_0)
    write_gguf(root / "text-only.gguf")
    models = by_name(discover(roots(extra=(root,))))
    assert sorted(models) == ["SmolVLM-Q8_0", "text-only"]
    assert models["SmolVLM-Q8_0"].projector == ModelFile(projector, projector.stat().st_size, None)
    assert models["text-only"].projector is None


def test_a_file_named_mmproj_that_is_no_projector_is_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "models"
    root.mkdir()
    write_gguf(root / "m-Q8_0.gguf", file_type=Q8_0)
    write_gguf(root / "mmproj-m-f16.gguf", file_type=F16)  # a language model's header, not clip's
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        (model,) = discover(roots(extra=(root,)))
    assert model.projector is None
    assert "mmproj-m-f16.gguf is left out" in caplog.text and "not a multimodal projector" in caplog.text


def ollama_vision_model(root: Path, tag_path: str, model: bytes, projector: bytes) -> None:
    layers = []
    for media, content in (("model", model), ("projector", projector), ("template", b"{{ .Prompt }}")):
        digest, size = ollama_blob(root, content)
        layers.append(
            {"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{digest}", "size": size}
        )
    path = root / "manifests" / tag_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))


def test_an_ollama_projector_layer_is_the_models_projector(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    projector = write_projector(tmp_path / "p.gguf").read_bytes()
    ollama_vision_model(
        root, "registry.ollama.ai/library/llava/7b", write_gguf(tmp_path / "m.gguf").read_bytes(), projector
    )
    (model,) = discover(roots(ollama=root))
    digest = sha256_of(tmp_path / "p.gguf")
    blob = root / "blobs" / f"sha256-{digest}"
    assert model.name == "llava:7b"
    assert model.projector == ModelFile(path=blob, size=len(projector), sha256=digest)


def test_an_ollama_model_whose_projector_blob_is_missing_is_listed_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ollama"
    projector = write_projector(tmp_path / "p.gguf").read_bytes()
    ollama_vision_model(
        root, "registry.ollama.ai/library/llava/7b", write_gguf(tmp_path / "m.gguf").read_bytes(), projector
    )
    (root / "blobs" / f"sha256-{sha256_of(tmp_path / 'p.gguf')}").unlink()
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        (model,) = discover(roots(ollama=root))
    assert model.projector is None and "missing" in caplog.text
