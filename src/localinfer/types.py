"""Engine-neutral request and response types, shared by the server, the engine and the backends."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

FinishReason = Literal["stop", "length", "tool_calls"]
Priority = Literal["low", "normal", "high"]  # who gets a free slot (and the prefill budget) first
PRIORITY_RANK: dict[str, int] = {"low": 0, "normal": 1, "high": 2}

# The element types llama.cpp keeps a KV cache in (llama-server's --cache-type-k/-v), with the bytes one element
# takes: a quantized type stores blocks of 32 values (q8_0: 32 bytes and an f16 scale).
KV_CACHE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
DEFAULT_KV_CACHE_TYPE = "f16"
RANDOM_SEED = 0xFFFFFFFF  # a seed that asks for a random one (llama.cpp's LLAMA_DEFAULT_SEED; -1 on the wire)


def kv_cache_type(value: str) -> str:
    """A KV cache type's name as llama.cpp spells it (case-insensitive). Raises ValueError listing the types."""
    name = value.strip().lower()
    if name not in KV_CACHE_BYTES:
        raise ValueError(f"no KV cache type {value!r}: use one of " + ", ".join(KV_CACHE_BYTES))
    return name


def kv_cache_scale(type_k: str, type_v: str) -> float:
    """What a KV cache of these key and value types takes, as a share of an f16 one (keys and values as big)."""
    return (KV_CACHE_BYTES[type_k] + KV_CACHE_BYTES[type_v]) / (2 * KV_CACHE_BYTES[DEFAULT_KV_CACHE_TYPE])


@dataclass(frozen=True)
class ToolCall:
    """A function the model asked to call: ``arguments`` as the JSON object it wrote."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Tool:
    """A function the model may call, as OpenAI's and Ollama's ``tools`` describe it (``parameters``: a JSON
    schema of its arguments)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


# Where a picture or a sound stands in a prompt's text: llama.cpp's mtmd marker (``mtmd_default_marker()``), which
# llama-server writes in place of each media part and advertises in ``/props`` as ``media_marker``.
MEDIA_MARKER = "<__media__>"
MediaKind = Literal["image", "audio"]


@dataclass(frozen=True)
class MediaPart:
    """An image or a sound a request carries, as the client's bytes (PNG, JPEG, ..., WAV, MP3), checked at the edge.
    Each one stands for one ``MEDIA_MARKER`` in the text it belongs to, in order; ``digest`` (sha256 of the bytes)
    is what ties it to cached KV."""

    kind: MediaKind
    data: bytes = field(repr=False)
    mime: str

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class ChatMessage:
    """One turn. An assistant turn may carry the ``tool_calls`` it made and the ``reasoning`` it wrote before its
    answer (a reasoning model's thinking, given back); a ``tool`` turn answers one of the calls (``tool_call_id``,
    and the function's ``name``)."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    media: tuple[MediaPart, ...] = ()  # one per MEDIA_MARKER in ``content``, in order


@dataclass(frozen=True)
class ThinkingMarkers:
    """How a reasoning model writes its thinking: between ``open`` and ``close`` (``<think>``, ``</think>``), read
    from its file (the vocabulary and the chat template), never its name. A ``harmony`` model (gpt-oss) writes
    messages on channels instead: its thinking on ``analysis`` (from ``<|channel|>analysis<|message|>`` to
    ``<|end|>``), its answer on ``final``, after ``answer`` (``<|start|>assistant<|channel|>final<|message|>``)."""

    open: str
    close: str
    answer: str = ""  # what starts the answer after ``close``; a budget writes it with ``close``
    harmony: bool = False


@dataclass(frozen=True)
class Thinking:
    """What a chat asks of a reasoning model's thinking (nothing, for a model that does not think)."""

    enabled: bool | None = None  # None: as the model's template has it (most think)
    budget: int | None = None  # thinking tokens before the end of thinking is forced; None: no limit
    effort: str | None = None  # a reasoning effort the template reads (gpt-oss: low, medium, high)
    separate: bool = True  # kept apart from the answer (False: left in it, llama-server's reasoning_format none)


@dataclass(frozen=True)
class ThinkingBudget:
    """For the backend: end the thinking after ``tokens`` thinking tokens by writing ``markers.close`` in the model's
    place. ``inside``: the prompt ends inside the thinking (the template opened it)."""

    tokens: int
    markers: ThinkingMarkers
    inside: bool


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. ``temperature == 0`` means greedy decoding."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64  # -1: the whole context
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    infill: bool = False  # llama.cpp's infill sampler (llama-server's "infill" in samplers), after top-k/top-p/min-p
    # added to tokens' logits before sampling, as (token id or text, bias): a text's every token gets the bias (the
    # backend tokenizes it, without BOS or control tokens, as llama-server does); -inf bans; biases of a token add up
    logit_bias: tuple[tuple[int | str, float], ...] = ()

    @property
    def reproducible(self) -> bool:
        """Whether the same request is meant to give the same text: greedy, or sampled with a seed of its own (-1
        asks for a random one, as in llama-server)."""
        return self.temperature <= 0 or (self.seed is not None and self.seed & 0xFFFFFFFF != RANDOM_SEED)


@dataclass(frozen=True)
class ResponseFormat:
    """``text`` (free), ``json_object`` (any JSON object), ``json_schema`` (JSON matching ``schema``) or ``grammar``
    (text matching ``grammar``, a GBNF grammar as llama.cpp writes them)."""

    type: Literal["text", "json_object", "json_schema", "grammar"] = "text"
    schema: dict[str, Any] | None = None
    grammar: str = ""
    # JSON held to the answer of a reasoning model of these markers: its thinking comes first, free (opened by the
    # prompt when ``thinking_open``, else by the model, or not at all)
    after_thinking: ThinkingMarkers | None = None
    thinking_open: bool = False


@dataclass(frozen=True)
class GenerationOptions:
    """What every generation takes, whatever the prompt's shape."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    ignore_eos: bool = False
    cache_prompt: bool = True  # llama-server's switch: False computes the whole prompt, ignoring a cached prefix
    # max_tokens past the context: refused (a 400, as OpenAI and vLLM answer), or served until the context is full
    # (as Ollama and llama-server do, and the TUI)
    refuse_max_tokens_past_context: bool = False
    logprobs: int | None = None  # each token's log-probability and this many most likely ones; None: none
    logprobs_of_end: bool = False  # the end-of-generation token's too (llama-server's n_probs counts it)
    # log-probabilities under the sampler chain's distribution (its candidates after top-k, top-p, temperature...;
    # greedy: the token taken is certain) rather than the raw logits': llama-server's post_sampling_probs
    logprobs_after_sampling: bool = False
    timings_per_token: bool = False  # llama-server's: every chunk carries the timings so far, not only the last
    return_progress: bool = False  # llama-server's: chunks with the prompt's progress come while it is computed
    n_indent: int = 0  # llama-server's: a line after the first, indented less than this, ends the text (cut there)
    t_max_predict_ms: float = 0.0  # llama-server's: once generating took longer, the next line end ends the text
    thinking_budget: ThinkingBudget | None = None  # a reasoning model's thinking is cut after so many tokens
    n_keep: int = 0  # the prompt's first tokens a context shift keeps (-1: the whole prompt; --context-shift)
    # llama-server's per-request adapters: (adapter id, scale) pairs, those not named at 0; None: the global scales
    lora: tuple[tuple[int, float], ...] | None = None


ToolChoice = str  # "auto", "none", "required", or the name of the one function to call


# How a chat's prompt ends: "reply", ready for the assistant's reply (the template's generation prompt); "none", as
# the turns end (llama-server's add_generation_prompt false); "continue", inside the last turn, which the model goes
# on writing (llama-server's continue_final_message, and a last assistant turn given as a prefill).
PromptEnd = Literal["reply", "none", "continue"]


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    options: GenerationOptions = field(default_factory=GenerationOptions)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = "auto"
    keep_alive: float | None = None  # seconds the model stays loaded after this request (negative: for good)
    priority: Priority = "normal"
    thinking: Thinking = field(default_factory=Thinking)
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # more variables for the chat template
    ending: PromptEnd = "reply"  # how the prompt ends (see PromptEnd)
    # The sampling fields (SamplingParams' names) the caller set on purpose. A client of a server (HttpClient)
    # sends these, and the others only where they differ from SamplingParams' defaults, so that a field left at
    # its default is filled by the model's own parameters (a Modelfile's PARAMETER) or the server's defaults.
    explicit: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CompletionRequest:
    """A raw prompt. ``tokens``, when given, is the prompt already tokenized (llama-server's token-array prompt):
    the model sees exactly those ids and ``prompt`` is ignored."""

    model: str
    prompt: str
    options: GenerationOptions = field(default_factory=GenerationOptions)
    tokens: tuple[int, ...] = ()
    keep_alive: float | None = None  # seconds the model stays loaded after this request (negative: for good)
    priority: Priority = "normal"
    media: tuple[MediaPart, ...] = ()  # one per MEDIA_MARKER in ``prompt``, in order


@dataclass(frozen=True)
class InfillRequest:
    """Fill-in-the-middle: the text that goes between ``prefix`` and ``suffix``. ``extra`` holds other files as
    ``(filename, text)`` chunks (context for models with a repository-level layout); ``prompt`` is text that
    continues the prefix, already typed (llama-server's ``prompt``)."""

    model: str
    prefix: str
    suffix: str
    extra: tuple[tuple[str, str], ...] = ()
    prompt: str = ""
    options: GenerationOptions = field(default_factory=GenerationOptions)
    keep_alive: float | None = None  # seconds the model stays loaded after this request (negative: for good)
    priority: Priority = "high"  # a keystroke's completion: ahead of queued chat


@dataclass(frozen=True)
class GenerationRequest:
    """What a backend runs: a rendered prompt, how to sample, and when to stop.

    ``add_special`` lets the tokenizer add BOS when the model wants one; ``parse_special`` lets control tokens
    written in the prompt (``<|im_start|>``) be tokens. ``tokens``, when given, is the prompt already tokenized
    and ``prompt`` is ignored (a backend that cannot take token ids refuses it).
    """

    request_id: str
    prompt: str
    options: GenerationOptions
    add_special: bool = True
    parse_special: bool = True
    tokens: tuple[int, ...] = ()
    priority: Priority = "normal"
    media: tuple[MediaPart, ...] = ()  # one per MEDIA_MARKER in ``prompt``, in order (a backend without a projector
    # refuses them)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # of the completion's tokens, those a reasoning model thought in

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True)
class Timings:
    """Per-request timings, as llama-server's ``timings`` mean them: ``prompt_ms`` from the start of the prompt's
    computation to the first token, ``predicted_n`` the tokens generated, ``predicted_ms`` from the first token to
    the last (so the rate is over ``predicted_n - 1`` decode steps)."""

    prompt_ms: float
    predicted_ms: float
    prompt_n: int
    predicted_n: int
    draft_n: int = 0  # speculative decoding: draft tokens the model verified
    draft_n_accepted: int = 0  # of those, the ones it kept
    cache_shared_n: int = 0  # of the prompt tokens reused (Usage.cached_tokens), those copied from another slot
    cache_n: int = 0  # the prompt tokens reused (as Usage.cached_tokens; a chunk before the last has no Usage)
    cache_shifted_n: int = 0  # of those, the ones moved to new positions rather than computed (kv_shift.py)
    media_n: int = 0  # of prompt_n, the image and sound embeddings decoded (projector models)
    encode_ms: float = 0.0  # of prompt_ms, the projector's encoding of them (0 when their embeddings were cached)

    def __add__(self, other: Timings) -> Timings:
        return Timings(
            self.prompt_ms + other.prompt_ms,
            self.predicted_ms + other.predicted_ms,
            self.prompt_n + other.prompt_n,
            self.predicted_n + other.predicted_n,
            self.draft_n + other.draft_n,
            self.draft_n_accepted + other.draft_n_accepted,
            self.cache_shared_n + other.cache_shared_n,
            self.cache_n + other.cache_n,
            self.cache_shifted_n + other.cache_shifted_n,
            self.media_n + other.media_n,
            self.encode_ms + other.encode_ms,
        )

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n * 1000.0 / self.prompt_ms if self.prompt_ms > 0 else 0.0

    @property
    def predicted_per_second(self) -> float:
        """llama-server's decode rate: the steps after the first token (which came from the prompt's batch) over
        ``predicted_ms``, the time from the first token to the last."""
        return max(self.predicted_n - 1, 0) * 1000.0 / self.predicted_ms if self.predicted_ms > 0 else 0.0


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text (a piece of a character reads as U+FFFD), bytes and natural-log
    probability under the model's own distribution (its raw logits, before penalties, temperature or any
    constraint; or, where ``GenerationOptions.logprobs_after_sampling`` asks, under the sampler chain's), and the
    most likely tokens at that position as ``(text, bytes, logprob)``, most likely first."""

    token: str
    raw: bytes
    logprob: float
    top: tuple[tuple[str, bytes, float], ...] = ()
    id: int = -1  # the token's id (-1: not said)
    top_ids: tuple[int, ...] = ()  # the ids of ``top``'s tokens, in its order


@dataclass(frozen=True)
class PromptProgress:
    """How far a prompt's computing has come (llama-server's ``prompt_progress``): of its ``total`` tokens,
    ``cache`` were reused and ``processed`` are in the cache now (the reused ones included), ``time_ms`` after the
    request took its slot."""

    total: int
    cache: int
    processed: int
    time_ms: int


@dataclass(frozen=True)
class TokenChunk:
    """A piece of generated text. The last chunk of a generation has ``finish_reason``, ``usage`` and ``timings``,
    and ``stop_word``: the stop string that ended it (None when it ended another way, or the backend cannot say).
    A reasoning model's thinking comes in ``reasoning``, apart from the answer's ``text`` (engine/thinking_split.py)."""

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    tool_calls: tuple[ToolCall, ...] = ()  # on the last chunk, when the model called functions
    logprobs: tuple[TokenLogprob, ...] = ()  # the tokens whose text this chunk (first) carries, when asked
    # the ids of those tokens, and on the last chunk the end-of-generation token that ended it (where the backend
    # says them: llama.cpp)
    tokens: tuple[int, ...] = ()
    stop_word: str | None = None
    progress: PromptProgress | None = None  # a chunk of no text that says how far the prompt is, when asked
    # where the backend has slots (llama.cpp): the slot computing it, and how many tokens its prompt has
    id_slot: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of those, how many were reused from the cache (where the backend says)
    reasoning: str = ""
    truncated: bool = False  # on the last chunk: its context filled and was shifted, the oldest tokens dropped


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: str
    size_bytes: int
    quantization: str | None = None
    source: str | None = None
    loaded: bool = False
    created: int = 0
    context_length: int | None = None  # the loaded context when loaded, else the trained one (None: unknown)
    loading: bool = False
    format: str = "gguf"  # gguf, onnx (an onnxruntime-genai folder) or hf (a Hugging Face safetensors folder)
    projector: str | None = None  # the multimodal projector (mmproj GGUF) it loads with, when it has one
    modalities: tuple[str, ...] = ()  # what it takes besides text through that projector: vision, audio


OLLAMA_FORMAT_NAMES = {"gguf": "gguf", "onnx": "onnx", "hf": "safetensors"}  # ModelInfo.format as Ollama's API says it

TokenStream = AsyncGenerator[TokenChunk, None]
"""A generation's chunks. Closing the stream early (``aclose``) aborts the generation."""
