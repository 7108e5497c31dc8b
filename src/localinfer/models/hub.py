"""The Hugging Face Hub: list a repository, and download its files into the standard Hugging Face cache.

Files land where ``huggingface_hub`` puts them (``models--org--name/blobs/<etag>`` with a
``snapshots/<commit>/<path>`` link and ``refs/<branch>``), so llama.cpp's ``-hf``, transformers and the ``hf``
CLI see them and nothing is stored twice. The metadata calls go through ``huggingface_hub`` (``HF_TOKEN``,
``HF_ENDPOINT``, proxies and CA bundles from the environment, ``HF_HUB_OFFLINE``). The bytes are fetched here,
because ``hf_hub_download`` restarts from zero after a kill: a download goes to the stable
``blobs/<etag>.incomplete`` and continues with a ``Range`` request, from the bytes on disk, after a dropped
connection, a Ctrl-C or a SIGKILL. Every file is checked against the sha256 the Hub publishes before it
enters the cache; a file that does not match is deleted.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2

from localinfer import __version__
from localinfer.errors import DiskFull, HubUnreachable, PullError
from localinfer.models.hf_cache import (
    CHUNK,
    Digest,
    blob_lock,
    file_size,
    link,
    partial_path,
    read_text,
    write_atomically,
)
from localinfer.progress import ProgressEvent, ProgressSink

log = logging.getLogger(__name__)

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_RETRIES = 5
DISK_MARGIN = 64 * 1024 * 1024
# Network failures: httpx2's transport errors (refused, reset, timed out, cut short), and a socket's OSErrors.
_TRANSPORT_ERRORS = (httpx2.TransportError, ConnectionError, TimeoutError)


@dataclass(frozen=True)
class RemoteFile:
    """A file of a repository: its path, size, the sha256 the Hub publishes for LFS files, and its git blob id."""

    path: str
    size: int
    sha256: str | None
    git_oid: str | None

    @property
    def etag(self) -> str:
        """The name of its blob in the cache: the sha256 for LFS files, else the git blob id."""
        etag = self.sha256 or self.git_oid
        if etag is None:
            raise PullError(f"the Hub published no checksum for {self.path}", hint="try again later")
        return etag


@dataclass(frozen=True)
class RepoListing:
    """A repository at one commit, and its files."""

    repo_id: str
    commit: str
    files: tuple[RemoteFile, ...]

    def get(self, path: str) -> RemoteFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass(frozen=True)
class FetchedFile:
    """A file in the cache: its snapshot path, and whether this call downloaded its bytes."""

    path: Path
    size: int
    sha256: str | None
    downloaded: bool


class HubClient:
    """Talks to one Hub endpoint and keeps files in one cache folder.

    Arguments left as None take the ``huggingface_hub`` defaults, which come from the environment
    (``HF_ENDPOINT``, ``HF_HUB_CACHE``/``HF_HOME``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``).
    """

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        cache_dir: Path | None = None,
        token: str | None = None,
        offline: bool | None = None,
    ) -> None:
        from huggingface_hub import constants

        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.cache_dir = Path(cache_dir or constants.HF_HUB_CACHE).expanduser()
        self.token = token
        self.offline = constants.HF_HUB_OFFLINE if offline is None else offline
        self.timeout = float(constants.HF_HUB_DOWNLOAD_TIMEOUT)

    # -- listing ---------------------------------------------------------------------------------------

    def list_repo(self, repo_id: str, revision: str = "main") -> RepoListing:
        """The repository's files at ``revision`` (two metadata requests), or from the cache when offline.

        Raises PullError for a missing or gated repository or revision, HubUnreachable without a network.
        """
        if self.offline:
            return self.cached_listing(repo_id, revision)
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(endpoint=self.endpoint, token=self.token, library_name="localinfer", library_version=__version__)
        with self._hub_errors(repo_id, revision):
            commit = api.model_info(repo_id, revision=revision).sha
            if commit is None:
                raise PullError(f"the Hub did not say which commit {repo_id}@{revision} is", hint="try again later")
            files = tuple(
                RemoteFile(
                    path=item.path,
                    size=item.lfs.size if item.lfs else item.size,
                    sha256=item.lfs.sha256 if item.lfs else None,
                    git_oid=item.blob_id,
                )
                for item in api.list_repo_tree(repo_id, recursive=True, revision=commit)
                if isinstance(item, RepoFile)
            )
        return RepoListing(repo_id, commit, files)

    def cached_listing(self, repo_id: str, revision: str = "main") -> RepoListing:
        """The files of ``repo_id`` at ``revision`` as the cache has them. Raises PullError when it has none."""
        repo_dir = self.repo_dir(repo_id)
        commit = revision if _COMMIT_RE.match(revision) else read_text(repo_dir / "refs" / revision)
        snapshot = repo_dir / "snapshots" / (commit or "")
        if not commit or not snapshot.is_dir():
            raise HubUnreachable(
                f"{repo_id} is not in the Hugging Face cache ({self.cache_dir}) and HF_HUB_OFFLINE is set",
                hint="unset HF_HUB_OFFLINE to download it, or see what is here with 'localinfer ls'",
            )
        files = []
        for path in sorted(p for p in snapshot.rglob("*") if p.is_file()):
            blob_name = path.resolve().name
            files.append(
                RemoteFile(
                    path=path.relative_to(snapshot).as_posix(),
                    size=path.stat().st_size,
                    sha256=blob_name if _SHA256_RE.match(blob_name) else None,
                    git_oid=None if _SHA256_RE.match(blob_name) else blob_name,
                )
            )
        return RepoListing(repo_id, commit, tuple(files))

    # -- files -----------------------------------------------------------------------------------------

    def repo_dir(self, repo_id: str) -> Path:
        return self.cache_dir / ("models--" + repo_id.replace("/", "--"))

    def blob_path(self, repo_id: str, file: RemoteFile) -> Path:
        return self.repo_dir(repo_id) / "blobs" / file.etag

    def missing_bytes(self, listing: RepoListing, file: RemoteFile) -> int:
        """Bytes still to download for ``file``: none when its blob is complete, less when a partial exists."""
        blob = self.blob_path(listing.repo_id, file)
        if file_size(blob) == file.size:
            return 0
        return max(file.size - (file_size(partial_path(blob)) or 0), 0)

    def check_disk_space(self, needed: int) -> None:
        """Raise DiskFull when the cache's disk has less than ``needed`` bytes (plus a margin) free."""
        with self._cache_errors():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.cache_dir).free
        if needed and free < needed + DISK_MARGIN:
            raise DiskFull(
                f"not enough disk space: the download needs {needed / 1e9:.2f} GB and {self.cache_dir} "
                f"has {free / 1e9:.2f} GB free",
                hint="free some space, or point HF_HUB_CACHE at a bigger disk",
            )

    def fetch(self, listing: RepoListing, file: RemoteFile, progress: ProgressSink) -> FetchedFile:
        """Make ``file`` present in the cache and linked from the listing's snapshot; download what is missing.

        The caller checks the disk space first, for all of a model's files at once (``missing_bytes``,
        ``check_disk_space``); a disk that fills anyway raises DiskFull and keeps the partial file.

        Raises PullError (a checksum mismatch, the file gone from the Hub, offline without it), DiskFull,
        or HubUnreachable; the bytes already on disk stay for the next try, except a file that fails the
        checksum, which is deleted.
        """
        repo_dir = self.repo_dir(listing.repo_id)
        blob = self.blob_path(listing.repo_id, file)
        pointer = repo_dir / "snapshots" / listing.commit / file.path
        downloaded = False
        lock_path = self.cache_dir / ".locks" / repo_dir.name / f"{file.etag}.lock"
        with self._cache_errors(), blob_lock(lock_path, file.path, progress):
            if file_size(blob) != file.size:
                if self.offline:
                    raise PullError(
                        f"{file.path} is not in the cache and HF_HUB_OFFLINE is set",
                        hint="unset HF_HUB_OFFLINE to download it",
                    )
                self._download(listing, file, blob, progress)
                downloaded = True
            link(pointer, blob)
        return FetchedFile(pointer, file.size, file.sha256, downloaded)

    def discard_downloaded(self, fetched: Iterable[FetchedFile]) -> None:
        """Delete the files of ``fetched`` this client downloaded (of a model found broken); keep the others."""
        for file in fetched:
            if file.downloaded:
                self.discard(file)

    def discard(self, fetched: FetchedFile) -> None:
        """Delete a file this client just downloaded: its snapshot link and its blob."""
        blob = fetched.path.resolve()
        fetched.path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)

    def record_ref(self, repo_id: str, revision: str, commit: str) -> None:
        """Remember that branch ``revision`` is at ``commit`` (``refs/<revision>``), as huggingface_hub does."""
        if revision == commit or _COMMIT_RE.match(revision):
            return
        ref = self.repo_dir(repo_id) / "refs" / revision
        if read_text(ref) != commit:
            ref.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(ref, commit.encode())

    def _download(self, listing: RepoListing, file: RemoteFile, blob: Path, progress: ProgressSink) -> None:
        from huggingface_hub import hf_hub_url

        partial = partial_path(blob)
        partial.parent.mkdir(parents=True, exist_ok=True)
        digest = Digest(file.sha256, file.git_oid, file.size)
        have = file_size(partial) or 0
        if have > file.size:
            partial.unlink()
            have = 0
        if have:
            log.info("resuming %s from byte %d", file.path, have)
            progress(ProgressEvent(f"checking the {have / 1e6:.1f} MB already downloaded of {file.path}"))
            digest.update_from_file(partial)
        url = hf_hub_url(listing.repo_id, file.path, revision=listing.commit, endpoint=self.endpoint)
        status = f"pulling {file.path}"
        failures = 0
        while have < file.size:
            progress(ProgressEvent(status, total=file.size, completed=have, digest=file.sha256))
            before = have
            try:
                have = self._stream(url, listing.repo_id, partial, have, digest, file, status, progress)
            except _TRANSPORT_ERRORS as exc:
                log.info("download of %s broke at byte %d (%s): resuming", file.path, have, exc)
                have = file_size(partial) or 0
                failures = 0 if have > before else failures + 1
                if failures > _RETRIES:
                    raise HubUnreachable(
                        f"the download of {file.path} keeps failing ({type(exc).__name__}) at "
                        f"{have / 1e6:.1f} of {file.size / 1e6:.1f} MB",
                        hint="check the connection and run the same command again: it resumes where it stopped",
                    ) from exc
                time.sleep(min(0.25 * 2**failures, 4.0))
        progress(ProgressEvent(f"verifying sha256 of {file.path}", total=file.size, completed=have))
        if not digest.matches():
            partial.unlink(missing_ok=True)
            raise PullError(
                f"{file.path} from {listing.repo_id} failed its checksum ({digest.name} {digest.hexdigest()}, "
                f"the Hub published {digest.expected}); the corrupt file was deleted",
                hint="run the pull again to download it afresh",
            )
        os.replace(partial, blob)

    def _stream(
        self,
        url: str,
        repo_id: str,
        partial: Path,
        have: int,
        digest: Digest,
        file: RemoteFile,
        status: str,
        progress: ProgressSink,
    ) -> int:
        """GET ``url`` from byte ``have`` into ``partial``; returns the bytes now on disk."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        headers = build_hf_headers(token=self.token, library_name="localinfer", library_version=__version__)
        if have:
            headers["Range"] = f"bytes={have}-"
        with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=self.timeout) as resp:
            with self._hub_errors(repo_id, None):
                hf_raise_for_status(resp)
            if have and resp.status_code != 206:
                log.info("the server ignored the Range request for %s: starting over", file.path)
                partial.unlink(missing_ok=True)
                digest.reset()
                have = 0
            try:
                with partial.open("ab") as out:
                    for chunk in resp.iter_bytes(CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        have += len(chunk)
                        progress(ProgressEvent(status, total=file.size, completed=have, digest=file.sha256))
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise DiskFull(
                        f"the disk filled up while downloading {file.path} ({have / 1e6:.1f} MB are kept)",
                        hint="free some space and run the same command again: it resumes where it stopped",
                    ) from exc
                raise
        return have

    # -- errors ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _cache_errors(self) -> Iterator[None]:
        """Turn a cache folder that cannot be written (permissions, a file in the way) into one PullError."""
        try:
            yield
        except OSError as exc:
            if isinstance(exc, _TRANSPORT_ERRORS):
                raise
            if exc.errno == errno.ENOSPC:
                raise DiskFull(
                    f"the disk of {self.cache_dir} is full", hint="free some space and run the same command again"
                ) from exc
            raise PullError(
                f"cannot write to the Hugging Face cache {self.cache_dir}: {exc.strerror or exc}",
                hint="check that folder's permissions, or point HF_HUB_CACHE at a writable folder",
            ) from exc

    @contextlib.contextmanager
    def _hub_errors(self, repo_id: str, revision: str | None) -> Iterator[None]:
        """Turn huggingface_hub and network errors into PullError / HubUnreachable with a hint."""
        from huggingface_hub import errors

        try:
            yield
        except errors.GatedRepoError as exc:
            raise PullError(
                f"{repo_id} is a gated repository: the Hub wants an accepted licence and a token",
                hint=f"accept its terms at {self.endpoint}/{repo_id}, then set HF_TOKEN to a token of that account",
            ) from exc
        except errors.RepositoryNotFoundError as exc:
            raise PullError(
                f"there is no repository {repo_id} on the Hub (or it is private)",
                hint="check the name (org/repo, e.g. bartowski/Llama-3.2-1B-Instruct-GGUF); "
                "for a private repository set HF_TOKEN",
            ) from exc
        except errors.RevisionNotFoundError as exc:
            raise PullError(f"{repo_id} has no revision {revision}", hint="check the branch or commit") from exc
        except errors.EntryNotFoundError as exc:
            raise PullError(f"{repo_id} is no longer on the Hub as listed", hint="run the pull again") from exc
        except errors.HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (401, 403):
                raise PullError(f"the Hub refused access to {repo_id} (HTTP {status})", hint="check HF_TOKEN") from exc
            raise HubUnreachable(f"the Hub answered HTTP {status} for {repo_id}", hint="try again in a moment") from exc
        except _TRANSPORT_ERRORS as exc:
            raise HubUnreachable(
                f"cannot reach the Hugging Face Hub at {self.endpoint} ({type(exc).__name__})",
                hint="check the network, HF_ENDPOINT and proxy settings; models already on disk work offline "
                "(localinfer ls)",
            ) from exc
