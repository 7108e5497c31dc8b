"""A thin, typed wrapper over llama.cpp's C API for one model and its context (through llama-cpp-python).

Only the inference thread calls the context; tokenizing and metadata reads are safe from any thread.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import DeviceUse, FimTokens, LoadSpec, ModelFacts
from localinfer.backends.llamacpp import devices as device_choice
from localinfer.backends.llamacpp.rpc import devices as rpc
from localinfer.backends.llamacpp.step_limits import output_limits
from localinfer.errors import ModelLoadError
from localinfer.models.metadata.thinking import thinking_markers
from localinfer.types import DEFAULT_KV_CACHE_TYPE, KV_CACHE_BYTES

log = logging.getLogger(__name__)

# llama-server's --pooling names and llama.cpp's types. A model that states no pooling embeds by the mean.
POOLING_TYPES: dict[str, int] = {
    "none": lc.LLAMA_POOLING_TYPE_NONE,
    "mean": lc.LLAMA_POOLING_TYPE_MEAN,
    "cls": lc.LLAMA_POOLING_TYPE_CLS,
    "last": lc.LLAMA_POOLING_TYPE_LAST,
    "rank": lc.LLAMA_POOLING_TYPE_RANK,
}
_POOLING_NAMES = {value: name for name, value in POOLING_TYPES.items()}

_backend_ready = False


@lc.llama_log_callback  # type: ignore[untyped-decorator]
def _route_llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """llama.cpp logs go to Python logging (device_choice.log_level), never to fd 2."""
    message = text.decode("utf-8", errors="replace").rstrip()
    if message:
        log.log(device_choice.log_level(level, message), message)


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        lc.llama_log_set(_route_llama_log, ctypes.c_void_p(0))
        lc.llama_backend_init()
        _backend_ready = True


def _load_vocab_only(path: Path) -> Any:
    """The GGUF at ``path`` loaded without its weights (llama.cpp's vocab_only: a ``llama_model_p``), to be freed by
    the caller. Raises ModelLoadError when the file is missing or llama.cpp cannot read it."""
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}", hint="check the path, or 'localinfer ls'")
    _init_backend()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadError(
            f"llama.cpp could not read the vocabulary of {path}", hint="check that the file is a complete GGUF"
        )
    return model


@contextmanager
def vocabulary(path: Path) -> Iterator[lc.llama_vocab_p]:
    """The vocabulary of the GGUF at ``path``, read without its weights (llama.cpp's vocab_only). Raises
    ModelLoadError when llama.cpp cannot read it."""
    model = _load_vocab_only(path)
    try:
        yield lc.llama_model_get_vocab(model)
    finally:
        lc.llama_model_free(model)


def default_threads() -> int:
    """One thread per physical core: hyperthreads slow matrix work down."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


# ggml's numbers for the KV cache types (ggml.h's enum ggml_type)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


# Flash attention: "auto" is llama.cpp's choice, on wherever the device can run it, a CPU included, as llama-server
# does. On a CPU, plain attention (a matrix product, softmax, a matrix product) generates within 15 % of it: llama-bench
# decodes SmolLM2 Q4_1 on 2 cores at 64.8 tok/s without it 1,000 tokens into a context and 55.1 with it, 38.3 against
# 39.3 at 3,000 (2.5-3.7x faster only in a build with AVX512-FP16); Gemma 3 270M the same either way
# (docs/benchmarks-cpu-decoding.md). It is not the default because plain attention's results depend on how many of
# a sequence's tokens a step computes (another matrix kernel), so a step
# that verifies a draft changes greedy text (test_attention.py), while flash attention computes each token's row
# alone up to 256 cells (past that a lone token takes its split-KV kernel: test_step_width.py); so with it off,
# prompt lookup is off unless asked for (Settings.speculation). Its attention scores also take memory that grows
# with the context (SmolLM2 at 8,192 tokens: a compute buffer of 166 MiB, not 22).
FLASH_ATTN_TYPES = {
    "auto": lc.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": lc.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def check_attention(spec: LoadSpec) -> None:
    """Refuse plain attention with a quantized value cache: llama.cpp reads one only in flash attention."""
    if spec.flash_attn == "off" and _quantized(spec.cache_type_v):
        raise ModelLoadError(
            f"a {spec.cache_type_v} value cache needs flash attention, and --flash-attn is off",
            hint="drop --flash-attn off, or keep the values in f16 (--cache-type-v f16)",
        )


def _quantized(cache_type: str) -> bool:
    return cache_type not in ("f32", "f16", "bf16")


def kv_bytes_per_token(model: lc.llama_model_p, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes of keys and values one token takes in a cache of these types, from the model's shape."""
    arch = _meta(model, "general.architecture") or ""
    n_head = max(int(lc.llama_model_n_head(model)), 1)
    default_dim = int(lc.llama_model_n_embd(model)) // n_head
    key_dim = int(_meta(model, f"{arch}.attention.key_length") or default_dim)
    value_dim = int(_meta(model, f"{arch}.attention.value_length") or default_dim)
    n_head_kv = int(lc.llama_model_n_head_kv(model))
    per_layer = key_dim * KV_CACHE_BYTES[type_k] + value_dim * KV_CACHE_BYTES[type_v]
    return int(int(lc.llama_model_n_layer(model)) * n_head_kv * per_layer)


def auto_parallel(per_slot: int, *, most: int = 4) -> int:
    """As many slots (up to ``most``) as fit in a quarter of the free memory, each taking ``per_slot`` bytes of
    KV cache (a whole context long)."""
    import psutil

    budget = psutil.virtual_memory().available // 4
    slots = max(1, min(most, budget // max(per_slot, 1)))
    log.debug("%d slots: %d MiB of KV cache each, %d MiB budget", slots, per_slot >> 20, budget >> 20)
    return int(slots)


def _meta(model: lc.llama_model_p, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, 256)
    if n < 0:
        return None
    if n >= 256:
        buf = ctypes.create_string_buffer(n + 1)
        lc.llama_model_meta_val_str(model, key.encode(), buf, n + 1)
    return buf.value.decode("utf-8", errors="replace")


@dataclass
class LlamaModel:
    """A loaded model, its vocabulary and one context with ``n_seq_max`` sequences."""

    model: lc.llama_model_p | None
    vocab: lc.llama_vocab_p
    ctx: lc.llama_context_p | None
    n_ctx: int
    n_batch: int
    n_seq_max: int
    threads: int = 0
    gpu_layers: int = 0
    n_ubatch: int = 512  # what llama.cpp computes at once: a step's prompt tokens, so dispatch runs between them
    cache_types: tuple[str, str] = (DEFAULT_KV_CACHE_TYPE, DEFAULT_KV_CACHE_TYPE)  # keys', values' element types
    pooling: str = ""  # the pooling asked for in place of the stated one (llama-server's --pooling); "": the stated
    devices: tuple[DeviceUse, ...] = ()  # what it holds on each device, when placed over RPC workers or a split
    cache_reuse: int = 0  # runs of at least so many cached tokens are moved rather than recomputed (kv_shift.py)
    scratch_seq: int = -1  # the sequence where moved runs wait for the tokens before them (-1: none; kv_shift.py)
    context_shift: bool = False
    last_token_alone: bool = True  # a prompt's last token computed in a step of its own, as a cached one's (step_loop)
    draft_room: int = 0  # the most draft tokens a slot's step may verify: the context holds their logits (step_limits)
    # each generated token's bytes, read once from llama.cpp (a ctypes call and a buffer each time cost ~10 us a step)
    _pieces: dict[int, bytes] = field(default_factory=dict, repr=False)

    @property
    def n_swa(self) -> int:
        """The sliding window of the model's attention, 0 if it has none."""
        return int(lc.llama_model_n_swa(self.model)) if self.model is not None else 0

    @classmethod
    def vocab_only(cls, path: Path) -> LlamaModel:
        """``path``'s vocabulary and metadata without its weights or a context (llama.cpp's vocab_only), to
        tokenize and read facts in a process that does not run the model. Raises ModelLoadError."""
        model = _load_vocab_only(path)
        return cls(model, lc.llama_model_get_vocab(model), None, 0, 0, 1)

    @classmethod
    def load(cls, spec: LoadSpec) -> LlamaModel:
        """Load ``spec.path``. Raises ModelLoadError if the file is missing or llama.cpp rejects it."""
        path = Path(spec.path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}", hint="check the path, or 'localinfer ls'")
        check_attention(spec)
        _init_backend()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = spec.gpu_layers if spec.gpu_layers >= 0 else 999
        placed = rpc.placement(spec.rpc, spec.tensor_split)
        if placed is not None:  # RPC workers or a tensor split: the devices and shares as placed, kept until loaded
            keep = placed.arrays(int(lc.llama_max_devices()))
            mparams.devices = ctypes.cast(keep[0], ctypes.c_void_p)
            mparams.tensor_split = keep[1]
        elif spec.devices is not None or spec.gpu_layers == 0:  # --device, or no layer offloaded: no other device
            chosen = device_choice.resolve(spec.devices or ())  # (one unused still holds a context: hundreds of MiB)
            mparams.devices = ctypes.cast(chosen, ctypes.c_void_p)
        model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise ModelLoadError(
                f"llama.cpp could not load {path}: the file is corrupt, truncated or of an unsupported kind",
                hint="pull the model again, or check that the file is a complete GGUF",
            )
        vocab = lc.llama_model_get_vocab(model)
        n_ctx_train = int(lc.llama_model_n_ctx_train(model))
        n_ctx = spec.ctx_size or min(n_ctx_train, spec.ctx_cap)
        threads = spec.threads or default_threads()
        per_token = kv_bytes_per_token(model, spec.cache_type_k, spec.cache_type_v)
        parallel = spec.parallel or auto_parallel(per_token * n_ctx)
        cparams = lc.llama_context_default_params()
        # Each slot gets a KV stream of its own, the whole context long: a request may use all of the
        # context whatever the number of slots. One unified buffer would save memory, but then a sequence's
        # cells interleave with others' and attention sums them in another order, so greedy output would
        # depend on what else is running (llama-server --kv-unified shows the same).
        # With one slot, a sequence more holds cached runs while the new tokens before them are computed
        # (kv_shift.py): its cells must be in the slot's stream, so the cache is one stream (the same buffer).
        scratch = spec.cache_reuse > 0 and parallel == 1 and lc.llama_model_n_swa(model) == 0
        cparams.n_ctx = n_ctx * parallel
        cparams.n_batch = spec.batch_size
        cparams.n_ubatch = min(spec.ubatch_size, spec.batch_size)
        cparams.n_seq_max = parallel + 1 if scratch else parallel
        limits = output_limits(spec, parallel=parallel, n_seq=cparams.n_seq_max)
        cparams.n_outputs_max = limits.outputs  # logits for the slots' tokens and drafts, not a micro-batch's
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = scratch
        if spec.gpu_layers == 0:  # the CPU alone: no KV cache on a GPU, and no large batches sent there to compute
            cparams.offload_kqv = False  # (llama.cpp's op offload kept 127 MiB on an H200 with every layer on the
            cparams.op_offload = False  # CPU: docs/benchmarks.md)
        cparams.offload_kqv = cparams.offload_kqv and spec.kv_offload  # llama-server's --no-kv-offload
        cparams.op_offload = cparams.op_offload and spec.op_offload  # --no-op-offload
        # A sliding-window cache holds only the window (plus a batch), not the whole context; the step loop
        # checkpoints it so prefix reuse still works (llama-server does the same; full size costs 2-5x memory).
        cparams.swa_full = False
        cparams.no_perf = True
        # A quantized value cache needs flash attention: with "auto" llama.cpp turns it on, or refuses where the
        # model or device cannot use it ("off" is refused before: check_attention).
        cparams.type_k = GGML_TYPES[spec.cache_type_k]
        cparams.type_v = GGML_TYPES[spec.cache_type_v]
        cparams.flash_attn_type = FLASH_ATTN_TYPES[spec.flash_attn]
        ctx = lc.llama_init_from_model(model, cparams)
        if not ctx:
            lc.llama_model_free(model)
            if (spec.cache_type_k, spec.cache_type_v) != (DEFAULT_KV_CACHE_TYPE, DEFAULT_KV_CACHE_TYPE):
                raise ModelLoadError(
                    f"llama.cpp could not create a KV cache of {spec.cache_type_k} keys and {spec.cache_type_v} "
                    f"values for {path} (a quantized cache needs flash attention and head sizes that divide into "
                    "its blocks)",
                    hint="start without --cache-type-k/--cache-type-v, or try q8_0 for both",
                )
            raise ModelLoadError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {path}",
                hint="try a smaller context with --ctx-size",
            )
        log.debug(
            "loaded %s: %d slots of %d tokens, %d threads, KV cache %s/%s, flash attention %s",
            path,
            parallel,
            n_ctx,
            threads,
            spec.cache_type_k,
            spec.cache_type_v,
            spec.flash_attn,
        )
        # llama.cpp rounds each sequence's context up to a multiple of 256 cells (-c 256 -np 4: 256 a slot, as in
        # llama-server): a slot may use what it holds
        n_ctx = int(lc.llama_n_ctx_seq(ctx))
        n_layer = int(lc.llama_model_n_layer(model))
        gpu = lc.llama_supports_gpu_offload() and spec.devices != ()
        offloaded = min(mparams.n_gpu_layers, n_layer + 1) if gpu else 0
        if placed is not None:
            log.info("%s: %s", spec.name or path.name, placed.describe(n_layer, offloaded))
        devices = placed.memory(path, n_layer, offloaded, per_token * n_ctx * parallel) if placed else ()
        n_batch = int(lc.llama_n_batch(ctx))  # llama.cpp caps it at the context
        n_ubatch = int(lc.llama_n_ubatch(ctx))
        return cls(
            model,
            vocab,
            ctx,
            n_ctx,
            n_batch,
            parallel,
            threads=threads,
            gpu_layers=offloaded,
            devices=devices,
            n_ubatch=n_ubatch,
            cache_types=(spec.cache_type_k, spec.cache_type_v),
            pooling=spec.pooling,
            cache_reuse=spec.cache_reuse,
            scratch_seq=parallel if scratch else -1,
            context_shift=spec.context_shift,
            last_token_alone=spec.last_token_alone,
            draft_room=limits.draft_room,
        )

    def free(self) -> None:
        if self.ctx:
            lc.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lc.llama_model_free(self.model)
            self.model = None

    # --- vocabulary -------------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        if special:
            return self._piece(token, special=True)
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token, special=False)
        return piece

    def _piece(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def longest_token(self) -> int:
        """The most bytes one token stands for, control tokens' text included: a text of more than ``n`` times
        this many bytes has more than ``n`` tokens, whatever it says. Reads the whole vocabulary (once, at load)."""
        n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        return max((len(self.token_bytes(token, special=True)) for token in range(n_vocab)), default=1) or 1

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends a generation: a set lookup each step (a ctypes call lets go of the GIL, and the
        HTTP side may keep it a while)."""
        return token in self._eog

    def eog_ids(self) -> tuple[int, ...]:
        """The end-of-generation tokens, in id order."""
        return tuple(sorted(self._eog))

    @functools.cached_property
    def _eog(self) -> frozenset[int]:
        """The end-of-generation ids, read from the whole vocabulary once (facts() does it at load)."""
        n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        return frozenset(t for t in range(n_vocab) if lc.llama_vocab_is_eog(self.vocab, t))

    # --- metadata ---------------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        return _meta(self.model, key) if self.model is not None else None

    def stated_pooling(self) -> int | None:
        """The pooling asked for at load (``--pooling``), else the one the GGUF states (``<arch>.pooling_type``),
        as llama.cpp's LLAMA_POOLING_TYPE_*; None when neither says (a generative model)."""
        if self.pooling:
            return POOLING_TYPES[self.pooling]
        stated = self.meta(f"{self.meta('general.architecture')}.pooling_type")
        return int(stated) if stated is not None and stated.lstrip("-").isdigit() else None

    def has_rank_head(self) -> bool:
        """The GGUF states rank pooling: a reranker by its file, not only by ``--pooling rank``."""
        return self.meta(f"{self.meta('general.architecture')}.pooling_type") == str(lc.LLAMA_POOLING_TYPE_RANK)

    def facts(self) -> ModelFacts:
        template = lc.llama_model_chat_template(self.model, None)
        bos = lc.llama_vocab_bos(self.vocab)
        eos = lc.llama_vocab_eos(self.vocab)
        chatml = self.tokenize("<|im_start|>", add_special=False, parse_special=True)
        return ModelFacts(
            n_ctx=self.n_ctx,
            n_ctx_train=int(lc.llama_model_n_ctx_train(self.model)),
            chat_template=template.decode("utf-8", errors="replace") if template else None,
            bos_token=self.token_bytes(bos, special=True).decode("utf-8", errors="replace") if bos >= 0 else "",
            eos_token=self.token_bytes(eos, special=True).decode("utf-8", errors="replace") if eos >= 0 else "",
            add_bos=bool(lc.llama_vocab_get_add_bos(self.vocab)),
            has_chatml_tokens=len(chatml) == 1 and bool(lc.llama_vocab_is_control(self.vocab, chatml[0])),
            architecture=self.meta("general.architecture") or "unknown",
            n_params=int(lc.llama_model_n_params(self.model)),
            n_slots=self.n_seq_max,
            threads=self.threads,
            gpu_layers=self.gpu_layers,
            model_bytes=int(lc.llama_model_size(self.model)),
            fim=self.fim_tokens(),
            bos_id=int(bos),
            n_batch=self.n_batch,
            reranker=self.stated_pooling() == lc.LLAMA_POOLING_TYPE_RANK,
            eog_ids=self.eog_ids(),
            cache_type_k=self.cache_types[0],
            cache_type_v=self.cache_types[1],
            pooling=self.pooling or _POOLING_NAMES.get(self.stated_pooling() or lc.LLAMA_POOLING_TYPE_MEAN, "mean"),
            thinking=thinking_markers(template.decode("utf-8", errors="replace") if template else None, self.is_token),
            devices=self.devices,
        )

    def is_token(self, text: str) -> bool:
        """``text`` is one token of the vocabulary, written as that text in generated output."""
        tokens = self.tokenize(text, add_special=False, parse_special=True)
        return len(tokens) == 1 and self.token_bytes(tokens[0]) == text.encode("utf-8")

    def fim_tokens(self) -> FimTokens:
        """The fill-in-the-middle tokens llama.cpp read from the metadata (or found by their text); -1 where none."""
        v = self.vocab
        return FimTokens(
            pre=int(lc.llama_vocab_fim_pre(v)),
            suf=int(lc.llama_vocab_fim_suf(v)),
            mid=int(lc.llama_vocab_fim_mid(v)),
            pad=int(lc.llama_vocab_fim_pad(v)),
            rep=int(lc.llama_vocab_fim_rep(v)),
            sep=int(lc.llama_vocab_fim_sep(v)),
        )
