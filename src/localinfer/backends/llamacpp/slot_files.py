"""A slot's cache saved to a file and restored from it, as llama-server's ``POST /slots/{id}?action=...`` does.

A file is llama.cpp's sequence state file (``llama_state_seq_save_file``): the slot's tokens, then the keys and values
of its sequence. The tokens are packed as llama-server packs them (a marker, a version, the ids, no media), so a
file saved by one restores in the other when the model and its cache settings are the same; a plain list of ids, as
older llama-servers wrote, restores too.

Requesters ``submit`` from any thread; the inference thread runs an action between two steps, once its slot holds no
request (a busy slot's action waits for it, as llama-server defers it). A save writes a temporary file beside the
target and renames it over, so a save killed midway leaves no half-written file under the name.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import SlotFile
from localinfer.backends.llamacpp import checkpoints
from localinfer.backends.llamacpp.job import Slot
from localinfer.errors import InvalidRequest, LocalInferError, ModelNotReady, SlotFileError

TOKENS_MARKER = lc.LLAMA_TOKEN_NULL  # llama-server's packed tokens start with it; a plain list of ids cannot
TOKENS_VERSION = 1  # llama-server's SERVER_TOKENS_STATE_VERSION

ActionKind = Literal["save", "restore", "erase"]


@dataclass(frozen=True)
class SlotAction:
    """Save the cache of slot ``seq_id`` to ``path``, restore it from there, or erase it (no path)."""

    kind: ActionKind
    seq_id: int
    path: Path | None = None


Result = SlotFile | int  # a save's or a restore's figures; an erase's count of tokens dropped


class SlotActions:
    """Actions waiting for the inference thread, each with the future its requester awaits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[SlotAction, Future[Result]]] = []
        self._closed = False

    def submit(self, action: SlotAction) -> Future[Result]:
        """Queue ``action``. Raises ModelNotReady once the loop has ended."""
        future: Future[Result] = Future()
        with self._lock:
            if self._closed:
                raise ModelNotReady("the model was unloaded", hint="retry: it is loaded again on the next request")
            self._pending.append((action, future))
        return future

    def take_ready(self, idle: Callable[[int], bool]) -> list[tuple[SlotAction, Future[Result]]]:
        """The actions whose slot is ``idle`` now, in the order they came; the others keep waiting."""
        with self._lock:
            ready = [(a, f) for a, f in self._pending if idle(a.seq_id)]
            self._pending = [(a, f) for a, f in self._pending if not idle(a.seq_id)]
        return ready

    def close(self, error: LocalInferError) -> None:
        """Refuse actions from now on and fail those still waiting with ``error``."""
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, []
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(error)


class SlotFiles:
    """What the inference thread does for each action, on one context."""

    def __init__(self, ctx: lc.llama_context_p, *, n_ctx: int, n_vocab: int, n_swa: int) -> None:
        self._ctx = ctx
        self._memory = lc.llama_get_memory(ctx)
        self._n_ctx = n_ctx
        self._n_vocab = n_vocab
        self._n_swa = n_swa

    def run(self, action: SlotAction, slot: Slot) -> Result:
        """Do ``action`` on ``slot``, which holds no request. Raises SlotFileError when a save fails and
        InvalidRequest when a file cannot be restored (the slot's cache is then empty)."""
        if action.kind == "erase":
            return self.erase(slot)
        assert action.path is not None, "a save or a restore names its file"
        if action.kind == "save":
            return self.save(slot, action.path)
        return self.restore(slot, action.path)

    def erase(self, slot: Slot) -> int:
        n = len(slot.cached)
        lc.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.cached = []
        slot.checkpoint = None
        return n

    def save(self, slot: Slot, path: Path) -> SlotFile:
        started = time.perf_counter()
        if slot.cached and min(slot.cached) < 0:  # an image's positions: its ids mean nothing to another process
            raise InvalidRequest(
                "Unable to save slot: its cache holds an image", param="id_slot", hint="erase it first"
            )
        packed = [TOKENS_MARKER, TOKENS_VERSION, len(slot.cached), *slot.cached, 0]  # 0: no media
        tokens = (lc.llama_token * len(packed))(*packed)
        temporary = path.with_name(f".slot-{uuid.uuid4().hex}.tmp")  # as short as can be, whatever the name's length
        try:
            written = lc.llama_state_seq_save_file(self._ctx, os.fsencode(temporary), slot.seq_id, tokens, len(packed))
            if written == 0:
                raise SlotFileError("Unable to save slot", hint="see the server's log for llama.cpp's reason")
            _fsync(temporary)  # the bytes are on the disk before any name points at them
            os.replace(temporary, path)
            if os.name == "posix":  # and the rename is (Windows cannot open a folder to flush it)
                _fsync(path.parent)
        except OSError as exc:
            raise SlotFileError(f"Unable to save slot: {exc.strerror or exc}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        return SlotFile(slot.seq_id, len(slot.cached), int(written), (time.perf_counter() - started) * 1000.0)

    def restore(self, slot: Slot, path: Path) -> SlotFile:
        started = time.perf_counter()
        try:
            tokens, n_read = self._load(slot.seq_id, path)
        except InvalidRequest:
            self.erase(slot)  # a load that failed midway may have left part of the file's cache
            raise
        slot.cached = tokens
        # A sliding-window model's file holds the window as of its last token, which is what a prompt that goes on
        # from there needs: a checkpoint of it lets the step loop reuse it as it reuses a prompt it computed itself.
        slot.checkpoint = checkpoints.take(self._ctx, self._memory, slot.seq_id, len(tokens)) if self._n_swa else None
        return SlotFile(slot.seq_id, len(tokens), n_read, (time.perf_counter() - started) * 1000.0)

    def _load(self, seq_id: int, path: Path) -> tuple[list[int], int]:
        """The tokens ``path`` holds, its cache loaded into ``seq_id``, and the bytes read. Raises InvalidRequest."""
        if not path.is_file():
            raise _unable(f"there is no file {path.name!r} in the slot save folder")
        n_packed = ctypes.c_size_t(0)
        name = os.fsencode(path)
        if lc.llama_state_seq_load_file(self._ctx, name, seq_id, None, 0, ctypes.byref(n_packed)) == 0:
            raise _unable("No available space in KV cache or invalid slot save file", _SAME_LAYOUT)
        packed = (lc.llama_token * max(1, n_packed.value))()
        n_read = lc.llama_state_seq_load_file(self._ctx, name, seq_id, packed, len(packed), ctypes.byref(n_packed))
        if n_read == 0:
            raise _unable("No available space in KV cache or invalid slot save file", _SAME_LAYOUT)
        tokens = unpack(list(packed[: n_packed.value]))
        if len(tokens) > self._n_ctx:
            raise _unable("Restored prompt does not fit in the slot context")
        if any(not 0 <= token < self._n_vocab for token in tokens):
            raise _unable("Invalid tokens in slot save file")
        return tokens, int(n_read)


def unpack(packed: list[int]) -> list[int]:
    """The token ids of a file's packed tokens: llama-server's layout (marker, version, count, ids, media count),
    or a plain list of ids. Raises InvalidRequest for another version, media, or a layout that does not add up."""
    if not packed or packed[0] != TOKENS_MARKER:
        return packed
    if len(packed) < 3 or packed[1] != TOKENS_VERSION:
        raise _unable("Unsupported server tokens state version")
    n = packed[2]
    if n < 0 or len(packed) < 3 + n + 1:
        raise _unable("Invalid tokens in slot save file")
    if packed[3 + n] != 0:
        raise _unable("Cannot restore media tokens without an mmproj")
    if len(packed) > 3 + n + 1:
        raise _unable("Trailing data in server tokens state")
    return packed[3 : 3 + n]


def _unable(why: str, hint: str | None = None) -> InvalidRequest:
    return InvalidRequest(f"Unable to restore slot: {why}", param="filename", hint=hint)


# llama.cpp reads a file only into a context laid out as the one that wrote it
_SAME_LAYOUT = (
    "restore a file saved from this model with the same --parallel, --ctx-size, --cache-type-k/v and --flash-attn; "
    "the server's log says what differs"
)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
