"""discover: GGUF models other tools downloaded, found in place (Ollama, HF cache, LM Studio, extra folders)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import gguf
import pytest

from localinfer.models.discover import DiscoveryRoots, default_roots, discover
from localinfer.models.store import Manifest, ModelFile
from tests.conftest import write_gguf

Q4_K_M = gguf.LlamaFileType.MOSTLY_Q4_K_M
Q8_0 = gguf.LlamaFileType.MOSTLY_Q8_0
COMMIT = "c" * 40
OLD_COMMIT = "0" * 40
HOME = Path("/home/u")


def roots(
    *, hf: Path | None = None, ollama: Path | None = None, lmstudio: tuple[Path, ...] = (), extra: tuple[Path, ...] = ()
) -> DiscoveryRoots:
    return DiscoveryRoots(hf_cache=hf, ollama=ollama, lmstudio=lmstudio, extra=extra)


def by_name(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {m.name: m for m in manifests}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- Ollama: manifests/<host>/<namespace>/<model>/<tag>, blobs/sha256-<hex> ----------------------------------


def ollama_blob(root: Path, content: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(content).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(content)
    return digest, len(content)


def ollama_model(root: Path, tag_path: str, model: bytes | None, *, size: int | None = None) -> Path:
    """Lay out a model as Ollama does: a model layer plus template, projector and params layers."""
    if model is not None:
        digest, real_size = ollama_blob(root, model)
    else:
        digest, real_size = "e" * 64, 123
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": size or real_size}
    ]
    for media, content in (("template", b"{{ .Prompt }}"), ("projector", b"GGUF projector"), ("params", b"{}")):
        d, n = ollama_blob(root, content)
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{d}", "size": n})
    config_digest, config_size = ollama_blob(root, b'{"model_format": "gguf"}')
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": f"sha256:{config_digest}",
            "size": config_size,
        },
        "layers": layers,
    }
    path = root / "manifests" / tag_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


@pytest.fixture
def ollama(tmp_path: Path) -> Path:
    root = tmp_path / "ollama" / "models"
    gguf_bytes = write_gguf(tmp_path / "llama.gguf", file_type=Q4_K_M).read_bytes()
    ollama_model(root, "registry.ollama.ai/library/llama3.2/1b", gguf_bytes)
    ollama_model(root, "registry.ollama.ai/someuser/mymodel/latest", write_gguf(tmp_path / "u.gguf").read_bytes())
    ollama_model(root, "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF/Q4_K_M", gguf_bytes)
    (root / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir(parents=True)
    (root / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest").write_text('{"layers": [')
    ollama_model(root, "registry.ollama.ai/library/gone/latest", None)
    return root


def test_ollama_library_user_and_other_host_models_are_named_like_ollama_names_them(ollama: Path) -> None:
    assert [m.name for m in discover(roots(ollama=ollama))] == [
        "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
        "llama3.2:1b",
        "someuser/mymodel:latest",
    ]


def test_an_ollama_model_is_its_model_layer_blob_with_the_blob_digest(ollama: Path, tmp_path: Path) -> None:
    model = by_name(discover(roots(ollama=ollama)))["llama3.2:1b"]
    digest = sha256_of(tmp_path / "llama.gguf")
    blob = ollama / "blobs" / f"sha256-{digest}"
    assert model.files == (ModelFile(path=blob, size=blob.stat().st_size, sha256=digest),)
    assert (model.format, model.quantization, model.revision) == ("gguf", "Q4_K_M", None)
    assert model.created == int(blob.stat().st_mtime)


def test_an_ollama_model_source_is_its_manifest_path(ollama: Path) -> None:
    model = by_name(discover(roots(ollama=ollama)))["someuser/mymodel:latest"]
    assert model.source == f"ollama:{ollama / 'manifests/registry.ollama.ai/someuser/mymodel/latest'}"


def test_malformed_ollama_manifests_and_missing_blobs_are_skipped_with_a_warning(
    ollama: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        names = [m.name for m in discover(roots(ollama=ollama))]
    assert "broken:latest" not in names and "gone:latest" not in names
    assert "malformed Ollama manifest" in caplog.text and "gone:latest" in caplog.text


def test_an_ollama_blob_of_another_size_than_its_layer_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    ollama_model(root, "registry.ollama.ai/library/x/latest", write_gguf(tmp_path / "x.gguf").read_bytes(), size=7)
    assert discover(roots(ollama=root)) == []


def test_an_ollama_model_blob_that_is_not_gguf_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    ollama_model(root, "registry.ollama.ai/library/x/latest", b"safetensors, not gguf")
    assert discover(roots(ollama=root)) == []


# -- Hugging Face cache: models--org--name/{refs,snapshots,blobs} ------------------------------------------


def hf_file(repo: Path, commit: str, rel: str, source: Path) -> Path:
    """Put ``source`` in the cache like huggingface_hub: blobs/<sha256 etag>, a relative link in the snapshot."""
    etag = sha256_of(source)
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    os.replace(source, repo / "blobs" / etag)
    link = repo / "snapshots" / commit / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(repo / "blobs" / etag, link.parent))
    return link


def hf_ref(repo: Path, commit: str, ref: str = "main") -> None:
    (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)


@pytest.fixture
def hf(tmp_path: Path) -> Path:
    hub = tmp_path / "hf" / "hub"
    repo = hub / "models--bartowski--Qwen-GGUF"
    hf_ref(repo, COMMIT)
    hf_file(repo, COMMIT, "Qwen-Q4_K_M.gguf", write_gguf(tmp_path / "a", file_type=Q4_K_M))
    for i in (1, 2):
        part = write_gguf(tmp_path / f"p{i}", file_type=Q8_0, name=f"part {i}")
        hf_file(repo, COMMIT, f"Qwen-Q8_0/Qwen-Q8_0-0000{i}-of-00002.gguf", part)
    hf_file(repo, COMMIT, "mmproj-Qwen-F16.gguf", write_gguf(tmp_path / "m", file_type=gguf.LlamaFileType.MOSTLY_F16))
    (tmp_path / "readme").write_text("# a model card\n")
    hf_file(repo, COMMIT, "README.md", tmp_path / "readme")
    (repo / "blobs" / f"{'d' * 64}.incomplete").write_bytes(b"GGUF half a download")
    hf_file(repo, OLD_COMMIT, "Qwen-Old-Q4_K_M.gguf", write_gguf(tmp_path / "o", file_type=Q4_K_M))
    return hub


def test_hf_cache_models_are_named_after_the_repo_and_quantization(hf: Path) -> None:
    assert [m.name for m in discover(roots(hf=hf))] == [
        "hf.co/bartowski/Qwen-GGUF:Q4_K_M",
        "hf.co/bartowski/Qwen-GGUF:Q8_0",
    ]


def test_hf_cache_models_use_snapshot_paths_and_the_blob_etag_as_sha256(hf: Path) -> None:
    model = by_name(discover(roots(hf=hf)))["hf.co/bartowski/Qwen-GGUF:Q4_K_M"]
    link = hf / "models--bartowski--Qwen-GGUF" / "snapshots" / COMMIT / "Qwen-Q4_K_M.gguf"
    blob = link.resolve()
    assert model.files == (ModelFile(path=link, size=blob.stat().st_size, sha256=blob.name),)
    assert (model.source, model.revision) == (f"hf-cache:bartowski/Qwen-GGUF@{COMMIT}", COMMIT)
    assert (model.quantization, model.created) == ("Q4_K_M", int(blob.stat().st_mtime))


def test_an_hf_split_model_lists_its_parts_first_part_first_side_by_side(hf: Path) -> None:
    model = by_name(discover(roots(hf=hf)))["hf.co/bartowski/Qwen-GGUF:Q8_0"]
    folder = hf / "models--bartowski--Qwen-GGUF" / "snapshots" / COMMIT / "Qwen-Q8_0"
    assert [f.path for f in model.files] == [
        folder / "Qwen-Q8_0-00001-of-00002.gguf",
        folder / "Qwen-Q8_0-00002-of-00002.gguf",
    ]
    assert [f.size for f in model.files] == [f.path.stat().st_size for f in model.files]
    assert model.quantization == "Q8_0"


def test_an_hf_snapshot_not_named_by_a_ref_is_not_listed(hf: Path) -> None:
    assert all(m.revision == COMMIT for m in discover(roots(hf=hf)))


def test_an_hf_repo_without_refs_lists_every_snapshot(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--NoRefs"
    hf_file(repo, COMMIT, "NoRefs-Q8_0.gguf", write_gguf(tmp_path / "new"))
    hf_file(repo, OLD_COMMIT, "NoRefs-Q4_K_M.gguf", write_gguf(tmp_path / "old", file_type=Q4_K_M))
    models = discover(roots(hf=tmp_path / "hub"))
    assert sorted((m.name, m.revision) for m in models) == [
        ("hf.co/org/NoRefs:Q4_K_M", OLD_COMMIT),
        ("hf.co/org/NoRefs:Q8_0", COMMIT),
    ]


def test_the_main_ref_snapshot_wins_a_name_over_another_branch(hf: Path) -> None:
    hf_ref(hf / "models--bartowski--Qwen-GGUF", OLD_COMMIT, "a-branch")  # its Qwen-Old-Q4_K_M is also :Q4_K_M
    models = discover(roots(hf=hf))
    assert [(m.name, m.revision) for m in models] == [
        ("hf.co/bartowski/Qwen-GGUF:Q4_K_M", COMMIT),
        ("hf.co/bartowski/Qwen-GGUF:Q8_0", COMMIT),
    ]


def test_an_hf_split_model_missing_a_part_is_skipped(hf: Path) -> None:
    folder = hf / "models--bartowski--Qwen-GGUF" / "snapshots" / COMMIT / "Qwen-Q8_0"
    (folder / "Qwen-Q8_0-00002-of-00002.gguf").unlink()
    assert [m.name for m in discover(roots(hf=hf))] == ["hf.co/bartowski/Qwen-GGUF:Q4_K_M"]


def test_an_hf_snapshot_link_to_a_missing_blob_is_skipped_with_a_warning(
    hf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = hf / "models--bartowski--Qwen-GGUF" / "snapshots" / COMMIT
    (snapshot / "Qwen-Q5_K_M.gguf").symlink_to(f"../../blobs/{'d' * 64}")  # its blob is still .incomplete
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        names = [m.name for m in discover(roots(hf=hf))]
    assert names == ["hf.co/bartowski/Qwen-GGUF:Q4_K_M", "hf.co/bartowski/Qwen-GGUF:Q8_0"]
    assert "Qwen-Q5_K_M" in caplog.text


def test_hf_models_sharing_a_quantization_or_without_one_are_named_by_file_stem(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--Mix"
    hf_ref(repo, COMMIT)
    for rel in ("Mix-Q4_K_M.gguf", "Mix-Instruct-Q4_K_M.gguf", "mix.gguf", "Mix-Q8_0.gguf"):
        hf_file(repo, COMMIT, rel, write_gguf(tmp_path / rel, file_type=None))
    models = by_name(discover(roots(hf=tmp_path / "hub")))
    assert sorted(models) == [
        "hf.co/org/Mix:Mix-Instruct-Q4_K_M",
        "hf.co/org/Mix:Mix-Q4_K_M",
        "hf.co/org/Mix:Q8_0",
        "hf.co/org/Mix:mix",
    ]
    assert models["hf.co/org/Mix:Q8_0"].quantization == "Q8_0"  # the header does not say: the file name does
    assert models["hf.co/org/Mix:mix"].quantization is None


def test_an_hf_file_that_is_not_a_link_has_no_known_sha256(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--org--Plain" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    write_gguf(snapshot / "Plain-Q8_0.gguf")
    assert [f.sha256 for f in discover(roots(hf=tmp_path / "hub"))[0].files] == [None]


# -- LM Studio: <root>/<publisher>/<repo>/[<folder>/]<file>.gguf -------------------------------------------


@pytest.fixture
def lmstudio(tmp_path: Path) -> Path:
    root = tmp_path / ".lmstudio" / "models"
    repo = root / "lmstudio-community" / "Llama-3-8B-GGUF"
    repo.mkdir(parents=True)
    write_gguf(repo / "Llama-3-8B-Q4_K_M.gguf", file_type=Q4_K_M)
    write_gguf(repo / "mmproj-Llama-3-8B-F16.gguf")
    (repo / "big").mkdir()
    write_gguf(repo / "big" / "Llama-3-8B-Q8_0.gguf", file_type=Q8_0)
    return root


def test_lmstudio_models_are_named_after_publisher_repo_and_quantization(lmstudio: Path) -> None:
    models = discover(roots(lmstudio=(lmstudio,)))
    assert [m.name for m in models] == [
        "lmstudio/lmstudio-community/Llama-3-8B-GGUF:Q4_K_M",
        "lmstudio/lmstudio-community/Llama-3-8B-GGUF:Q8_0",
    ]
    main = lmstudio / "lmstudio-community" / "Llama-3-8B-GGUF" / "big" / "Llama-3-8B-Q8_0.gguf"
    assert (models[1].source, models[1].files) == (f"lmstudio:{main}", (ModelFile(main, main.stat().st_size, None),))


def test_an_lmstudio_repo_folder_that_is_a_link_is_scanned(lmstudio: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-drive" / "Phi-GGUF"
    elsewhere.mkdir(parents=True)
    write_gguf(elsewhere / "Phi-Q8_0.gguf")
    (lmstudio / "lmstudio-community" / "Phi-GGUF").symlink_to(elsewhere, target_is_directory=True)
    assert "lmstudio/lmstudio-community/Phi-GGUF:Q8_0" in by_name(discover(roots(lmstudio=(lmstudio,))))


# -- extra folders: any GGUF, recursively ------------------------------------------------------------------


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    root = tmp_path / "my models"
    (root / "nested" / "deeper").mkdir(parents=True)
    write_gguf(root / "nested" / "deeper" / "My Model (v2).Q5_K_M.gguf", file_type=None)
    write_gguf(root / "tiny.gguf")
    (root / "notes.gguf").write_text("not a model")
    write_gguf(root / "imatrix-tiny.gguf")
    return root


def test_extra_folders_list_nested_ggufs_named_by_a_safe_stem(extra: Path) -> None:
    models = discover(roots(extra=(extra,)))
    assert [m.name for m in models] == ["tiny", "My-Model--v2-.Q5_K_M"]
    nested = extra / "nested" / "deeper" / "My Model (v2).Q5_K_M.gguf"
    assert (models[1].source, models[1].path, models[1].quantization) == (f"dir:{nested}", nested, "Q5_K_M")


def test_a_file_named_gguf_that_is_not_gguf_is_skipped_with_a_warning(
    extra: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        names = [m.name for m in discover(roots(extra=(extra,)))]
    assert "notes" not in names and "notes.gguf" in caplog.text


def test_a_truncated_gguf_is_skipped(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "cut.gguf")
    os.truncate(path, path.stat().st_size // 2)
    assert discover(roots(extra=(tmp_path,))) == []


def test_a_directory_symlink_loop_is_not_followed(extra: Path) -> None:
    (extra / "nested" / "loop").symlink_to(extra, target_is_directory=True)
    assert [m.name for m in discover(roots(extra=(extra,)))] == ["tiny", "My-Model--v2-.Q5_K_M"]


# -- all together ------------------------------------------------------------------------------------------


def test_discover_orders_ollama_hf_lmstudio_then_extra(ollama: Path, hf: Path, lmstudio: Path, extra: Path) -> None:
    sources = [
        m.source.split(":")[0] for m in discover(roots(hf=hf, ollama=ollama, lmstudio=(lmstudio,), extra=(extra,)))
    ]
    assert sources == ["ollama"] * 3 + ["hf-cache"] * 2 + ["lmstudio"] * 2 + ["dir"] * 2


def test_a_name_already_taken_by_an_earlier_entry_is_skipped(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        write_gguf(folder / "tiny.gguf")
    models = discover(roots(extra=(first, second)))
    assert [(m.name, m.path) for m in models] == [("tiny", first / "tiny.gguf")]


def test_missing_roots_yield_nothing(tmp_path: Path) -> None:
    assert discover(roots()) == []
    assert (
        discover(roots(hf=tmp_path / "a", ollama=tmp_path / "b", lmstudio=(tmp_path / "c",), extra=(tmp_path / "d",)))
        == []
    )


def test_an_unreadable_folder_is_skipped_with_a_warning(
    extra: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_scandir = os.scandir

    def scandir(path: str) -> Iterator[os.DirEntry[str]]:
        if Path(path) == extra / "nested":
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)  # a chmod 000 folder, even when the tests run as root
    with caplog.at_level(logging.WARNING, logger="localinfer.models.discover"):
        assert [m.name for m in discover(roots(extra=(extra,)))] == ["tiny"]
    assert "cannot read" in caplog.text


# -- default_roots ------------------------------------------------------------------------------------------


def test_default_roots_without_variables_use_the_tools_home_folders() -> None:
    assert default_roots([], {}, HOME) == DiscoveryRoots(
        hf_cache=HOME / ".cache/huggingface/hub",
        ollama=HOME / ".ollama/models",
        lmstudio=(HOME / ".lmstudio/models", HOME / ".cache/lm-studio/models"),
        extra=(),
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"HF_HUB_CACHE": "/c/hub", "HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/c/hub"),
        ({"HUGGINGFACE_HUB_CACHE": "/old/hub", "HF_HOME": "/h"}, "/old/hub"),
        ({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
        ({"HF_HUB_CACHE": "", "HF_HOME": "~/hf"}, "/home/u/hf/hub"),
    ],
)
def test_default_roots_hf_cache_follows_huggingface_hub_variables(environ: dict[str, str], expected: str) -> None:
    assert default_roots([], environ, HOME).hf_cache == Path(expected)


def test_default_roots_ollama_follows_ollama_models() -> None:
    assert default_roots([], {"OLLAMA_MODELS": "/srv/ollama"}, HOME).ollama == Path("/srv/ollama")


def test_default_roots_extra_are_the_model_dirs_with_tilde_expanded() -> None:
    assert default_roots([Path("/m"), Path("~/models")], {}, HOME).extra == (Path("/m"), HOME / "models")
