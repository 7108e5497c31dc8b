"""Where slots' caches are saved (``serve --slot-save-path DIR``) and which file names a client may give there.

A name is a plain file name in that folder, checked as llama-server's ``fs_validate_filename`` checks it (no path
separator, no ``..``, no control or look-alike characters, at most 255 bytes), and a file that resolves outside the
folder (a link) is never read: the server never writes or reads a file a client names outside the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from localinfer.backends.base import SLOT_FILES_HINT, Backend
from localinfer.errors import InvalidRequest, NotSupported

MAX_NAME_BYTES: Final = 255  # the longest file name of common Linux file systems
# characters no file name may hold: the path separators, Windows' reserved ones, and their Unicode look-alikes
_FORBIDDEN: Final = frozenset('/\\:*?"<>|') | {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}


def slot_folder(configured: Path | None) -> Path:
    """The folder slots are saved in. Raises NotSupported (llama-server's 501) when the server was started
    without one."""
    if configured is None:
        raise NotSupported(
            "This server does not support slots action. Start it with `--slot-save-path`",
            hint="restart it with --slot-save-path DIR",
        )
    return configured


def slot_file(folder: Path, filename: str) -> Path:
    """``filename`` in ``folder``. Raises InvalidRequest (llama-server's "Invalid filename") for a name that is
    not a plain file name, or that names a link to a file outside the folder."""
    if not valid_filename(filename):
        raise InvalidRequest(
            "Invalid filename",
            param="filename",
            hint="give a plain file name, without '/', '\\', '..' or control characters",
        )
    path = folder / filename
    if path.is_symlink() and path.resolve().parent != folder.resolve():
        raise InvalidRequest("Invalid filename", param="filename", hint="the file links outside the slot folder")
    return path


def valid_filename(name: str) -> bool:
    """Whether ``name`` is a plain file name, by llama-server's rules (fs_validate_filename without subfolders)."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800")
        return False
    if not name or len(encoded) > MAX_NAME_BYTES:
        return False
    for char in name:
        code = ord(char)
        if code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF or char in _FORBIDDEN:
            return False
    # Windows strips a leading or trailing space and a trailing dot: another file than the one named
    return not (name[0] == " " or name[-1] in " ." or ".." in name or name == ".")


def check_slot_files(backend: Backend, model: str) -> Backend:
    """``backend`` when it saves and restores slots. Raises NotSupported naming ``model`` and its backend."""
    if not backend.capabilities.slot_files:
        raise NotSupported(
            f"model '{model}' is served by the {backend.name} backend, which cannot save or restore a slot's cache",
            hint=SLOT_FILES_HINT,
        )
    return backend
