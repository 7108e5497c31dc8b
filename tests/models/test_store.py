"""ModelStore: manifests on disk, names, in-place files, blobs and partial files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from localinfer.errors import ModelNotFound, PullError
from localinfer.models.store import Manifest, ModelFile, ModelStore

MakeGGUF = Callable[..., Path]
SHA = "ab" * 32


def blob_manifest(store: ModelStore, name: str, content: bytes = b"model bytes", sha: str = SHA) -> Manifest:
    blob = store.blob_path(sha)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    return Manifest(
        name=name,
        source="pypi:test==1.0",
        format="gguf",
        files=(ModelFile(path=blob, size=len(content), sha256=sha),),
        quantization="Q4_1",
        created=1700000000,
    )


def test_constructing_a_store_touches_nothing(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    assert (store.list(), store.get("x")) == ([], None)
    assert not (tmp_path / "models").exists()


def test_a_registered_manifest_reads_back_equal(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    manifest = blob_manifest(store, "tiny")
    store.register(manifest)
    assert store.get("tiny") == manifest


def test_register_writes_json_under_manifests(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "tiny"))
    data = json.loads((tmp_path / "manifests" / "tiny.json").read_text())
    assert (data["name"], data["files"][0]["path"]) == ("tiny", f"blobs/sha256-{SHA}")


def test_register_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "tiny"))
    store.register(blob_manifest(store, "tiny"))
    assert [p.name for p in (tmp_path / "manifests").iterdir()] == ["tiny.json"]


def test_a_store_moved_elsewhere_still_finds_its_blobs(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "a")
    store.register(blob_manifest(store, "tiny"))
    (tmp_path / "a").rename(tmp_path / "b")
    manifest = ModelStore(tmp_path / "b").get("tiny")
    assert manifest is not None and manifest.files_present()


def test_a_name_with_a_slash_round_trips(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"))
    manifest = store.get("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    assert manifest is not None and manifest.name == "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"
    assert [p.parent for p in (tmp_path / "manifests").iterdir()] == [tmp_path / "manifests"]


def test_a_name_with_a_colon_round_trips(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "llama3:8b-q4"))
    manifest = store.get("llama3:8b-q4")
    assert manifest is not None and manifest.name == "llama3:8b-q4"
    assert not any(":" in p.name for p in (tmp_path / "manifests").iterdir())


@pytest.mark.parametrize(
    "bad", ["", "../escape", "a/../b", "a//b", "/abs", "-flag", ".hidden", "with space", "x" * 201]
)
def test_register_rejects_a_bad_name_with_a_hint(tmp_path: Path, bad: str) -> None:
    store = ModelStore(tmp_path)
    manifest = blob_manifest(store, "ok")
    with pytest.raises(PullError) as excinfo:
        store.register(Manifest(bad, manifest.source, "gguf", manifest.files, None, 0))
    assert excinfo.value.hint


def test_list_is_sorted_by_name(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    for name in ["zeta", "alpha", "mid"]:
        store.register(blob_manifest(store, name))
    assert [m.name for m in store.list()] == ["alpha", "mid", "zeta"]


def test_list_keeps_a_manifest_whose_file_is_missing(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    manifest = blob_manifest(store, "gone")
    store.register(manifest)
    manifest.path.unlink()
    (listed,) = store.list()
    assert listed.name == "gone" and not listed.files_present()


def test_list_skips_a_corrupt_manifest(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "good"))
    (tmp_path / "manifests" / "bad.json").write_text("{not json")
    assert [m.name for m in store.list()] == ["good"]


def test_size_sums_the_files_and_path_is_the_first(tmp_path: Path) -> None:
    a, b = ModelFile(tmp_path / "a", 3, None), ModelFile(tmp_path / "b", 4, None)
    manifest = Manifest("m", "file:x", "gguf", (a, b), None, 0)
    assert (manifest.size, manifest.path) == (7, tmp_path / "a")


def test_remove_deletes_the_manifest_and_its_unshared_blob(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    manifest = blob_manifest(store, "tiny")
    store.register(manifest)
    store.remove("tiny")
    assert store.get("tiny") is None and not manifest.path.exists()


def test_remove_keeps_a_blob_another_manifest_uses(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.register(blob_manifest(store, "one"))
    store.register(blob_manifest(store, "two"))
    store.remove("one")
    two = store.get("two")
    assert two is not None and two.files_present()


def test_remove_never_deletes_a_file_used_in_place(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    store = ModelStore(tmp_path / "models")
    store.register(store.resolve(str(path)))
    store.remove("tiny")
    assert path.exists()


def test_remove_of_an_unknown_name_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        ModelStore(tmp_path).remove("nothing")


def test_resolve_returns_a_registered_manifest(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    manifest = blob_manifest(store, "tiny")
    store.register(manifest)
    assert store.resolve("tiny") == manifest


def test_resolve_uses_a_gguf_path_in_place_without_registering_it(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    path = make_gguf("My-Model.Q8_0.gguf")
    store = ModelStore(tmp_path / "models")
    manifest = store.resolve(str(path))
    real = path.resolve()
    assert (manifest.name, manifest.source, manifest.path) == ("My-Model.Q8_0", f"file:{real}", real)
    assert manifest.size == path.stat().st_size
    assert store.list() == []


def test_resolve_of_an_unknown_ref_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        ModelStore(tmp_path).resolve("no-such-model")


def test_resolve_of_a_file_that_is_not_gguf_raises_model_not_found(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x")
    with pytest.raises(ModelNotFound, match=r"weights\.bin"):
        ModelStore(tmp_path / "models").resolve(str(path))


def test_blob_path_is_named_by_digest(tmp_path: Path) -> None:
    assert ModelStore(tmp_path).blob_path(SHA) == tmp_path / "blobs" / f"sha256-{SHA}"


def test_blob_path_rejects_a_malformed_digest(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ModelStore(tmp_path).blob_path("../../etc/passwd")


def test_partial_file_is_deleted_when_the_block_raises(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    with pytest.raises(RuntimeError), store.partial_file() as partial:
        partial.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_partial_file_not_moved_away_is_deleted(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    with store.partial_file() as partial:
        partial.write_bytes(b"done but not moved")
    assert not partial.exists()


def test_partial_file_moved_away_survives(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    target = tmp_path / "kept"
    with store.partial_file() as partial:
        partial.write_bytes(b"data")
        partial.replace(target)
    assert target.read_bytes() == b"data"


def test_partial_file_is_inside_the_store_tmp_folder(tmp_path: Path) -> None:
    with ModelStore(tmp_path).partial_file() as partial:
        assert partial.parent == tmp_path / "tmp"


def test_resolve_serves_a_gguf_without_the_suffix_in_place(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    """Blobs in other tools' stores (Ollama's sha256-… files) are GGUFs without a .gguf suffix."""
    blob = make_gguf("sha256-0123")
    manifest = ModelStore(tmp_path / "store").resolve(str(blob))
    assert manifest.path == blob.resolve()
    assert manifest.name == "sha256-0123"
