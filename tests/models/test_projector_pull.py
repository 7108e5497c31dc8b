"""A model's multimodal projector pulled with it: the real huggingface_hub client against a Hub stand-in on 127.0.0.1.

The repository is laid out as ggml-org's vision repositories are (the model in several quantizations, its projector
in several precisions beside it); the projectors are small clip GGUFs that carry only what a pull reads.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import gguf
import pytest
from huggingface_hub import hf_hub_download

from localinfer.config import Settings
from localinfer.errors import PullError
from localinfer.models.hub import HubClient
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import ensure_model, pull
from localinfer.models.store import ModelStore
from localinfer.progress import ProgressEvent
from tests.app.commands.test_pull_cli import hub_env, pull_command
from tests.conftest import write_gguf
from tests.hub_standin import HubStandIn
from tests.projector_gguf import write_projector

VL = "ggml-org/Tiny-VL-GGUF"
NESTED = "someone/Tiny-VL-folders-GGUF"
BAD = "someone/bad-projector-GGUF"
CORRUPT = "someone/corrupt-projector-GGUF"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStandIn]:
    files = tmp_path_factory.mktemp("vl-files")

    def model(name: str, file_type: gguf.LlamaFileType) -> Path:
        return write_gguf(files / name, file_type=file_type, embedding_length=576)

    def projector(name: str, file_type: gguf.LlamaFileType, extra_bytes: int = 0) -> Path:
        return write_projector(files / name, file_type=file_type, name=name, extra_bytes=extra_bytes)

    q4 = model("q4.gguf", gguf.LlamaFileType.MOSTLY_Q4_K_M)
    f16 = model("f16.gguf", gguf.LlamaFileType.MOSTLY_F16)
    p_f32 = projector("p-f32.gguf", gguf.LlamaFileType.ALL_F32)
    p_f16 = projector("p-f16.gguf", gguf.LlamaFileType.MOSTLY_F16)
    p_q4 = projector("p-q4.gguf", gguf.LlamaFileType.MOSTLY_Q4_0, extra_bytes=3_000_000)  # over a 1 MiB chunk
    with HubStandIn() as standin:
        standin.add_repo(
            VL,
            {
                "README.md": b"# Tiny VL\n",
                "mmproj-Tiny-VL-f32.gguf": p_f32,
                "mmproj-Tiny-VL-f16.gguf": p_f16,
                "mmproj-Tiny-VL-Q4_0.gguf": p_q4,
                "Tiny-VL-Q4_K_M.gguf": q4,
                "Tiny-VL-F16.gguf": f16,
            },
        )
        standin.add_repo(
            NESTED,
            {
                "mmproj-f16.gguf": p_f16,  # above the model's folder: it counts, but a deeper one wins
                "Q4_K_M/mmproj-f32.gguf": p_f32,
                "Q4_K_M/Tiny-VL-Q4_K_M.gguf": q4,
                "other/mmproj-Q4_0.gguf": p_q4,  # in another folder: never the model's
            },
        )
        standin.add_repo(BAD, {"Tiny-Q4_K_M.gguf": q4, "mmproj-Tiny-f16.gguf": f16})
        standin.add_repo(CORRUPT, {"Tiny-Q4_K_M.gguf": q4, "mmproj-Tiny-f16.gguf": p_f16})
        standin.corrupt(CORRUPT, "mmproj-Tiny-f16.gguf", offset=200)
        yield standin


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


@pytest.fixture
def client(hub: HubStandIn, cache: Path) -> HubClient:
    return HubClient(endpoint=hub.url, cache_dir=cache, offline=False)


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "home" / "models")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings().with_overrides(home=tmp_path / "home")


class Events(list[ProgressEvent]):
    def __call__(self, event: ProgressEvent) -> None:
        self.append(event)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cdn_paths(hub: HubStandIn, since: int) -> list[str]:
    return [r.path for r in hub.requests[since:] if r.path.startswith("/cdn/")]


def test_the_projector_closest_to_the_models_precision_comes_with_it_and_is_registered(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    events = Events()
    q4 = pull(store, VL, settings, hub=client, progress=events)
    assert q4.path.name == "Tiny-VL-Q4_K_M.gguf"
    assert q4.projector is not None and q4.projector.path.name == "mmproj-Tiny-VL-Q4_0.gguf"
    assert q4.projector.path.is_relative_to(cache / "models--ggml-org--Tiny-VL-GGUF" / "snapshots")
    assert q4.projector.sha256 == sha256(q4.projector.path) and q4.projector.owned
    assert store.get(VL) == q4  # the manifest file keeps the pair
    assert any("mmproj-Tiny-VL-Q4_0.gguf" in e.status and "projector" in e.status for e in events)
    f16 = pull(store, f"{VL}:F16", settings, hub=client)
    assert f16.projector is not None and f16.projector.path.name == "mmproj-Tiny-VL-f16.gguf"


def test_the_projector_is_where_huggingface_hub_and_llama_server_find_it_offline(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    manifest = pull(store, VL, settings, hub=client)
    assert manifest.projector is not None
    found = hf_hub_download(VL, "mmproj-Tiny-VL-Q4_0.gguf", cache_dir=cache, endpoint=hub.url, local_files_only=True)
    assert Path(found) == manifest.projector.path


def test_a_projector_in_the_models_own_folder_wins_over_one_above_and_one_elsewhere_is_never_taken(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    manifest = pull(store, NESTED, settings, hub=client)
    assert manifest.projector is not None
    assert manifest.projector.path.as_posix().endswith("Q4_K_M/mmproj-f32.gguf")


def test_no_mmproj_leaves_the_projector_on_the_hub(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    before = len(hub.requests)
    manifest = pull(store, VL, settings, hub=client, mmproj=False)
    assert manifest.projector is None and store.get(VL) == manifest
    assert len(cdn_paths(hub, before)) == 1  # the model's bytes only
    assert not any(p.name.startswith("mmproj") for p in (cache / "models--ggml-org--Tiny-VL-GGUF").rglob("*"))


def test_a_dropped_connection_in_the_projector_is_resumed_with_a_range_request_and_verified(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings
) -> None:
    hub.drop_connection_once(VL, "mmproj-Tiny-VL-Q4_0.gguf", after_bytes=2_500_000)
    before = len(hub.requests)
    manifest = pull(store, VL, settings, hub=client)
    ranges = [r.headers.get("range") for r in hub.requests[before:] if r.path.startswith("/cdn/")]
    assert ranges[-2] is None and ranges[-1] is not None
    assert 0 < int(ranges[-1].removeprefix("bytes=").rstrip("-")) <= 2_500_000
    assert manifest.projector is not None and sha256(manifest.projector.path) == manifest.projector.sha256


def test_a_corrupted_projector_fails_its_checksum_is_deleted_and_nothing_is_registered(
    client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    with pytest.raises(PullError, match=r"mmproj-Tiny-f16\.gguf .*failed its checksum"):
        pull(store, CORRUPT, settings, hub=client)
    assert store.list() == []
    repo = cache / "models--someone--corrupt-projector-GGUF"
    (model,) = repo.glob("snapshots/*/Tiny-Q4_K_M.gguf")  # verified, kept for the next try
    assert [p.name for p in (repo / "blobs").iterdir()] == [model.resolve().name]
    assert not list(repo.glob("snapshots/*/mmproj*"))


def test_a_projector_that_is_no_projector_is_one_clear_error_and_nothing_is_left(
    client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    with pytest.raises(PullError, match=r"mmproj-Tiny-f16\.gguf .*not a usable multimodal projector") as excinfo:
        pull(store, BAD, settings, hub=client)
    assert "--no-mmproj" in (excinfo.value.hint or "")
    assert store.list() == []
    assert list((cache / "models--someone--bad-projector-GGUF" / "blobs").iterdir()) == []
    assert pull(store, BAD, settings, hub=client, mmproj=False).projector is None


def test_rm_deletes_the_owned_projector_with_its_model_once_no_other_name_uses_it(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    a = pull(store, VL, settings, hub=client)
    b = pull(store, f"{VL}:Q4_K_M", settings, hub=client)
    assert a.projector is not None and a.projector == b.projector
    store.remove(a.name)
    assert b.projector is not None and b.projector.path.exists()
    store.remove(b.name)
    assert not b.projector.path.exists() and not b.path.exists()


def test_the_pull_command_says_it_took_the_projector_and_no_mmproj_leaves_it(hub: HubStandIn, tmp_path: Path) -> None:
    env = hub_env(hub.url, tmp_path)
    with_it = subprocess.run(pull_command(VL), env=env, capture_output=True, text=True, timeout=120)
    assert with_it.returncode == 0, with_it.stderr
    pulled, projector = with_it.stdout.splitlines()
    assert pulled.startswith(f"pulled {VL} ") and projector.strip().startswith("with its projector")
    assert projector.endswith("mmproj-Tiny-VL-Q4_0.gguf")
    without = subprocess.run(
        pull_command(f"{VL}:F16", "--no-mmproj"), env=env, capture_output=True, text=True, timeout=120
    )
    assert without.returncode == 0, without.stderr
    assert len(without.stdout.splitlines()) == 1
    registered = ModelStore(tmp_path / "home" / "models").get(f"{VL}:F16")
    assert registered is not None and registered.projector is None


def test_rm_counts_the_projectors_bytes_among_those_freed(client: HubClient, tmp_path: Path) -> None:
    settings = Settings().with_overrides(home=tmp_path / "home", discover=False)
    library = ModelLibrary.from_settings(settings)
    manifest = pull(library.store, VL, settings, hub=client)
    assert manifest.projector is not None
    assert library.remove(VL) == manifest.size + manifest.projector.size


def test_a_model_whose_projector_went_missing_is_pulled_again_with_it(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    manifest = pull(store, VL, settings, hub=client)
    assert manifest.projector is not None
    manifest.projector.path.unlink()
    assert not manifest.files_present()
    again = ensure_model(ModelLibrary(store, None), VL, settings, hub=client)
    assert again.projector is not None and again.projector.path.is_file()
