"""Files in the Hugging Face cache, laid out as ``huggingface_hub`` lays them out: a blob verified by the checksum
the Hub publishes while it downloads (``Digest``), the partial file a download resumes from, the lock that makes
concurrent downloads of one blob wait for each other, a snapshot's link to its blob, and a ref written atomically.
The client that lists repositories and downloads into the cache is hub.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localinfer.progress import ProgressEvent, ProgressSink

CHUNK = 1 << 20


class Digest:
    """The checksum a file of ``size`` bytes is verified with: its ``sha256`` for LFS files, its git blob sha1
    (``git_oid``) otherwise."""

    def __init__(self, sha256: str | None, git_oid: str | None, size: int) -> None:
        self._sha256 = sha256
        self._size = size
        self.name = "sha256" if sha256 else "git sha1"
        self.expected = sha256 or git_oid or ""
        self.reset()

    def reset(self) -> None:
        if self._sha256:
            self._hash: Any = hashlib.sha256()
        else:
            self._hash = hashlib.sha1(f"blob {self._size}\0".encode(), usedforsecurity=False)

    def update(self, chunk: bytes) -> None:
        self._hash.update(chunk)

    def update_from_file(self, path: Path) -> None:
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                self._hash.update(chunk)

    def hexdigest(self) -> str:
        return str(self._hash.hexdigest())

    def matches(self) -> bool:
        return self.hexdigest() == self.expected


@contextlib.contextmanager
def blob_lock(lock_path: Path, path: str, progress: ProgressSink) -> Iterator[None]:
    """huggingface_hub's own lock file for a blob (``lock_path``), so concurrent downloads of it wait for each other;
    ``path``: the file the blob is, named while waiting."""
    from filelock import FileLock, Timeout

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0.5)
    except Timeout:
        progress(ProgressEvent(f"waiting for another download of {path} to finish"))
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def link(pointer: Path, blob: Path) -> None:
    """Point ``pointer`` (in a snapshot) at ``blob`` with a relative symlink, replacing what was there."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() and pointer.resolve() == blob.resolve():
        return
    tmp = pointer.with_name(f".{pointer.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), tmp)
    except OSError:  # no symlinks (some Windows setups): a hard link still shares the bytes
        os.link(blob, tmp)
    os.replace(tmp, pointer)


def partial_path(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
