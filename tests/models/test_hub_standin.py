"""HubStandIn answers the real huggingface_hub client as the Hub does: info, trees, downloads, ranges, errors."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from tests.hub_standin import HubStandIn

REPO = "org/tiny"
MODEL = "sub/model.gguf"
CONFIG = "config.json"
CONFIG_BYTES = b'{"architectures": ["LlamaForCausalLM"]}\n'


@pytest.fixture
def model_bytes() -> bytes:
    """5000 random bytes: the 'model' (a .gguf, so served as an LFS file)."""
    return os.urandom(5000)


@pytest.fixture
def model_file(tmp_path: Path, model_bytes: bytes) -> Path:
    path = tmp_path / "source" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(model_bytes)
    return path


@pytest.fixture
def hub(model_file: Path) -> Iterator[HubStandIn]:
    """A started stand-in serving ``org/tiny``: ``sub/model.gguf`` from disk and a small ``config.json``."""
    with HubStandIn() as standin:
        standin.add_repo(REPO, {MODEL: model_file, CONFIG: CONFIG_BYTES})
        yield standin


def cdn(hub: HubStandIn, data: bytes) -> str:
    return f"{hub.cdn_url}/cdn/{hashlib.sha256(data).hexdigest()}"


def download(hub: HubStandIn, cache: Path, filename: str, *, repo: str = REPO, token: str | bool = False) -> bytes:
    return Path(hf_hub_download(repo, filename, endpoint=hub.url, cache_dir=cache, token=token)).read_bytes()


# -- info and trees -------------------------------------------------------------------------------------------------


def test_model_info_reports_the_commit_sha_add_repo_returned(model_file: Path) -> None:
    with HubStandIn() as hub:
        sha = hub.add_repo(REPO, {MODEL: model_file})
        assert HfApi(endpoint=hub.url).model_info(REPO, token=False).sha == sha


def test_commit_sha_is_40_hex_and_the_same_for_the_same_content(model_file: Path) -> None:
    first, second = HubStandIn(), HubStandIn()
    shas = {first.add_repo(REPO, {MODEL: model_file}), second.add_repo(REPO, {MODEL: model_file.read_bytes()})}
    assert len(shas) == 1 and re.fullmatch("[0-9a-f]{40}", shas.pop())


def test_model_info_lists_every_file_as_a_sibling(hub: HubStandIn) -> None:
    siblings = HfApi(endpoint=hub.url).model_info(REPO, token=False).siblings or []
    assert [s.rfilename for s in siblings] == [CONFIG, MODEL]


def test_model_info_at_the_commit_sha_is_answered(hub: HubStandIn) -> None:
    api = HfApi(endpoint=hub.url)
    sha = api.model_info(REPO, token=False).sha
    assert sha is not None and api.model_info(REPO, revision=sha, token=False).sha == sha


def test_unknown_revision_raises_revision_not_found(hub: HubStandIn) -> None:
    with pytest.raises(RevisionNotFoundError):
        HfApi(endpoint=hub.url).model_info(REPO, revision="v2", token=False)


def test_recursive_tree_gives_lfs_files_their_sha256_and_size(hub: HubStandIn, model_bytes: bytes) -> None:
    tree = HfApi(endpoint=hub.url).list_repo_tree(REPO, recursive=True, token=False)
    files = {entry.path: entry for entry in tree if isinstance(entry, RepoFile)}
    lfs = files[MODEL].lfs
    assert lfs is not None and (lfs.sha256, lfs.size) == (hashlib.sha256(model_bytes).hexdigest(), len(model_bytes))


def test_small_files_are_not_lfs_in_the_tree(hub: HubStandIn) -> None:
    tree = HfApi(endpoint=hub.url).list_repo_tree(REPO, recursive=True, token=False)
    config = next(entry for entry in tree if entry.path == CONFIG)
    assert isinstance(config, RepoFile) and (config.lfs, config.size) == (None, len(CONFIG_BYTES))


def test_tree_without_recursive_lists_direct_children_only(hub: HubStandIn) -> None:
    tree = HfApi(endpoint=hub.url).list_repo_tree(REPO, token=False)
    assert sorted((type(entry).__name__, entry.path) for entry in tree) == [
        ("RepoFile", CONFIG),
        ("RepoFolder", "sub"),
    ]


def test_tree_of_a_folder_lists_that_folder(hub: HubStandIn) -> None:
    tree = list(HfApi(endpoint=hub.url).list_repo_tree(REPO, "sub", token=False))
    assert [entry.path for entry in tree] == [MODEL] and not any(isinstance(e, RepoFolder) for e in tree)


# -- downloads ------------------------------------------------------------------------------------------------------


def test_hf_hub_download_of_an_lfs_file_gives_the_source_bytes(
    hub: HubStandIn, tmp_path: Path, model_bytes: bytes
) -> None:
    assert download(hub, tmp_path / "cache", MODEL) == model_bytes


def test_lfs_download_resolves_then_fetches_from_the_cdn_without_authorization(hub: HubStandIn, tmp_path: Path) -> None:
    download(hub, tmp_path / "cache", MODEL, token=hub.valid_token)
    calls = [(r.method, r.path.split("/")[1], "authorization" in r.headers) for r in hub.requests]
    assert calls == [("HEAD", "org", True), ("GET", "cdn", False)]


def test_hf_hub_download_of_a_small_file_gets_its_bytes_from_resolve(hub: HubStandIn, tmp_path: Path) -> None:
    served = download(hub, tmp_path / "cache", CONFIG)
    resolve = f"/{REPO}/resolve/main/{CONFIG}"
    assert (served, [(r.method, r.path) for r in hub.requests]) == (CONFIG_BYTES, [("HEAD", resolve), ("GET", resolve)])


def test_snapshot_download_fetches_every_file(hub: HubStandIn, tmp_path: Path, model_bytes: bytes) -> None:
    folder = Path(snapshot_download(REPO, endpoint=hub.url, cache_dir=tmp_path / "cache", token=False))
    assert ((folder / MODEL).read_bytes(), (folder / CONFIG).read_bytes()) == (model_bytes, CONFIG_BYTES)


# -- ranges ---------------------------------------------------------------------------------------------------------


def test_closed_range_is_answered_206_with_those_bytes(hub: HubStandIn, model_bytes: bytes) -> None:
    response = httpx.get(cdn(hub, model_bytes), headers={"Range": "bytes=100-199"})
    assert (response.status_code, response.headers["content-range"], response.content) == (
        206,
        f"bytes 100-199/{len(model_bytes)}",
        model_bytes[100:200],
    )


def test_open_range_is_answered_206_up_to_the_end(hub: HubStandIn, model_bytes: bytes) -> None:
    response = httpx.get(cdn(hub, model_bytes), headers={"Range": "bytes=4000-"})
    assert (response.status_code, response.content) == (206, model_bytes[4000:])


def test_range_from_the_size_on_is_answered_416(hub: HubStandIn, model_bytes: bytes) -> None:
    response = httpx.get(cdn(hub, model_bytes), headers={"Range": f"bytes={len(model_bytes)}-"})
    assert (response.status_code, response.headers["content-range"]) == (416, f"bytes */{len(model_bytes)}")


# -- faults ---------------------------------------------------------------------------------------------------------


def test_dropped_connection_gives_a_short_read(hub: HubStandIn, model_bytes: bytes) -> None:
    hub.drop_connection_once(REPO, MODEL, after_bytes=1000)
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream("GET", cdn(hub, model_bytes)) as response:
        assert response.headers["content-length"] == str(len(model_bytes))
        for chunk in response.iter_bytes():
            received += chunk
    assert bytes(received) == model_bytes[:1000]


def test_connection_is_dropped_only_once(hub: HubStandIn, model_bytes: bytes) -> None:
    hub.drop_connection_once(REPO, MODEL, after_bytes=10)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(cdn(hub, model_bytes))
    assert httpx.get(cdn(hub, model_bytes)).content == model_bytes


def test_hf_hub_download_restarts_a_transfer_dropped_within_its_first_10_mib(
    hub: HubStandIn, tmp_path: Path, model_bytes: bytes
) -> None:
    # The client writes what it received in 10 MiB chunks: a partial chunk is lost and the retry starts over.
    hub.drop_connection_once(REPO, MODEL, after_bytes=1000)
    served = download(hub, tmp_path / "cache", MODEL)
    ranges = [r.headers.get("range") for r in hub.requests if r.path.startswith("/cdn/")]
    assert (served == model_bytes, ranges) == (True, [None, None])


def test_hf_hub_download_resumes_a_large_dropped_transfer_with_a_range_request(tmp_path: Path) -> None:
    mib = 1024 * 1024
    data = os.urandom(10 * mib + 1000)
    with HubStandIn() as hub:
        hub.add_repo(REPO, {MODEL: data})
        hub.drop_connection_once(REPO, MODEL, after_bytes=10 * mib + 500)
        served = download(hub, tmp_path / "cache", MODEL)
        ranges = [r.headers.get("range") for r in hub.requests if r.path.startswith("/cdn/")]
    assert (served == data, ranges) == (True, [None, f"bytes={10 * mib}-"])


def test_corrupt_flips_exactly_the_byte_at_offset(hub: HubStandIn, tmp_path: Path, model_bytes: bytes) -> None:
    hub.corrupt(REPO, MODEL, offset=1234)
    served = download(hub, tmp_path / "cache", MODEL)
    assert [i for i, (a, b) in enumerate(zip(served, model_bytes, strict=True)) if a != b] == [1234]


def test_corrupt_file_still_publishes_the_true_sha256(hub: HubStandIn, model_bytes: bytes) -> None:
    hub.corrupt(REPO, MODEL, offset=0)
    tree = HfApi(endpoint=hub.url).list_repo_tree(REPO, "sub", token=False)
    lfs = next(entry for entry in tree if isinstance(entry, RepoFile)).lfs
    assert lfs is not None and lfs.sha256 == hashlib.sha256(model_bytes).hexdigest()


def test_published_size_is_what_the_tree_and_file_metadata_report(hub: HubStandIn) -> None:
    hub.publish_size(REPO, MODEL, 10 * 10**12)
    tree = HfApi(endpoint=hub.url).list_repo_tree(REPO, "sub", token=False)
    metadata = get_hf_file_metadata(hf_hub_url(REPO, MODEL, endpoint=hub.url), token=False)
    assert [entry.size for entry in tree if isinstance(entry, RepoFile)] == [metadata.size] == [10 * 10**12]


def test_rate_limit_slows_file_bodies(hub: HubStandIn, model_bytes: bytes) -> None:
    hub.rate_limit = 10_000
    began = time.monotonic()
    assert httpx.get(cdn(hub, model_bytes)).content == model_bytes
    assert time.monotonic() - began >= 0.4  # 5000 bytes at 10 kB/s


def test_stop_returns_promptly_during_a_rate_limited_transfer(model_file: Path, model_bytes: bytes) -> None:
    hub = HubStandIn().start()
    hub.add_repo(REPO, {MODEL: model_file})
    hub.rate_limit = 500  # ten seconds for the whole file
    first_bytes, outcome = threading.Event(), []

    def fetch() -> None:
        try:
            with httpx.stream("GET", cdn(hub, model_bytes)) as response:
                for _ in response.iter_bytes():
                    first_bytes.set()
            outcome.append("complete")
        except httpx.HTTPError as error:
            outcome.append(type(error).__name__)

    client = threading.Thread(target=fetch)
    client.start()
    assert first_bytes.wait(5)
    began = time.monotonic()
    hub.stop()
    client.join(5)
    assert (time.monotonic() - began < 2, outcome) == (True, ["RemoteProtocolError"])


def test_bytes_served_counts_body_bytes_of_every_request(hub: HubStandIn, model_bytes: bytes) -> None:
    httpx.get(cdn(hub, model_bytes), headers={"Range": "bytes=0-99"})
    httpx.get(cdn(hub, model_bytes))
    httpx.head(cdn(hub, model_bytes))
    assert hub.bytes_served(REPO, MODEL) == 100 + len(model_bytes)


# -- errors and gating ----------------------------------------------------------------------------------------------


def test_gated_repo_download_without_token_raises_gated_repo_error(model_file: Path, tmp_path: Path) -> None:
    with HubStandIn() as hub:
        hub.add_repo("org/gated", {MODEL: model_file}, gated=True)
        with pytest.raises(GatedRepoError):
            download(hub, tmp_path / "cache", MODEL, repo="org/gated")


def test_gated_repo_info_is_public_as_on_the_real_hub(model_file: Path) -> None:
    with HubStandIn() as hub:
        hub.add_repo("org/gated", {MODEL: model_file}, gated=True)
        assert HfApi(endpoint=hub.url).model_info("org/gated", token=False).gated == "manual"


def test_gated_repo_downloads_with_the_valid_token(model_file: Path, tmp_path: Path, model_bytes: bytes) -> None:
    with HubStandIn() as hub:
        hub.add_repo("org/gated", {MODEL: model_file}, gated=True)
        assert download(hub, tmp_path / "cache", MODEL, repo="org/gated", token=HubStandIn.valid_token) == model_bytes


def test_gated_repo_info_says_manual_with_the_valid_token(model_file: Path) -> None:
    with HubStandIn() as hub:
        hub.add_repo("org/gated", {MODEL: model_file}, gated=True)
        assert HfApi(endpoint=hub.url).model_info("org/gated", token=HubStandIn.valid_token).gated == "manual"


def test_unknown_repo_download_raises_repository_not_found(hub: HubStandIn, tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError) as raised:
        download(hub, tmp_path / "cache", MODEL, repo="org/missing")
    assert not isinstance(raised.value, GatedRepoError)


def test_unknown_repo_info_raises_repository_not_found(hub: HubStandIn) -> None:
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url).model_info("org/missing", token=False)


def test_unknown_file_raises_entry_not_found(hub: HubStandIn, tmp_path: Path) -> None:
    with pytest.raises(EntryNotFoundError):
        download(hub, tmp_path / "cache", "missing.gguf")


def test_unknown_path_is_answered_404(hub: HubStandIn) -> None:
    assert httpx.get(f"{hub.url}/somewhere/else").status_code == 404


# -- recording ------------------------------------------------------------------------------------------------------


def test_requests_are_recorded_with_path_query_and_lowercased_headers(hub: HubStandIn) -> None:
    httpx.get(f"{hub.url}/api/models/{REPO}/tree/main/sub", params={"recursive": "True"}, headers={"X-Probe": "1"})
    request = hub.requests[-1]
    assert (request.method, request.path, request.query, request.headers["x-probe"]) == (
        "GET",
        f"/api/models/{REPO}/tree/main/sub",
        {"recursive": "True"},
        "1",
    )
