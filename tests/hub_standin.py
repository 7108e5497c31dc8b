"""A Hugging Face Hub stand-in for tests: a real HTTP server on 127.0.0.1 that the real ``huggingface_hub`` talks to.

It serves model repos at revision ``main`` (and at their commit sha) with the answers ``huggingface_hub`` 2.4 expects:

- ``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}``: the repo's info, as ``HfApi.model_info``
  reads it.
- ``GET /api/models/{repo}/tree/{rev}[/{folder}]`` with ``?recursive=true``: the tree listing ``list_repo_tree`` and
  ``snapshot_download`` read, LFS files carrying their sha256.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: small files are served right there; LFS files (``.gguf`` and anything
  over 1 MiB) are answered ``302`` to ``{cdn_url}/cdn/{sha256}``, with the ``X-Linked-Etag``/``X-Linked-Size`` headers
  ``hf_hub_download`` takes its metadata from.
- ``HEAD``/``GET /cdn/{sha256}``: the bytes, with ``Range`` support, needing no token.

The CDN is a second port of the same server: ``huggingface_hub`` treats it as another host, as it treats the real
Hub's CDN, so it does not follow the redirect of its metadata ``HEAD`` and does not send ``Authorization`` there.
Errors carry the ``X-Error-Code`` header the client maps to ``RepositoryNotFoundError``, ``GatedRepoError``,
``RevisionNotFoundError`` and ``RemoteEntryNotFoundError``. Faults can be injected into file bodies: a rate limit,
a dropped connection, a flipped byte, a published size that is a lie.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

_LFS_THRESHOLD = 1024 * 1024
_CHUNK_SIZE = 64 * 1024
_WRITES_PER_SECOND = 20  # a rate-limited body is written in chunks of rate / 20 bytes
_LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the stand-in received it."""

    method: str
    path: str
    """The percent-decoded path, without the query."""
    query: dict[str, str]
    headers: dict[str, str]
    """Header names lower-cased."""


@dataclass(frozen=True)
class _File:
    path: str
    source: Path | bytes
    size: int
    sha256: str
    blob_id: str  # git blob sha1 of the content, or of the LFS pointer for LFS files
    lfs: bool
    pointer_size: int


@dataclass(frozen=True)
class _Repo:
    repo_id: str
    sha: str
    gated: bool
    files: dict[str, _File]
    folders: dict[str, str] = field(default_factory=dict)  # folder path -> tree oid


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


class _RangeNotSatisfiable(Exception):
    pass


class HubStandIn:
    """A Hub stand-in serving real bytes on 127.0.0.1; a context manager, or ``start()`` / ``stop()``.

    ``url`` is the endpoint to give ``HfApi(endpoint=...)`` and ``hf_hub_download(endpoint=...)``.
    """

    valid_token: str = "hf_standin_token"
    """The one token that opens gated repos (sent as ``Authorization: Bearer <token>``)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        """Every request received, in order (appended from the server's threads)."""
        self.rate_limit: int | None = None
        """Bytes per second for file bodies, read while sending, so it can change mid-transfer; None: unlimited."""
        self._lock = threading.Lock()
        self._repos: dict[str, _Repo] = {}
        self._published_sizes: dict[tuple[str, str], int] = {}
        self._corrupt_offsets: dict[tuple[str, str], set[int]] = {}
        self._drops: dict[tuple[str, str], int] = {}
        self._holds: dict[tuple[str, str], tuple[int, threading.Event]] = {}
        self._served: dict[tuple[str, str], int] = {}
        self._sending: dict[tuple[str, str], int] = {}  # bodies of each file being sent now
        self._sent_all = threading.Condition(self._lock)  # notified when a body ends, sent whole or not
        self._stopping = threading.Event()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> HubStandIn:
        """Start serving on two free ports of 127.0.0.1 (the Hub and its CDN); returns self."""
        if self._servers:
            raise RuntimeError("the stand-in is already started")
        self._servers = [_Server(self), _Server(self)]
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-standin", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving, promptly: transfers in flight (even rate-limited ones) and idle connections are cut."""
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection)
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> HubStandIn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The Hub endpoint, ``http://127.0.0.1:PORT``."""
        return self._origin(0)

    @property
    def cdn_url(self) -> str:
        """The origin LFS files are redirected to: another port, so the client treats it as another host."""
        return self._origin(1)

    def _origin(self, index: int) -> str:
        if not self._servers:
            raise RuntimeError("the stand-in is not started")
        return f"http://127.0.0.1:{self._servers[index].server_address[1]}"

    # -- content -----------------------------------------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: Mapping[str, Path | bytes], *, gated: bool = False) -> str:
        """Publish (or replace) the model repo ``repo_id`` with ``files`` at revision ``main``; returns its commit sha.

        Paths may contain folders (``"sub/x.gguf"``). ``Path`` values are served from disk, read at each request,
        never held in memory. The sha (40 hex) is derived from the repo id and the files' contents, so it is the same
        on every run. A ``gated`` repo, like one on the real Hub, shows its info and tree to anyone but answers
        ``GatedRepo`` to a download (resolve) without ``valid_token``; its files' CDN urls need no token.
        """
        entries = {path: _describe(path, source) for path, source in files.items()}
        commit = hashlib.sha1(repo_id.encode())
        for path in sorted(entries):
            commit.update(f"\0{path}\0{entries[path].sha256}".encode())
        folders: dict[str, str] = {}
        for path in entries:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join(parts[:depth])
                below = sorted(f"{p}:{e.blob_id}" for p, e in entries.items() if p.startswith(folder + "/"))
                folders[folder] = hashlib.sha1("\n".join(below).encode()).hexdigest()
        repo = _Repo(repo_id, commit.hexdigest(), gated, entries, folders)
        with self._lock:
            self._repos[repo_id] = repo
        return repo.sha

    def drop_connection_once(self, repo_id: str, path: str, after_bytes: int) -> None:
        """Make the next GET of that file's bytes send its headers (promising the whole body), then ``after_bytes``
        body bytes, then shut the socket down: the client sees a broken transfer. A shorter body is sent whole."""
        key = self._key(repo_id, path)
        with self._lock:
            self._drops[key] = after_bytes

    @contextmanager
    def holding(self, repo_id: str, path: str, at_byte: int) -> Iterator[None]:
        """While the block runs, every body of that file stops before byte ``at_byte`` and waits, its connection
        open: a client is then certainly mid-transfer, whatever the machine's speed. Leaving the block cuts the
        held bodies (so ``bytes_served`` stops moving), and later ones are not held."""
        key = self._key(repo_id, path)
        release = threading.Event()
        with self._lock:
            self._holds[key] = (at_byte, release)
        try:
            yield
        finally:
            with self._lock:
                self._holds.pop(key, None)
            release.set()

    def corrupt(self, repo_id: str, path: str, offset: int) -> None:
        """Serve that file with the byte at ``offset`` flipped (xor 0xFF), from now on, in every body and range; the
        tree listing and headers still publish the true sha256 and size."""
        key = self._key(repo_id, path)
        with self._lock:
            self._corrupt_offsets.setdefault(key, set()).add(offset)

    def publish_size(self, repo_id: str, path: str, size: int) -> None:
        """Claim that file is ``size`` bytes in the tree listing, model info and ``X-Linked-Size``; bodies and their
        ``Content-Length`` stay true."""
        key = self._key(repo_id, path)
        with self._lock:
            self._published_sizes[key] = size

    def bytes_served(self, repo_id: str, path: str) -> int:
        """The body bytes sent for that file so far, by every request (resolve and CDN, whole and ranged)."""
        key = self._key(repo_id, path)
        with self._lock:
            return self._served.get(key, 0)

    def wait_bodies_ended(self, repo_id: str, path: str, timeout: float = 120.0) -> bool:
        """Wait until no body of that file is being sent (each one sent whole, cut, or left by its client: a client
        that closes its connection ends its body at the next write); False if one still is after ``timeout``."""
        key = self._key(repo_id, path)
        with self._sent_all:
            return self._sent_all.wait_for(lambda: not self._sending.get(key), timeout)

    def _key(self, repo_id: str, path: str) -> tuple[str, str]:
        with self._lock:
            repo = self._repos.get(repo_id)
        if repo is None or path not in repo.files:
            raise KeyError(f"{repo_id} has no file {path!r}")
        return (repo_id, path)

    # -- used by the request handler ---------------------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _repo_of(self, segments: list[str]) -> tuple[_Repo, list[str]] | None:
        """The repo whose id starts ``segments`` (``name`` or ``namespace/name``), and the segments after it."""
        with self._lock:
            for n in (2, 1):
                repo = self._repos.get("/".join(segments[:n])) if len(segments) >= n else None
                if repo is not None:
                    return repo, segments[n:]
        return None

    def _file_by_sha256(self, sha256: str, repo_id: str | None, path: str | None) -> tuple[str, _File] | None:
        """The file with that sha256: the one at ``repo_id``/``path`` if it matches, else the first published."""
        with self._lock:
            repo = self._repos.get(repo_id or "")
            named = repo.files.get(path or "") if repo is not None else None
            if repo is not None and named is not None and named.sha256 == sha256:
                return repo.repo_id, named
            for repo in self._repos.values():
                for entry in repo.files.values():
                    if entry.sha256 == sha256:
                        return repo.repo_id, entry
        return None

    def _published_size(self, repo_id: str, entry: _File) -> int:
        with self._lock:
            return self._published_sizes.get((repo_id, entry.path), entry.size)

    def _hold(self, key: tuple[str, str]) -> tuple[int, threading.Event] | None:
        with self._lock:
            return self._holds.get(key)

    def _take_drop(self, key: tuple[str, str]) -> int | None:
        with self._lock:
            return self._drops.pop(key, None)

    def _corruption(self, key: tuple[str, str]) -> frozenset[int]:
        with self._lock:
            return frozenset(self._corrupt_offsets.get(key, ()))

    def _sending_body(self, key: tuple[str, str], change: int) -> None:
        with self._sent_all:
            self._sending[key] = self._sending.get(key, 0) + change
            self._sent_all.notify_all()

    def _count_served(self, key: tuple[str, str], n: int) -> None:
        with self._lock:
            self._served[key] = self._served.get(key, 0) + n

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: HubStandIn) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.standin = standin


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "HubStandIn/1"

    @property
    def standin(self) -> HubStandIn:
        return cast(_Server, self.server).standin

    def setup(self) -> None:
        super().setup()
        self.standin._track(self.connection, True)

    def finish(self) -> None:
        self.standin._track(self.connection, False)
        with suppress(OSError):  # the connection may have been cut
            super().finish()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    # -- routing -----------------------------------------------------------------------------------------------------

    def _dispatch(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self.standin._record(RecordedRequest(self.command, unquote(url.path), query, headers))
        segments = [unquote(segment) for segment in url.path.split("/")[1:]]
        try:
            if segments[:2] == ["api", "models"]:
                self._api(segments[2:], query, head=head)
            elif len(segments) == 2 and segments[0] == "cdn":
                self._cdn(segments[1], query, head=head)
            else:
                self._resolve(segments, head=head)
        except _HubError as error:
            self._send_json(error.status, {"error": error.message}, head=head, code=error.code, headers=error.headers)
        except OSError:  # the client went away, or the stand-in cut the connection
            self.close_connection = True

    def _api(self, segments: list[str], query: dict[str, str], *, head: bool) -> None:
        found = self.standin._repo_of(segments)
        if found is None:
            raise _HubError(404, "RepoNotFound", "Repository not found")
        repo, rest = found
        if not rest:
            self._send_json(200, self._model_info(repo, blobs=_truthy(query.get("blobs"))), head=head)
        elif len(rest) == 2 and rest[0] == "revision":
            self._check_revision(repo, rest[1])
            self._send_json(200, self._model_info(repo, blobs=_truthy(query.get("blobs"))), head=head)
        elif len(rest) >= 2 and rest[0] == "tree":
            self._check_revision(repo, rest[1])
            folder = "/".join(rest[2:]).strip("/")
            self._send_json(200, self._tree(repo, folder, _truthy(query.get("recursive"))), head=head)
        else:
            raise _HubError(404, None, "Not Found")

    def _resolve(self, segments: list[str], *, head: bool) -> None:
        found = self.standin._repo_of(segments)
        if found is None:
            if "resolve" in segments[1:3]:
                raise _HubError(404, "RepoNotFound", "Repository not found")
            raise _HubError(404, None, "Not Found")
        repo, rest = found
        if len(rest) < 3 or rest[0] != "resolve":
            raise _HubError(404, None, "Not Found")
        self._check_access(repo)
        self._check_revision(repo, rest[1])
        path = "/".join(rest[2:])
        entry = repo.files.get(path)
        if entry is None:
            raise _HubError(
                404, "EntryNotFound", f"{path} does not exist on {rest[1]}", headers={"X-Repo-Commit": repo.sha}
            )
        if not entry.lfs:
            headers = {"ETag": f'"{entry.blob_id}"', "X-Repo-Commit": repo.sha}
            self._send_file((repo.repo_id, path), entry, headers, head=head)
            return
        location = f"{self.standin.cdn_url}/cdn/{entry.sha256}?repo={quote(repo.repo_id)}&path={quote(path)}"
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("X-Repo-Commit", repo.sha)
        self.send_header("X-Linked-Etag", f'"{entry.sha256}"')
        self.send_header("X-Linked-Size", str(self.standin._published_size(repo.repo_id, entry)))
        self.send_header("ETag", f'"{entry.blob_id}"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _cdn(self, sha256: str, query: dict[str, str], *, head: bool) -> None:
        found = self.standin._file_by_sha256(sha256, query.get("repo"), query.get("path"))
        if found is None:
            raise _HubError(404, None, "Not Found")
        repo_id, entry = found
        self._send_file((repo_id, entry.path), entry, {"ETag": f'"{entry.sha256}"'}, head=head)

    def _check_access(self, repo: _Repo) -> None:
        if repo.gated and self.headers.get("Authorization") != f"Bearer {self.standin.valid_token}":
            message = (
                f"Access to model {repo.repo_id} is restricted. You must have access to it and be authenticated to"
                " access it. Please log in."
            )
            raise _HubError(401, "GatedRepo", message, headers={"X-Error-Message": message})

    @staticmethod
    def _check_revision(repo: _Repo, revision: str) -> None:
        if revision not in ("main", repo.sha):
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")

    # -- answers -----------------------------------------------------------------------------------------------------

    def _model_info(self, repo: _Repo, *, blobs: bool) -> dict[str, object]:
        siblings: list[dict[str, object]] = []
        for path in sorted(repo.files):
            sibling: dict[str, object] = {"rfilename": path}
            if blobs:
                entry = repo.files[path]
                sibling.update(size=self.standin._published_size(repo.repo_id, entry), blobId=entry.blob_id)
                if entry.lfs:
                    sibling["lfs"] = self._lfs_json(repo, entry, oid_key="sha256")
            siblings.append(sibling)
        return {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": repo.sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "lastModified": _LAST_MODIFIED,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "siblings": siblings,
        }

    def _tree(self, repo: _Repo, folder: str, recursive: bool) -> list[dict[str, object]]:
        if folder and folder not in repo.folders:
            raise _HubError(404, "EntryNotFound", f"{folder} does not exist on {repo.sha}")
        prefix = f"{folder}/" if folder else ""

        def listed(path: str) -> bool:
            return path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :])

        entries: list[dict[str, object]] = [
            {"type": "directory", "oid": oid, "size": 0, "path": path}
            for path, oid in repo.folders.items()
            if listed(path)
        ]
        entries += [self._file_json(repo, entry) for path, entry in repo.files.items() if listed(path)]
        return sorted(entries, key=lambda entry: str(entry["path"]))

    def _file_json(self, repo: _Repo, entry: _File) -> dict[str, object]:
        size = self.standin._published_size(repo.repo_id, entry)
        answer: dict[str, object] = {"type": "file", "oid": entry.blob_id, "size": size, "path": entry.path}
        if entry.lfs:
            answer["lfs"] = self._lfs_json(repo, entry, oid_key="oid")
        return answer

    def _lfs_json(self, repo: _Repo, entry: _File, *, oid_key: str) -> dict[str, object]:
        """The ``lfs`` object: the tree listing names the sha256 ``oid``, the model info's siblings ``sha256``."""
        size = self.standin._published_size(repo.repo_id, entry)
        return {oid_key: entry.sha256, "size": size, "pointerSize": entry.pointer_size}

    def _send_json(
        self,
        status: int,
        body: object,
        *,
        head: bool,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if code is not None:
            self.send_header("X-Error-Code", code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _send_file(self, key: tuple[str, str], entry: _File, headers: Mapping[str, str], *, head: bool) -> None:
        """Answer with the file's bytes: whole (200), a range (206) or 416; faults applied to the body."""
        start, end, status = 0, entry.size - 1, 200
        range_header = self.headers.get("Range")
        if range_header is not None:
            try:
                requested = _parse_range(range_header, entry.size)
            except _RangeNotSatisfiable:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{entry.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if requested is not None:
                (start, end), status = requested, 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{entry.size}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.standin._sending_body(key, +1)
            try:
                self._stream(key, entry, start, length)
            finally:
                self.standin._sending_body(key, -1)

    def _stream(self, key: tuple[str, str], entry: _File, start: int, length: int) -> None:
        standin = self.standin
        drop_after = standin._take_drop(key)
        corrupt = standin._corruption(key)
        hold = standin._hold(key)
        sent = 0
        with _open(entry.source) as source:
            source.seek(start)
            while sent < length:
                if standin._stopping.is_set() or (drop_after is not None and sent >= drop_after):
                    self._cut()
                    return
                rate = standin.rate_limit
                n = min(_CHUNK_SIZE, length - sent)
                if rate:
                    n = min(n, max(1, rate // _WRITES_PER_SECOND))
                if drop_after is not None:
                    n = min(n, drop_after - sent)
                if hold is not None and not hold[1].is_set():
                    at_byte, release = hold
                    if start + sent >= at_byte:
                        # released or stopping, the held body is cut: its client was interrupted while it waited,
                        # and bytes written to a dead socket would be counted as served, racing a test's count
                        while not release.wait(0.1) and not standin._stopping.is_set():
                            pass
                        self._cut()
                        return
                    n = min(n, at_byte - start - sent)
                chunk = bytearray(source.read(n))
                if len(chunk) != n:
                    raise OSError(f"{entry.path} changed on disk while being served")
                for offset in corrupt:
                    if start + sent <= offset < start + sent + n:
                        chunk[offset - start - sent] ^= 0xFF
                began = time.monotonic()
                self.wfile.write(chunk)
                sent += n
                standin._count_served(key, n)
                if rate and standin._stopping.wait(n / rate - (time.monotonic() - began)):
                    self._cut()
                    return

    def _cut(self) -> None:
        """End the connection abruptly, mid-body: the client sees fewer bytes than Content-Length promised."""
        self.close_connection = True
        _shutdown(self.connection)


def _describe(path: str, source: Path | bytes) -> _File:
    """The file's sizes and hashes, reading a ``Path`` in chunks."""
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"invalid path in repo: {path!r}")
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    lfs = path.endswith(".gguf") or size > _LFS_THRESHOLD
    sha256 = hashlib.sha256()
    git_sha1 = hashlib.sha1(b"blob %d\0" % size)
    with _open(source) as reader:
        while chunk := reader.read(1024 * 1024):
            sha256.update(chunk)
            if not lfs:
                git_sha1.update(chunk)
    if lfs:
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256.hexdigest()}\nsize {size}\n".encode()
        git_sha1 = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer)
        return _File(path, source, size, sha256.hexdigest(), git_sha1.hexdigest(), True, len(pointer))
    return _File(path, source, size, sha256.hexdigest(), git_sha1.hexdigest(), False, 0)


@contextmanager
def _open(source: Path | bytes) -> Iterator[IO[bytes]]:
    if isinstance(source, bytes):
        yield io.BytesIO(source)
    else:
        with source.open("rb") as f:
            yield f


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The inclusive byte range ``header`` asks for; None to ignore it (malformed, or several ranges)."""
    match = _RANGE.fullmatch(header.strip().replace(" ", ""))
    if match is None or match.group(1) == match.group(2) == "":
        return None
    if match.group(1) == "":
        suffix = int(match.group(2))
        if suffix == 0 or size == 0:
            raise _RangeNotSatisfiable
        return max(0, size - suffix), size - 1
    start = int(match.group(1))
    if start >= size:
        raise _RangeNotSatisfiable
    end = int(match.group(2)) if match.group(2) else size - 1
    if end < start:
        return None
    return start, min(end, size - 1)


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def _shutdown(connection: socket.socket) -> None:
    with suppress(OSError):  # already closed
        connection.shutdown(socket.SHUT_RDWR)
