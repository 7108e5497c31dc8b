"""Images and sounds into a llama.cpp model through its projector (llama.cpp's mtmd, as llama-server ``--mmproj``).

A prompt with media is tokenized by mtmd: the text around each ``MEDIA_MARKER`` as text tokens, each picture or
sound as a chunk of embeddings to come. In the step loop's token lists a chunk stands as negative ids, one per
position it takes, the same ids for the same bytes (by sha256) as long as the model is loaded: so a slot's cache,
the prefix it shares with a new prompt, another slot's prefix it borrows and the slot a job is sent to all work on
images as they do on text, and a second question about a picture reuses it wherever it is cached. When the step loop
reaches a chunk, it is encoded by the projector (or its embeddings are taken from a small cache of recent ones,
by digest) and decoded in a ``llama_decode`` of its own between two steps, as llama-server does (``decode_next``).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as lc
import llama_cpp.mtmd_cpp as mtmd

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.model import FLASH_ATTN_TYPES, LlamaModel, default_threads
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelLoadError
from localinfer.types import MEDIA_MARKER, GenerationRequest, MediaPart

log = logging.getLogger(__name__)

_CHUNK_TEXT = 0
_CHUNK_AUDIO = 2
# Embeddings of recently encoded media kept by digest, so a picture asked about again after its slot's cache moved
# on is decoded without running the encoder again (Gemma 3's image: 256 x 2,560 floats, 2.5 MiB).
EMBEDDING_CACHE_BYTES = 64 << 20
# Digests whose ids are remembered; past that the oldest are forgotten (an image seen again then gets new ids, so a
# cache holding its old ones no longer matches: ids are never given twice).
_MAX_IDS = 65536

_log_errors = threading.local()
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()  # a null function pointer


@lc.llama_log_callback  # type: ignore[untyped-decorator]
def _route_mtmd_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """mtmd's and the projector loader's logs go to Python logging; the last error is kept for a one-line refusal."""
    message = text.decode("utf-8", errors="replace").rstrip()
    if not message:
        return
    if level == 4:
        _log_errors.last = message
    log.log({4: logging.ERROR, 3: logging.WARNING}.get(level, logging.DEBUG), message)


_log_routed = False


def _route_logs() -> None:
    global _log_routed
    if not _log_routed:
        mtmd.mtmd_helper_log_set(_route_mtmd_log, ctypes.c_void_p(0))
        _log_routed = True


def _last_error() -> str:
    message: str = getattr(_log_errors, "last", "") or ""
    _log_errors.last = ""
    return message.split(": error: ", 1)[-1].splitlines()[0] if message else ""


def is_media(token: int) -> bool:
    """``token`` stands for a position of a picture or a sound, not for a token of the vocabulary."""
    return token < 0


def text_run(tokens: Sequence[int], most: int) -> list[int]:
    """The text tokens ``tokens`` starts with, up to ``most`` of them: what a step may take before a media chunk."""
    run: list[int] = []
    for token in tokens[:most]:
        if token < 0:
            break
        run.append(token)
    return run


def media_affinity(cached: Sequence[int], prompt: Sequence[int], served: int, *, idle_for: int = 0) -> int:
    """How well a slot whose cache is ``cached`` serves ``prompt``, of which it serves ``served`` tokens, for a model
    with a projector: first by the media positions it serves, then by whether it keeps the media it holds (a slot
    whose cache holds pictures the prompt does not have is taken last, so that one question about a picture in
    between does not replace another picture a conversation may come back to), then by the tokens it serves, then
    by how many jobs started elsewhere since it last started one (``idle_for``: the least recently used first)."""
    media = sum(1 for token in prompt[:served] if token < 0) if prompt and min(prompt) < 0 else 0
    keeps = not cached[served:] or min(cached[served:]) >= 0
    return (media << 48) + (int(keeps) << 47) + (min(served, (1 << 23) - 1) << 24) + min(idle_for, (1 << 24) - 1)


@dataclass(eq=False)
class MediaChunk:
    """One picture or sound of a prompt: mtmd's chunk (preprocessed, ours to free), its key (the file's sha256 and
    the chunk's place among the file's chunks), the embeddings it
    becomes (``n_tokens``) and the positions it takes (``n_pos``: as many, but fewer for M-RoPE models), and the id
    of its first position in the token list."""

    chunk: Any
    key: str
    n_tokens: int
    n_pos: int
    first_id: int

    def free(self) -> None:
        if self.chunk:
            mtmd.mtmd_input_chunk_free(self.chunk)
            self.chunk = None


class MediaSpans:
    """The media of one prompt, by the id of each one's first position."""

    def __init__(self, chunks: Sequence[MediaChunk]) -> None:
        self._by_first = {chunk.first_id: chunk for chunk in chunks}

    def at(self, token: int) -> MediaChunk | None:
        """The chunk whose first position ``token`` is (None: text, or a position within a chunk)."""
        return self._by_first.get(token)

    @property
    def n_tokens(self) -> int:
        return sum(chunk.n_tokens for chunk in self._by_first.values())

    def align(self, prompt: Sequence[int], reuse: int) -> int:
        """``reuse`` moved back to the start of the chunk it falls within, if it does: a chunk is decoded whole."""
        while 0 < reuse < len(prompt) and is_media(prompt[reuse]) and self.at(prompt[reuse]) is None:
            reuse -= 1
        return reuse

    def free(self) -> None:
        for chunk in self._by_first.values():
            chunk.free()


class _MediaIds:
    """Ids for media positions, by digest: the same bytes get the same ids while remembered, others never them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._next = 1

    def first_id(self, name: str, n_pos: int) -> int:
        with self._lock:
            key = (name, n_pos)
            found = self._ids.get(key)
            if found is None:
                found = -self._next
                self._next += n_pos
                self._ids[key] = found
                if len(self._ids) > _MAX_IDS:
                    self._ids.popitem(last=False)
            else:
                self._ids.move_to_end(key)
            return found


@dataclass
class Decoded:
    """What decoding a chunk cost: the encoder's milliseconds (0 when its embeddings were cached)."""

    encode_ms: float
    encoded: bool


class Projector:
    """A loaded projector (mtmd context) for one loaded model."""

    def __init__(self, ctx: Any, model: LlamaModel, path: Path) -> None:
        self._ctx = ctx
        self.path = path
        assert model.model is not None
        self._n_embd = int(lc.llama_model_n_embd_inp(model.model))
        self.vision = bool(mtmd.mtmd_support_vision(ctx))
        self.audio = bool(mtmd.mtmd_support_audio(ctx))
        self._ids = _MediaIds()
        self._cache: OrderedDict[str, ctypes.Array[ctypes.c_float]] = OrderedDict()
        self._cache_bytes = 0

    @classmethod
    def load(cls, spec: LoadSpec, model: LlamaModel) -> Projector:
        """``spec.mmproj`` loaded for ``model``. Raises ModelLoadError, in one line, when the file is missing or
        mtmd refuses it (a projector made for another model: its width is not the model's)."""
        path = spec.mmproj
        assert path is not None and model.model is not None
        if not path.is_file():
            raise ModelLoadError(f"projector file not found: {path}", hint="check the --mmproj path")
        _route_logs()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = spec.mmproj_offload
        params.print_timings = False
        params.n_threads = spec.threads or default_threads()
        params.media_marker = MEDIA_MARKER.encode()
        params.flash_attn_type = FLASH_ATTN_TYPES[spec.flash_attn]
        params.image_min_tokens = spec.image_min_tokens
        params.image_max_tokens = spec.image_max_tokens
        ctx = mtmd.mtmd_init_from_file(str(path).encode(), model.model, params)
        if not ctx:
            reason = _last_error() or "not a projector llama.cpp can read"
            raise ModelLoadError(
                f"cannot use the projector {path.name} with {spec.name or spec.path.name}: {reason}",
                hint="give the mmproj file made for this model (--mmproj FILE), or start without one (--no-mmproj)",
            )
        log.info("%s: projector %s loaded", spec.name or spec.path.name, path.name)
        return cls(ctx, model, path)

    @property
    def modalities(self) -> tuple[str, ...]:
        return (("vision",) if self.vision else ()) + (("audio",) if self.audio else ())

    def free(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None
        self._cache.clear()

    # --- tokenizing (any thread) ------------------------------------------------------------------------

    def tokenize(
        self, text: str, media: Sequence[MediaPart], *, add_special: bool, parse_special: bool
    ) -> tuple[list[int], MediaSpans]:
        """``text``'s tokens with each ``MEDIA_MARKER`` replaced by the ids of its media part's positions, and
        those parts' chunks. Raises InvalidRequest for a part this projector cannot take or cannot read, or a
        count of markers that is not the count of parts."""
        for index, part in enumerate(media):
            if (part.kind == "audio" and not self.audio) or (part.kind == "image" and not self.vision):
                raise InvalidRequest(
                    f"media part {index}: this model's projector takes no {part.kind}", param="messages"
                )
        markers = text.count(MEDIA_MARKER)
        if markers != len(media):
            raise InvalidRequest(
                f"the prompt has {markers} media markers ({MEDIA_MARKER}) and {len(media)} media parts",
                param="prompt",
                hint="put one marker in the text for each image or sound",
            )
        bitmaps = [self._bitmap(index, part) for index, part in enumerate(media)]
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            data = text.encode("utf-8")
            given = mtmd.mtmd_input_text()
            given.text = data
            given.text_len = len(data)
            given.add_special = add_special
            given.parse_special = parse_special
            array = (mtmd.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
            rc = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(given), array, len(bitmaps))
            if rc != 0:
                reason = _last_error() or f"mtmd_tokenize returned {rc}"
                raise InvalidRequest(f"the media could not be prepared for the model: {reason}", param="messages")
            return self._tokens(chunks, media)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, index: int, part: MediaPart) -> Any:
        buf = (ctypes.c_uint8 * len(part.data)).from_buffer_copy(part.data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buf, len(part.data), False)
        if not bitmap:
            raise InvalidRequest(
                f"media part {index} ({part.mime}, {len(part.data)} bytes) could not be decoded: the file is "
                "corrupt, truncated or of a kind llama.cpp cannot read",
                param="messages",
                hint="send a PNG, JPEG, GIF or BMP image (WAV, MP3 or FLAC for sound)",
            )
        return bitmap

    def _tokens(self, chunks: Any, media: Sequence[MediaPart]) -> tuple[list[int], MediaSpans]:
        tokens: list[int] = []
        found: list[MediaChunk] = []
        seen: dict[str, int] = {}
        n_tokens_out = ctypes.c_size_t(0)
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == _CHUNK_TEXT:
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n_tokens_out))
                tokens.extend(pointer[: n_tokens_out.value])
                continue
            # a long sound may be several chunks: each is told apart by its place among its file's chunks
            given = mtmd.mtmd_input_chunk_get_id(chunk)
            digest = given.decode() if given else media[min(len(found), len(media) - 1)].digest
            seen[digest] = seen.get(digest, -1) + 1
            key = f"{digest}#{seen[digest]}"
            n_pos = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
            first = self._ids.first_id(key, n_pos)
            found.append(
                MediaChunk(
                    mtmd.mtmd_input_chunk_copy(chunk),
                    key,
                    int(mtmd.mtmd_input_chunk_get_n_tokens(chunk)),
                    n_pos,
                    first,
                )
            )
            tokens.extend(range(first, first - n_pos, -1))
        return tokens, MediaSpans(found)

    # --- encoding and decoding (the inference thread) ---------------------------------------------------

    def decode(self, lctx: Any, chunk: MediaChunk, n_past: int, seq_id: int, n_batch: int) -> Decoded:
        """Decode ``chunk`` into ``seq_id`` at ``n_past``: its embeddings from the cache, else from the encoder.
        Raises RuntimeError when the encoder or the decode fails."""
        embeddings = self._cache.get(chunk.key)
        started = time.perf_counter()
        encoded = embeddings is None
        if embeddings is None:
            if mtmd.mtmd_encode_chunk(self._ctx, chunk.chunk) != 0:
                raise RuntimeError(_last_error() or "the projector could not encode it")
            n = chunk.n_tokens * self._n_embd
            embeddings = (ctypes.c_float * n)()
            ctypes.memmove(embeddings, mtmd.mtmd_get_output_embd(self._ctx), n * ctypes.sizeof(ctypes.c_float))
            self._remember(chunk.key, embeddings)
        else:
            self._cache.move_to_end(chunk.key)
        encode_ms = (time.perf_counter() - started) * 1000.0 if encoded else 0.0
        new_n_past = lc.llama_pos(0)
        rc = mtmd.mtmd_helper_decode_image_chunk(
            self._ctx,
            lctx,
            chunk.chunk,
            embeddings,
            n_past,
            seq_id,
            n_batch,
            ctypes.byref(new_n_past),
            _NO_CALLBACK,
            None,
        )
        if rc != 0:
            raise RuntimeError(_last_error() or f"llama.cpp could not decode it (code {rc})")
        return Decoded(encode_ms, encoded)

    def _remember(self, key: str, embeddings: ctypes.Array[ctypes.c_float]) -> None:
        self._cache[key] = embeddings
        self._cache_bytes += ctypes.sizeof(embeddings)
        while self._cache_bytes > EMBEDDING_CACHE_BYTES and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._cache_bytes -= ctypes.sizeof(dropped)


def without_shifts(model: LlamaModel) -> None:
    """A model with a projector neither shifts its context nor moves cached runs, as llama-server's: positions of a
    picture's embeddings are not a token's to move."""
    if model.context_shift or model.cache_reuse:
        log.info("a model with a projector neither shifts its context nor reuses moved runs of its cache")
    model.context_shift = False
    model.cache_reuse = 0


async def media_prompt(
    projector: Projector | None, model: LlamaModel, request: GenerationRequest, *, name: str, longest_token: int
) -> tuple[list[int], MediaSpans]:
    """``request``'s prompt as tokens with its pictures and sounds in their places, for the model ``name`` whose
    longest token is ``longest_token`` characters. Raises InvalidRequest when the model has no projector, for media
    it cannot read, and for a prompt of token ids or one that ends with a picture (its reply starts from a token's
    logits); ContextLengthExceeded for a prompt that cannot fit whatever it says."""
    kinds = sorted({part.kind for part in request.media})
    if projector is None:
        raise InvalidRequest(
            f"model '{name}' cannot take {' or '.join(kinds)} input: it was loaded without a projector",
            param="messages",
            hint="serve it with its mmproj file (--mmproj FILE), or send text only",
        )
    if request.tokens:
        raise InvalidRequest("a prompt of token ids cannot carry media", param="prompt")
    fewest = -(-len(request.prompt) // longest_token)
    if fewest >= model.n_ctx:
        raise ContextLengthExceeded(n_prompt=fewest, n_ctx=model.n_ctx, at_least=True)
    prompt, spans = await asyncio.to_thread(
        projector.tokenize,
        request.prompt,
        request.media,
        add_special=request.add_special,
        parse_special=request.parse_special,
    )
    if prompt and is_media(prompt[-1]):
        spans.free()
        raise InvalidRequest("the prompt ends with a picture or sound: put text after it", param="prompt")
    return prompt, spans
