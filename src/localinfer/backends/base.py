"""What every backend offers the engine. Backends never import the engine or the app."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from localinfer.defaults import BATCH_SIZE, CACHE_REUSE, CTX_CAP, DRAFT_MAX, FLASH_ATTN, MAX_QUEUE, UBATCH_SIZE
from localinfer.errors import InvalidRequest, NotSupported
from localinfer.types import (
    DEFAULT_KV_CACHE_TYPE,
    GenerationRequest,
    MediaPart,
    ThinkingMarkers,
    TokenStream,
)

LORA_HINT = "LoRA adapters are applied by the llama.cpp backend: serve a GGUF model with --lora FILE"
SLOT_FILES_HINT = "slots are saved and restored by the llama.cpp backend: serve a GGUF model"


class RelayedAnswer(Protocol):
    """An engine process's answer as it came: consume ``body`` to the end, or ``aclose`` it."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def body(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


class Relay(Protocol):
    """What a backend running its model in an engine process with its own OpenAI server offers the server: one
    request forwarded as it is (the engine's own fields all work), its answer streamed back as sent."""

    async def forward(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> RelayedAnswer: ...


@dataclass(frozen=True)
class Capabilities:
    formats: tuple[str, ...]
    grammar: bool = False  # holds output to a JSON schema (ResponseFormat json_object, json_schema)
    gbnf: bool = False  # holds output to a GBNF grammar (ResponseFormat grammar)
    logit_bias: bool = False  # adds SamplingParams.logit_bias to the logits
    batching: bool = False
    token_prompts: bool = False  # takes a prompt as token ids (GenerationRequest.tokens)
    kv_cache_types: bool = False  # keeps its KV cache in the types LoadSpec.cache_type_k/v name
    speculative: bool = False  # drafts tokens and verifies them in one step (LoadSpec.speculation)
    thinking_budget: bool = False  # ends a reasoning model's thinking at a budget (GenerationOptions.thinking_budget)
    # the optional operations: the engine checks these before it asks, and refuses what a backend does not do
    tokenize: bool = False  # tokenize, detokenize (and so fill-in-the-middle prompts)
    embed: bool = False
    rerank: bool = False
    slot_files: bool = False  # save_slot, restore_slot, erase_slot (llama-server's POST /slots/{id})
    lora: bool = False  # LoRA adapters (LoadSpec.lora, GenerationOptions.lora, lora_adapters, set_lora_scales)


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter loaded with a model (llama-server's ``--lora``/``--lora-scaled``): its GGUF file and the
    scale it applies at when a request names no adapters (0: loaded, not applied)."""

    path: Path
    scale: float = 1.0


@dataclass(frozen=True)
class LoraState:
    """One adapter of a loaded model as llama-server's ``GET /lora-adapters`` lists it: its id (its place in the
    list), file, and the scale requests that name no adapters are served with now."""

    id: int
    path: Path
    scale: float


@dataclass(frozen=True)
class LoadSpec:
    """How to load one model. ``ctx_size == 0`` means the model's trained context, capped at ``ctx_cap``."""

    path: Path
    name: str = ""  # what clients call the model (an engine process serves it under this name)
    ctx_size: int = 0
    ctx_cap: int = CTX_CAP
    threads: int = 0
    batch_size: int = BATCH_SIZE  # llama.cpp's n_batch: what a step may take, and what FIM prompts are cut to
    ubatch_size: int = UBATCH_SIZE  # n_ubatch: what is computed at once, the compute buffers' size
    parallel: int = 0
    max_queue: int = MAX_QUEUE
    gpu_layers: int = 0
    provider: str | None = None  # the ONNX Runtime execution provider (CUDAExecutionProvider...); None: the CPU
    cache_type_k: str = DEFAULT_KV_CACHE_TYPE  # the KV cache's element types (types.KV_CACHE_BYTES); llama.cpp only
    cache_type_v: str = DEFAULT_KV_CACHE_TYPE
    flash_attn: str = FLASH_ATTN  # llama.cpp's flash attention: "on", "off", or "auto" (on where the device runs it)
    # how generation drafts tokens to verify in one step: "ngram" (prompt lookup), "draft" (draft_path), "off"
    speculation: str = "ngram"
    draft_path: Path | None = None  # the draft model of speculation "draft": a small GGUF of the same vocabulary
    draft_max: int = DRAFT_MAX  # most tokens a draft has (as llama-server's ngram-mod; a step stays under 64)
    draft_min: int = 0  # a shorter draft is not verified
    extra_args: tuple[str, ...] = ()  # passed as-is to an engine run as a process (vLLM: --tensor-parallel-size 2)
    tensor_parallel: int = 0  # GPUs an engine process splits the model over (its own flag for it); 0: its default
    pooling: str = ""  # llama-server's --pooling for embeddings: mean, cls, last, rank, none; "": as the file states
    cache_reuse: int = CACHE_REUSE  # runs of so many cached tokens or more are moved, not recomputed (0: off)
    context_shift: bool = False  # a generation at the end of its context drops the oldest half and goes on
    last_token_alone: bool = True  # a prompt's last token in a step of its own: greedy text the same cold and cached
    devices: tuple[str, ...] | None = None  # the devices layers may go to (llama.cpp's names); (): none; None: all
    kv_offload: bool = True  # offloaded layers' KV cache on their device (llama-server's --no-kv-offload: False)
    op_offload: bool = True  # CPU layers' large batches computed on a GPU (llama-server's --no-op-offload: False)
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers (host:port) whose devices take offloaded layers
    tensor_split: tuple[float, ...] = ()  # shares of the offloaded layers per device, RPC workers first; (): by memory
    lora: tuple[LoraAdapter, ...] = ()  # LoRA adapters loaded with the model, in id order (llama.cpp only)
    mmproj: Path | None = None  # the projector (mmproj GGUF) that lets the model see or hear (llama.cpp's mtmd)
    mmproj_offload: bool = True  # the projector computes on the GPU where there is one (llama-server's default)
    image_min_tokens: int = -1  # fewest and most tokens an image becomes, for projectors of dynamic resolution (-1:
    image_max_tokens: int = -1  # as the projector's file says)


@dataclass(frozen=True)
class FimTokens:
    """A model's fill-in-the-middle token ids, from its metadata; -1 where it declares none. ``rep`` and ``sep``
    (repository name and file separator) give the repository-level layout with other files' text."""

    pre: int = -1
    suf: int = -1
    mid: int = -1
    pad: int = -1
    rep: int = -1
    sep: int = -1

    @property
    def can_infill(self) -> bool:
        """The prefix, suffix and middle tokens are all there: a FIM prompt can be built."""
        return self.pre >= 0 and self.suf >= 0 and self.mid >= 0


@dataclass(frozen=True)
class DeviceUse:
    """One device a loaded model's weights and KV cache are on: ``name`` as llama.cpp logs it (CPU, CUDA0, RPC0),
    ``where`` it is (``local``, or the RPC worker's ``host:port``), and the bytes the model holds there."""

    name: str
    where: str
    size_bytes: int


@dataclass(frozen=True)
class WorkerHealth:
    """An RPC worker a loaded model's layers are on: ``ok``, or ``lost`` (it stopped answering; the model serves
    again once it is back)."""

    endpoint: str
    state: str


@dataclass(frozen=True)
class ModelFacts:
    """What the engine needs to know about a loaded model to build prompts for it, all from its metadata."""

    n_ctx: int
    n_ctx_train: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool
    has_chatml_tokens: bool
    architecture: str
    n_params: int
    n_slots: int = 1
    threads: int = 0  # CPU threads decoding
    gpu_layers: int = 0  # layers offloaded to a GPU (the output layer counts as one)
    model_bytes: int = 0  # the weights' size in memory (a draft model's included: llama.cpp)
    fim: FimTokens = FimTokens()  # none for backends that do not read them (ONNX, vLLM)
    bos_id: int = -1  # the BOS token's id, -1 when the model has none
    n_batch: int = 512  # tokens one decode takes at most (llama-server's --batch-size; sizes the FIM prompt)
    reranker: bool = False  # its metadata states rank pooling: it scores query and document pairs, nothing else
    eog_ids: tuple[int, ...] = ()  # its end-of-generation tokens (what llama-server's ignore_eos bans)
    cache_type_k: str = ""  # the element types its KV cache is kept in; "": the backend's own (ONNX, vLLM)
    cache_type_v: str = ""
    pooling: str = "mean"  # how its embeddings are pooled (mean, cls, last, rank; none: one vector per token)
    thinking: ThinkingMarkers | None = None  # how it writes its thinking, for a reasoning model
    devices: tuple[DeviceUse, ...] = ()  # where its memory is, per device (llama.cpp); (): not reported
    modalities: tuple[str, ...] = ()  # what it takes besides text through its projector: vision, audio


@dataclass(frozen=True)
class SlotUsage:
    """How busy a backend is: requests generating, free slots, and requests waiting for a slot."""

    processing: int = 0
    idle: int = 0
    waiting: int = 0

    def __add__(self, other: SlotUsage) -> SlotUsage:
        return SlotUsage(self.processing + other.processing, self.idle + other.idle, self.waiting + other.waiting)


@dataclass
class DecodeStats:
    """What a backend's decode loop has done since it loaded, as llama-server's ``/metrics`` counts it. Cumulative;
    written only by the inference thread, read from any (each field on its own, so a read may straddle a step)."""

    decodes: int = 0  # llama_decode calls of the step loop (a draft model's own are not counted)
    busy_slots: int = 0  # summed over those decodes: the slots holding a request at each
    max_tokens: int = 0  # the most tokens a slot's cache has held after a decode (prompt and generated)
    prompt_tokens: int = 0  # prompt tokens computed (those reused from a cache are not)
    prompt_seconds: float = 0.0  # the time of the decodes that computed them
    cached_tokens: int = 0  # prompt tokens reused from a slot's cache
    predicted_tokens: int = 0  # tokens sampled by requests that have ended, an end-of-generation token included
    predicted_steps: int = 0  # of those, all but each request's first (which comes with its prompt's last decode)
    predicted_seconds: float = 0.0  # from each ended request's first sampled token to its last
    drafted: int = 0  # speculative decoding: draft tokens verified
    draft_accepted: int = 0  # of those, the ones kept
    draft_steps: int = 0  # verifications (steps that verified a draft)
    accepted_at: list[int] = dataclasses.field(default_factory=list)  # kept draft tokens by place in their draft
    media_tokens: int = 0  # image and sound embeddings decoded (projector models; not in prompt_tokens)
    encode_seconds: float = 0.0  # the projector's time encoding them

    def decoded(self, *, busy: int, longest: int, prompt_tokens: int, seconds: float, counted: bool = True) -> None:
        """One decode, with ``busy`` slots holding a request and ``prompt_tokens`` of prompt (taking ``seconds``);
        not ``counted`` among the decodes when llama-server would have made none (a prompt's last token alone)."""
        if counted:
            self.decodes += 1
            self.busy_slots += busy
        self.max_tokens = max(self.max_tokens, longest)
        if prompt_tokens:
            self.prompt_tokens += prompt_tokens
            self.prompt_seconds += seconds

    def media(self, tokens: int, encode_seconds: float) -> None:
        """A picture or sound of ``tokens`` embeddings decoded, its encoding taking ``encode_seconds``."""
        self.media_tokens += tokens
        self.encode_seconds += encode_seconds

    def ended(self, sampled: int, seconds: float) -> None:
        """A request ended having sampled ``sampled`` tokens, ``seconds`` from its first to its last."""
        if sampled:
            self.predicted_tokens += sampled
            self.predicted_steps += sampled - 1
            self.predicted_seconds += seconds

    def verified(self, drafted: int, accepted: int, places: int) -> None:
        """A draft of ``drafted`` tokens verified, its first ``accepted`` kept; drafts have at most ``places``."""
        self.drafted += drafted
        self.draft_accepted += accepted
        self.draft_steps += 1
        if len(self.accepted_at) < places:
            self.accepted_at.extend([0] * (places - len(self.accepted_at)))
        for i in range(min(accepted, len(self.accepted_at))):
            self.accepted_at[i] += 1


@dataclass(frozen=True)
class SlotInfo:
    """One slot of a backend that has them (llama-server's ``/slots``): its context, whether a request holds it,
    the tokens in its cache, and the prompt and generated tokens of the request it serves: whether a line was
    written, and how many more it may take (-1: no limit)."""

    id: int
    n_ctx: int
    is_processing: bool
    n_cached: int = 0
    n_prompt: int = 0
    n_decoded: int = 0
    has_new_line: bool = False
    n_remain: int = -1


@dataclass(frozen=True)
class SlotFile:
    """A slot's cache saved to a file or restored from one: its tokens, the file's bytes, the milliseconds it took."""

    id_slot: int
    n_tokens: int
    n_bytes: int
    ms: float


@dataclass(frozen=True)
class TokenPiece:
    """A token id and the bytes it stands for (a piece may be part of a UTF-8 character)."""

    id: int
    piece: bytes


@dataclass(frozen=True)
class EmbeddingResult:
    """One pooled vector per input, in the inputs' order, and the tokens each input was embedded from (after
    truncation, where it was asked for). A model served with pooling ``none`` gives no pooled vectors but one
    vector per token of each input, in ``token_vectors``."""

    vectors: tuple[tuple[float, ...], ...]
    n_tokens: tuple[int, ...]
    token_vectors: tuple[tuple[tuple[float, ...], ...], ...] = ()

    @property
    def prompt_tokens(self) -> int:
        return sum(self.n_tokens)


EmbeddingInput = str | Sequence[int]  # a text, or the token ids of one


@dataclass(frozen=True)
class RerankResult:
    """One relevance score per document, in the documents' order (the model's own number: higher is more
    relevant, on no fixed scale), and the tokens each query and document pair was scored from."""

    scores: tuple[float, ...]
    n_tokens: tuple[int, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(self.n_tokens)


class Backend(ABC):
    """One loaded model. ``generate`` streams chunks; closing the iterator early aborts the request."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @abstractmethod
    async def load(self, spec: LoadSpec) -> None:
        """Load the model. Raises ModelLoadError when the file cannot be loaded."""

    def preflight(self, spec: LoadSpec) -> None:
        """Refuse now, before any weights are read, a ``spec`` this backend can already tell will not load (a
        command line's mistake reported at start, not at the first request). Raises ModelLoadError; by default
        nothing is checked."""
        return None

    @property
    @abstractmethod
    def facts(self) -> ModelFacts:
        """Facts about the loaded model; only valid after ``load``."""

    @abstractmethod
    def generate(self, request: GenerationRequest) -> TokenStream:
        """Stream the generation. Raises InvalidRequest subclasses before the first chunk for bad requests."""

    @abstractmethod
    async def unload(self) -> None:
        """Stop generating, fail what is in flight, and free the model."""

    @abstractmethod
    def slot_usage(self) -> SlotUsage:
        """How many requests are generating and waiting right now."""

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text`` as the model's token ids. Raises InvalidRequest where the backend cannot say."""
        raise InvalidRequest(f"tokenizing is not supported by the {self.name} backend")

    async def count_media_prompt(self, text: str, media: Sequence[MediaPart], *, add_special: bool) -> int:
        """How many tokens ``text`` is with ``media`` in place of its media markers. Raises InvalidRequest where
        the model takes no media."""
        raise InvalidRequest(f"images and sounds are not supported by the {self.name} backend", param="messages")

    async def detokenize(self, tokens: Sequence[int]) -> list[TokenPiece]:
        """Each of ``tokens`` with the bytes it stands for. Raises InvalidRequest for an id outside the
        vocabulary, or where the backend cannot say."""
        raise InvalidRequest(f"detokenizing is not supported by the {self.name} backend")

    async def embed(
        self, inputs: Sequence[EmbeddingInput], *, normalize: bool, truncate: bool = False
    ) -> EmbeddingResult:
        """One vector per input, pooled as the model's metadata says (mean pooling for a model that states none),
        L2-normalised when ``normalize``. An input longer than the context is cut to it when ``truncate``, else
        refused. Raises InvalidRequest for an empty input or a token id outside the vocabulary,
        ContextLengthExceeded for an input past the context, and InvalidRequest where the backend cannot embed."""
        raise InvalidRequest(f"this backend ({self.name}) does not compute embeddings", param="model")

    async def rerank(self, query: str, documents: Sequence[str]) -> RerankResult:
        """Each document's relevance to ``query``, as a reranker (a model whose metadata states rank pooling)
        scores the pair. Raises InvalidRequest for a pair with no tokens, ContextLengthExceeded for a pair past
        the context, and InvalidRequest where the model or the backend cannot rerank."""
        raise InvalidRequest(f"this backend ({self.name}) does not rerank", param="model")

    def slots(self) -> list[SlotInfo]:
        """What each slot does now; empty for a backend without slots of its own."""
        return []

    async def save_slot(self, id_slot: int, path: Path) -> SlotFile:
        """Write slot ``id_slot``'s cache and tokens to ``path`` (replacing it whole, never half-written), once the
        slot holds no request. Raises InvalidRequest for a slot that does not exist, SlotFileError when the file
        cannot be written, and NotSupported for a backend without slots of its own."""
        raise NotSupported(f"the {self.name} backend cannot save a slot's cache", hint=SLOT_FILES_HINT)

    async def restore_slot(self, id_slot: int, path: Path) -> SlotFile:
        """Load ``path`` into slot ``id_slot``'s cache, once the slot holds no request: a later prompt that starts
        with its tokens reuses them. Raises InvalidRequest for a slot that does not exist or a file that cannot be
        restored (the slot's cache is then empty), and NotSupported as ``save_slot``."""
        raise NotSupported(f"the {self.name} backend cannot restore a slot's cache", hint=SLOT_FILES_HINT)

    async def erase_slot(self, id_slot: int) -> int:
        """Empty slot ``id_slot``'s cache once it holds no request; the tokens it held. Raises as ``save_slot``."""
        raise NotSupported(f"the {self.name} backend cannot erase a slot's cache", hint=SLOT_FILES_HINT)

    def lora_adapters(self) -> tuple[LoraState, ...]:
        """The LoRA adapters loaded with the model and their scales now; () for none."""
        return ()

    async def set_lora_scales(self, scales: Mapping[int, float]) -> None:
        """Make ``scales`` (adapter id -> scale; adapters left out: 0) what requests that name no adapters are
        served with, from their next step on, as llama-server's ``POST /lora-adapters``. Raises InvalidRequest for
        an id no adapter has, and NotSupported for a backend without adapters."""
        raise NotSupported(f"the {self.name} backend does not apply LoRA adapters", hint=LORA_HINT)

    def decode_stats(self) -> DecodeStats | None:
        """What this load's decode loop has done so far (one object per load, updated in place); None for a
        backend without one of its own here (an engine process counts in its own /metrics)."""
        return None

    def rpc_workers(self) -> tuple[WorkerHealth, ...]:
        """The RPC workers this load's layers are on and whether each still answers; () for a model on this
        machine alone."""
        return ()

    @property
    def relay(self) -> Relay | None:
        """For a backend that runs its model in an engine process with its own OpenAI server (vLLM): the proxy
        that relays clients' requests to it as they are, while loaded. None for a backend serving in process."""
        return None
