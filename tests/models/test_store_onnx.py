"""ONNX (onnxruntime-genai) model folders in the store: converted ones it owns, and folders used in place."""

from __future__ import annotations

from pathlib import Path

from localinfer.models.store import ModelStore, onnx_manifest


def make_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, content in {"model.onnx": b"graph", "tokenizer.json": b"{}", "genai_config.json": b"{}"}.items():
        (folder / name).write_bytes(content)
    return folder


def test_an_onnx_manifest_lists_every_file_with_genai_config_first(tmp_path: Path) -> None:
    manifest = onnx_manifest(make_folder(tmp_path / "m"), name="m", quantization="int8", owned=True)
    assert [f.path.name for f in manifest.files] == ["genai_config.json", "model.onnx", "tokenizer.json"]
    assert (manifest.path.name, manifest.format, manifest.size) == ("genai_config.json", "onnx", 9)
    assert manifest.files_present()


def test_removing_a_converted_model_deletes_its_folder(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    folder = make_folder(store.onnx_dir / store.folder_name("org/m:int8"))
    store.register(onnx_manifest(folder, name="org/m:int8", owned=True))
    assert store.get("org/m:int8") is not None
    store.remove("org/m:int8")
    assert not folder.exists()
    assert store.list() == []


def test_a_converted_model_reads_back_from_its_manifest_relative_to_the_store(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    folder = make_folder(store.onnx_dir / "m")
    manifest = onnx_manifest(folder, name="m", owned=True)
    store.register(manifest)
    assert store.get("m") == manifest
    assert '"onnx/m/genai_config.json"' in (store.manifests_dir / "m.json").read_text()


def test_an_onnx_folder_path_resolves_in_place_and_is_never_deleted(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    folder = make_folder(tmp_path / "mine")
    manifest = store.resolve(str(folder))
    assert (manifest.name, manifest.format, manifest.source) == ("mine", "onnx", f"file:{folder.resolve()}")
    assert not any(f.owned for f in manifest.files)
