"""Pulling from the Hugging Face Hub: the real huggingface_hub client against a Hub stand-in on 127.0.0.1.

Repositories are laid out like real ones (bartowski-style, lower-case TheBloke-style, a split model, a
projector beside the model) and serve real GGUF bytes: the SmolLM2 file, and tiny GGUF files where only the
choice of file matters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import gguf
import openai
import pytest
from huggingface_hub import hf_hub_download

from localinfer.config import Settings
from localinfer.errors import DiskFull, HubUnreachable, ModelNotFound, PullError
from localinfer.models.hub import HubClient
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import ensure_model, pull
from localinfer.models.store import Manifest, ModelStore
from localinfer.progress import ProgressEvent
from tests.app.server.conftest import serving
from tests.capital_answer import CAPITAL_GRAMMAR
from tests.conftest import write_gguf
from tests.gguf_split import split_gguf
from tests.hf_folder import write_hf_folder
from tests.hub_standin import HubStandIn
from tests.projector_gguf import write_projector

BARTOWSKI = "bartowski/SmolLM2-135M-Instruct-GGUF"
THEBLOKE = "TheBloke/smollm2-135m-instruct-GGUF"
VISION = "ggml-org/SmolVLM-256M-Instruct-GGUF"
GATED = "meta-llama/Llama-Gated-GGUF"
BROKEN = "someone/broken-GGUF"
NO_GGUF = "someone/pytorch-only"
SAFETENSORS = "Qwen/Tiny-Qwen2-Instruct"
BIG = "someone/huge-GGUF"
CORRUPT = "someone/corrupt-GGUF"
SPLIT = "ggml-org/SmolLM2-135M-Instruct-split-GGUF"
SPLIT_STEM = "SmolLM2-135M-Instruct-Q4_1"


def tiny(folder: Path, name: str, file_type: gguf.LlamaFileType, tensor_elements: int = 4096) -> Path:
    return write_gguf(folder / name, name=name, file_type=file_type, tensor_elements=tensor_elements)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, smollm2: Manifest) -> Iterator[HubStandIn]:
    files = tmp_path_factory.mktemp("hub-files")
    q8 = tiny(files, "q8.gguf", gguf.LlamaFileType.MOSTLY_Q8_0)
    iq4 = tiny(files, "iq4.gguf", gguf.LlamaFileType.MOSTLY_IQ4_XS)
    q2 = tiny(files, "q2.gguf", gguf.LlamaFileType.MOSTLY_Q2_K)
    projector = write_projector(files / "mmproj.gguf", file_type=gguf.LlamaFileType.MOSTLY_Q8_0)
    broken = tiny(files, "broken.gguf", gguf.LlamaFileType.MOSTLY_Q4_K_M, tensor_elements=65536)
    truncated = broken.read_bytes()[: broken.stat().st_size // 2]
    with HubStandIn() as standin:
        standin.add_repo(
            BARTOWSKI,
            {
                "README.md": b"# SmolLM2 135M Instruct GGUF\n",
                "SmolLM2-135M-Instruct-IQ4_XS.gguf": iq4,
                "SmolLM2-135M-Instruct-Q4_K_M.gguf": smollm2.path,
                "SmolLM2-135M-Instruct-Q8_0.gguf": q8,
            },
        )
        standin.add_repo(
            THEBLOKE,
            {"smollm2-135m-instruct.Q2_K.gguf": q2, "smollm2-135m-instruct.Q8_0.gguf": q8, "config.json": b"{}"},
        )
        standin.add_repo(VISION, {"mmproj-SmolVLM-256M-Instruct-Q8_0.gguf": projector, "SmolVLM-256M-Q8_0.gguf": q8})
        standin.add_repo(GATED, {"Llama-Gated-Q8_0.gguf": q8}, gated=True)
        standin.add_repo(BROKEN, {"broken-Q4_K_M.gguf": truncated})
        standin.add_repo(NO_GGUF, {"pytorch_model.bin": b"\0" * 2048, "config.json": b"{}"})
        folder = write_hf_folder(files / "tiny-qwen2")
        extras: dict[str, Path | bytes] = {"README.md": b"# Tiny\n", "pytorch_model.bin": b"\0" * 4096}
        standin.add_repo(SAFETENSORS, {p.name: p for p in folder.iterdir()} | extras | {"original/x.pth": b"\0"})
        standin.add_repo(BIG, {"huge-Q4_K_M.gguf": q8})
        standin.add_repo(CORRUPT, {"corrupt-Q2_K.gguf": q2})
        parts = split_gguf(smollm2.path, files / "split", SPLIT_STEM, 2)
        standin.add_repo(SPLIT, {f"Q4_1/{p.name}": p for p in parts} | {"mmproj-SmolLM2-f16.gguf": projector})
        standin.corrupt(CORRUPT, "corrupt-Q2_K.gguf", offset=100)
        standin.publish_size(BIG, "huge-Q4_K_M.gguf", 50 * 10**12)
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

    def statuses(self) -> list[str]:
        return [e.status for e in self]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_a_tag_the_q4_k_m_file_is_pulled_into_the_hf_cache_and_the_choice_explained(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path, smollm2: Manifest
) -> None:
    events = Events()
    manifest = pull(store, BARTOWSKI, settings, hub=client, progress=events)
    assert manifest.name == BARTOWSKI
    assert manifest.path.name == "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    assert manifest.path.is_relative_to(cache / "models--bartowski--SmolLM2-135M-Instruct-GGUF" / "snapshots")
    assert manifest.files[0].sha256 == sha256(smollm2.path) == sha256(manifest.path)
    assert manifest.quantization == "Q4_1" and manifest.files[0].owned
    assert any("using SmolLM2-135M-Instruct-Q4_K_M.gguf" in s and "Q4_K_M" in s for s in events.statuses())
    assert store.get(BARTOWSKI) == manifest


def test_a_repository_without_gguf_is_pulled_as_its_safetensors_model_into_one_snapshot_folder(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    events = Events()
    manifest = pull(store, SAFETENSORS, settings, hub=client, progress=events)
    assert (manifest.name, manifest.format, manifest.source) == (SAFETENSORS, "hf", f"hf:{SAFETENSORS}")
    folder = manifest.path.parent
    assert manifest.path.name == "config.json"
    assert folder.parent == cache / "models--Qwen--Tiny-Qwen2-Instruct" / "snapshots"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer_config.json"]
    assert hub.bytes_served(SAFETENSORS, "pytorch_model.bin") == 0  # what vLLM does not read stays on the Hub
    assert all(f.owned for f in manifest.files)
    weights = next(f for f in manifest.files if f.path.name == "model.safetensors")
    assert weights.sha256 == sha256(weights.path)  # LFS files are verified against the Hub's sha256
    assert manifest.quantization == "bfloat16"
    assert any("using the safetensors model" in s for s in events.statuses())
    assert ModelLibrary(store, None).resolve(SAFETENSORS) == manifest


def test_without_a_tag_the_best_quantization_that_fits_the_machine_is_pulled(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, smollm2: Manifest
) -> None:
    """``fits`` stands for this machine's memory: here the Q8_0 file is too big, so Q4_K_M, the next best, is pulled."""
    q8_size = client.list_repo(BARTOWSKI).get("SmolLM2-135M-Instruct-Q8_0.gguf").size  # type: ignore[union-attr]
    asked: list[int] = []

    def fits(size: int) -> bool:
        asked.append(size)
        return size != q8_size

    events = Events()
    manifest = pull(store, BARTOWSKI, settings, hub=client, progress=events, fits=fits)
    assert manifest.path.name == "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    assert asked[:2] == [q8_size, smollm2.path.stat().st_size]  # best first: Q8_0, then Q4_K_M
    assert any("Q4_K_M is the largest quantization that fits this machine's memory" in s for s in events.statuses())


def test_a_pulled_file_is_where_huggingface_hub_finds_it_offline(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    manifest = pull(store, f"{BARTOWSKI}:Q8_0", settings, hub=client)
    found = hf_hub_download(BARTOWSKI, "SmolLM2-135M-Instruct-Q8_0.gguf", cache_dir=cache, local_files_only=True)
    assert Path(found) == manifest.path


def test_a_tag_picks_its_file_case_insensitively(client: HubClient, store: ModelStore, settings: Settings) -> None:
    manifest = pull(store, f"hf.co/{BARTOWSKI}:iq4_xs", settings, hub=client)
    assert manifest.path.name == "SmolLM2-135M-Instruct-IQ4_XS.gguf"
    assert manifest.name == f"{BARTOWSKI}:iq4_xs"


def test_lower_case_thebloke_names_fall_back_to_q8_0_and_honour_a_tag(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    assert pull(store, THEBLOKE, settings, hub=client).path.name == "smollm2-135m-instruct.Q8_0.gguf"
    assert pull(store, f"{THEBLOKE}:Q2_K", settings, hub=client).path.name == "smollm2-135m-instruct.Q2_K.gguf"


def test_a_projector_beside_the_model_is_never_chosen(client: HubClient, store: ModelStore, settings: Settings) -> None:
    manifest = pull(store, f"{VISION}:Q8_0", settings, hub=client)
    assert manifest.path.name == "SmolVLM-256M-Q8_0.gguf"
    assert len(manifest.files) == 1
    assert manifest.projector is not None  # it comes as the model's projector (tests/models/test_projector_pull.py)
    assert manifest.projector.path.name == "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf"


def test_a_file_reference_pulls_exactly_that_file(client: HubClient, store: ModelStore, settings: Settings) -> None:
    manifest = pull(store, f"{BARTOWSKI}/SmolLM2-135M-Instruct-Q8_0.gguf", settings, hub=client)
    assert manifest.path.name == "SmolLM2-135M-Instruct-Q8_0.gguf"
    assert manifest.name == f"{BARTOWSKI}/SmolLM2-135M-Instruct-Q8_0"


def test_pulling_a_model_already_here_sends_only_metadata_requests(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings
) -> None:
    first = pull(store, BARTOWSKI, settings, hub=client)
    before = len(hub.requests)
    again = pull(store, BARTOWSKI, settings, hub=client)
    later = hub.requests[before:]
    assert [r.path for r in later] == [
        f"/api/models/{BARTOWSKI}/revision/main",
        f"/api/models/{BARTOWSKI}/tree/{first.revision}",
    ]
    assert again.files == first.files


def test_a_dropped_connection_is_resumed_with_a_range_request_and_verified(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, smollm2: Manifest
) -> None:
    hub.drop_connection_once(BARTOWSKI, "SmolLM2-135M-Instruct-Q4_K_M.gguf", after_bytes=5_000_000)
    before = len(hub.requests)
    manifest = pull(store, BARTOWSKI, settings, hub=client)
    ranges = [r.headers.get("range") for r in hub.requests[before:] if r.path.startswith("/cdn/")]
    assert ranges[0] is None and ranges[1] is not None
    resumed_from = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_from <= 5_000_000
    assert sha256(manifest.path) == sha256(smollm2.path)


def test_a_corrupted_byte_fails_the_checksum_and_leaves_nothing_behind(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    with pytest.raises(PullError, match="failed its checksum") as excinfo:
        pull(store, CORRUPT, settings, hub=client)
    assert "deleted" in excinfo.value.message and excinfo.value.hint
    assert store.list() == []
    blobs = cache / "models--someone--corrupt-GGUF" / "blobs"
    assert list(blobs.iterdir()) == []


def test_a_gated_repository_needs_a_token(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    with pytest.raises(PullError, match=f"^{GATED} is a gated repository") as excinfo:
        pull(store, GATED, settings, hub=client)
    assert "HF_TOKEN" in excinfo.value.hint
    assert store.list() == []
    assert hub.bytes_served(GATED, "Llama-Gated-Q8_0.gguf") == 0
    with_token = HubClient(endpoint=hub.url, cache_dir=cache, token=hub.valid_token, offline=False)
    assert pull(store, GATED, settings, hub=with_token).path.name == "Llama-Gated-Q8_0.gguf"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nobody/no-such-repo-GGUF", "there is no repository nobody/no-such-repo-GGUF"),
        (f"{BARTOWSKI}:Q6_K", f"{BARTOWSKI} has no Q6_K file"),
        (f"{BARTOWSKI}/missing-Q4_K_M.gguf", f"{BARTOWSKI} has no file missing-Q4_K_M.gguf"),
        (NO_GGUF, f"{NO_GGUF} has no GGUF model file"),
        (f"{SAFETENSORS}:Q4_K_M", f"{SAFETENSORS} has no GGUF model file"),
    ],
)
def test_what_cannot_be_pulled_is_one_clear_error_and_the_store_is_unchanged(
    client: HubClient, store: ModelStore, settings: Settings, ref: str, message: str
) -> None:
    with pytest.raises(PullError) as excinfo:
        pull(store, ref, settings, hub=client)
    assert excinfo.value.message.startswith(message)
    assert excinfo.value.hint
    assert store.list() == []


def test_a_missing_quantization_names_the_ones_offered(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    with pytest.raises(PullError) as excinfo:
        pull(store, f"{BARTOWSKI}:Q6_K", settings, hub=client)
    assert "IQ4_XS, Q4_K_M, Q8_0" in excinfo.value.hint


def test_a_download_larger_than_the_free_disk_is_refused_before_any_byte(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings
) -> None:
    with pytest.raises(DiskFull, match="not enough disk space") as excinfo:
        pull(store, BIG, settings, hub=client)
    assert "HF_HUB_CACHE" in excinfo.value.hint
    assert hub.bytes_served(BIG, "huge-Q4_K_M.gguf") == 0
    assert store.list() == []


def test_a_file_that_is_not_a_valid_gguf_is_not_registered_and_is_deleted(
    client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    with pytest.raises(PullError, match="not a usable GGUF model") as excinfo:
        pull(store, BROKEN, settings, hub=client)
    assert "truncated" in excinfo.value.message
    assert store.list() == []
    assert list((cache / "models--someone--broken-GGUF" / "blobs").iterdir()) == []


def test_offline_mode_uses_the_cache_without_a_request(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    online = pull(store, f"{THEBLOKE}:Q8_0", settings, hub=client)
    offline = HubClient(endpoint=hub.url, cache_dir=cache, offline=True)
    before = len(hub.requests)
    again = pull(store, f"{THEBLOKE}:Q8_0", settings, hub=offline, name="offline-copy")
    assert len(hub.requests) == before
    assert again.path == online.path
    assert (again.revision, again.files[0].sha256) == (online.revision, online.files[0].sha256)


def test_offline_mode_without_the_model_in_the_cache_says_so(
    hub: HubStandIn, store: ModelStore, settings: Settings, cache: Path
) -> None:
    offline = HubClient(endpoint=hub.url, cache_dir=cache, offline=True)
    with pytest.raises(HubUnreachable, match="HF_HUB_OFFLINE"):
        pull(store, BARTOWSKI, settings, hub=offline)


def test_rm_deletes_a_downloaded_file_but_keeps_one_another_tool_downloaded(
    hub: HubStandIn, client: HubClient, store: ModelStore, settings: Settings, cache: Path
) -> None:
    ours = pull(store, f"{THEBLOKE}:Q2_K", settings, hub=client)
    theirs_path = Path(
        hf_hub_download(BARTOWSKI, "SmolLM2-135M-Instruct-IQ4_XS.gguf", cache_dir=cache, endpoint=hub.url)
    )
    theirs = pull(store, f"{BARTOWSKI}:IQ4_XS", settings, hub=client)
    assert theirs.path == theirs_path and not theirs.files[0].owned
    store.remove(ours.name)
    store.remove(theirs.name)
    assert not ours.path.exists() and not ours.path.resolve().exists()
    assert theirs_path.exists()


def test_two_names_for_one_file_share_it_until_the_last_is_removed(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    a = pull(store, f"{THEBLOKE}:Q2_K", settings, hub=client)
    b = pull(store, f"{THEBLOKE}:q2_k", settings, hub=client)
    assert a.path == b.path
    store.remove(a.name)
    assert b.path.exists()
    store.remove(b.name)
    assert not b.path.exists()


def test_a_split_model_is_pulled_whole_and_answers(
    client: HubClient, store: ModelStore, settings: Settings, tmp_path: Path
) -> None:
    # its projector (a header without weights here) stays on the Hub: this model is served
    manifest = pull(store, SPLIT, settings, hub=client, mmproj=False)
    assert manifest.projector is None
    assert [f.path.name for f in manifest.files] == [
        f"{SPLIT_STEM}-00001-of-00002.gguf",
        f"{SPLIT_STEM}-00002-of-00002.gguf",
    ]
    assert manifest.files[0].path.parent == manifest.files[1].path.parent
    with serving(SPLIT, settings.home, tmp_path, "--ctx-size", "512") as server:
        chat = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        reply = chat.completions.create(
            model=SPLIT,
            prompt="The capital of France is",
            max_tokens=6,
            temperature=0,
            extra_body={"grammar": CAPITAL_GRAMMAR},  # a choice of capitals: free greedy text differs between CPUs
        )
    assert reply.choices[0].text == " Paris"


def test_a_cache_folder_that_cannot_be_written_is_one_clear_error(
    hub: HubStandIn, store: ModelStore, settings: Settings, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache should be")
    client = HubClient(endpoint=hub.url, cache_dir=blocked / "hub", offline=False)
    with pytest.raises(PullError, match="cannot write to the Hugging Face cache") as excinfo:
        pull(store, f"{THEBLOKE}:Q8_0", settings, hub=client)
    assert "HF_HUB_CACHE" in excinfo.value.hint
    assert store.list() == []


def test_ensure_model_pulls_a_hub_reference_that_is_not_here_yet(
    client: HubClient, store: ModelStore, settings: Settings
) -> None:
    library = ModelLibrary(store, None)
    manifest = ensure_model(library, f"{THEBLOKE}:Q8_0", settings, hub=client)
    assert manifest.name == f"{THEBLOKE}:Q8_0" and store.get(manifest.name) == manifest
    with pytest.raises(ModelNotFound):
        ensure_model(library, "no-such-model", settings, hub=client)
