"""llama.cpp's native request bodies, as llama-server reads them (tools/server/server-task.cpp), translated into core
types here and nowhere else.

Unknown fields are ignored, as llama-server ignores them. A field we know but cannot honour, and that would change
the answer (mirostat, token probabilities, a JSON schema...), is a 400 naming it, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from localinfer.app.server.core.choices import MAX_CHOICES
from localinfer.app.server.core.defaults import default_n_predict, default_seed
from localinfer.app.server.core.logit_bias import parse_logit_bias, shown_logit_bias
from localinfer.app.server.core.lora import LoraWire, lora_pairs
from localinfer.app.server.core.media import media_part
from localinfer.app.server.core.model_defaults import LLAMA_CPP, fill
from localinfer.app.server.core.sampling_fields import SamplingFields
from localinfer.app.server.core.stops import check_stops
from localinfer.errors import InvalidRequest
from localinfer.types import GenerationOptions, MediaPart, Priority, ResponseFormat, SamplingParams

MAX_N_PROBS: Final = 100  # the most likely tokens listed beside each generated one (n_probs)

# A prompt: text, or token ids, or both mixed (llama-server's tokenize_mixed): ``[12, 34, "text", 56]``. An id is a
# JSON integer: ``true`` or ``1.0`` is refused, not read as 1.
TokenId = StrictInt
Prompt = str | list[TokenId | str]


class PromptObject(BaseModel):
    """llama-server's prompt as an object, ``{"prompt_string": ..., "multimodal_data": [...]}``: its text (or
    mixed ids and text), and the base64 images and sounds of its media markers (``/props``' media_marker), in
    order; they need a model served with a projector."""

    prompt_string: Prompt
    multimodal_data: list[str] | None = None


# What ``prompt`` may be: one prompt, or a list of them (texts, lists of ids and texts, objects), as llama-server's
# tokenize_input_prompts reads it: a list holding an id is one prompt, any other list is several.
GivenPrompt = Prompt | PromptObject | list[PromptObject | str | list[TokenId | str]]


def plain_prompts(given: GivenPrompt) -> list[tuple[Prompt, tuple[MediaPart, ...]]]:
    """The prompts ``given`` holds, each as text or mixed ids and text (``prompt_string`` objects unwrapped), with
    its media parts (an object's ``multimodal_data``). Raises InvalidRequest for an empty list or media that cannot
    be read (core/media.py)."""
    if not isinstance(given, list) or any(isinstance(part, int) for part in given):
        return [_unwrapped(given)]  # type: ignore[arg-type]  # one prompt: text, an object, ids and text
    if not given:
        raise InvalidRequest('"prompt" must not be empty', param="prompt")
    return [_unwrapped(part) for part in given if not isinstance(part, int)]


def _unwrapped(one: Prompt | PromptObject) -> tuple[Prompt, tuple[MediaPart, ...]]:
    if not isinstance(one, PromptObject):
        return one, ()
    media = tuple(media_part(data, param="prompt.multimodal_data") for data in one.multimodal_data or ())
    return one.prompt_string, media


# Samplers llama-server may be asked to run (``samplers``). Ours run top-k, top-p, min-p, penalties and temperature;
# the others do nothing at their default settings, which are the only ones we take.
OUR_SAMPLERS: Final = frozenset({"top_k", "top_p", "min_p", "penalties", "temperature"})
INERT_SAMPLERS: Final = frozenset({"dry", "typ_p", "typical_p", "xtc", "top_n_sigma"})

# (field, the value at which it changes nothing): anything else is refused.
_UNSUPPORTED: Final[tuple[tuple[str, Any], ...]] = (
    ("mirostat", 0),
    ("typical_p", 1.0),
    ("dynatemp_range", 0.0),
    ("xtc_probability", 0.0),
    ("dry_multiplier", 0.0),
    ("top_n_sigma", -1.0),
    ("json_schema", None),
    ("image_data", None),
    ("multimodal_data", None),
    ("t_max_predict_ms", 0),
)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")  # llama-server ignores fields it does not know; we keep them to check

    model: str | None = None

    def _refuse_unsupported(self) -> None:
        given = self.model_extra or {}
        for name, neutral in _UNSUPPORTED:
            value = given.get(name)
            if value is not None and value != neutral and value not in ("", [], {}):
                raise InvalidRequest(f"{name} is not supported by this server", param=name)


class CompletionBody(_Wire, SamplingFields):
    """``POST /completion``: llama-server's defaults (tools/server/README.md); its sampling fields are
    core/sampling_fields.py's."""

    prompt: GivenPrompt
    n_predict: int = Field(default_factory=lambda: default_n_predict(-1), ge=-1)  # -1: until the context is full
    max_tokens: int | None = Field(None, ge=-1)  # llama-server's other name for it, when n_predict is not given
    seed: int = Field(default_factory=lambda: default_seed(-1), ge=-1, lt=2**64)  # -1: a random one
    stop: list[str] | str = Field(default_factory=list)
    stream: bool = False
    cache_prompt: bool = True
    priority: Priority | None = None  # localinfer's: who gets a free slot first (/infill: high, else normal)
    ignore_eos: bool = False
    samplers: list[str] | str | None = None
    return_tokens: bool = False  # the answer's ``tokens``: the generated ids (a stream's pieces always carry them)
    logit_bias: dict[str, Any] | list[Any] | None = None  # core/logit_bias.py: OpenAI's map or llama-server's list
    grammar: str = ""  # a GBNF grammar the text follows ("": none)
    n_probs: int = 0  # each token's probabilities and those of the n most likely (0 or less: none)
    post_sampling_probs: bool = False  # those after the sampler chain, as probabilities, not log-probabilities
    response_fields: list[str] | None = None  # the last answer holds only these (``"timings/prompt_n"``), flat
    timings_per_token: bool = False  # every streamed piece carries the timings so far
    return_progress: bool = False  # a stream sends the prompt's progress while it is computed
    n_cmpl: StrictInt | None = None  # completions of each prompt (``n``, OpenAI's name, when not given)
    n_keep: int = Field(0, ge=-1)  # the prompt's first tokens a context shift keeps (-1: all of it)
    n: StrictInt | None = None
    lora: list[LoraWire] | None = None  # the adapters this request is served with (core/lora.py)

    @model_validator(mode="before")
    @classmethod
    def _model_parameters(cls, data: Any) -> Any:
        return fill(data, LLAMA_CPP)

    def choices(self, n_prompts: int) -> int:
        """How many completions of each of ``n_prompts`` prompts are asked for. Raises InvalidRequest outside 1 to
        MAX_CHOICES (llama-server's bound is its slot count), or for more than MAX_CHOICES in all."""
        name, n = ("n_cmpl", self.n_cmpl) if self.n_cmpl is not None else ("n", self.n)
        if n is None:
            return 1
        if not 1 <= n <= MAX_CHOICES:
            raise InvalidRequest(f"{name} must be between 1 and {MAX_CHOICES}, but got {n}", param=name)
        if n_prompts * n > MAX_CHOICES:
            raise InvalidRequest(
                f"{n_prompts} prompts with {name}={n} are {n_prompts * n} completions; at most {MAX_CHOICES} "
                "run in one request",
                param=name,
            )
        return n

    @property
    def n_tokens(self) -> int | None:
        """How many tokens to generate: None for as many as fit (llama-server's -1)."""
        n = self.n_predict if "n_predict" in self.model_fields_set or self.max_tokens is None else self.max_tokens
        return None if n < 0 else n

    @property
    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)

    @property
    def n_probs_asked(self) -> int:
        """``n_probs``, or where it is not given ``logprobs``, llama-server's other name for it. Raises
        InvalidRequest for a ``logprobs`` that is not an integer, or either above MAX_N_PROBS (llama-server takes
        any number, and lists that many tokens for every token generated, on the thread every slot waits on)."""
        other = (self.model_extra or {}).get("logprobs")
        name, asked = "n_probs", self.n_probs
        if "n_probs" not in self.model_fields_set and other is not None:
            if isinstance(other, bool) or not isinstance(other, int):
                raise InvalidRequest("logprobs (n_probs) must be an integer", param="logprobs")
            name, asked = "logprobs", other
        if asked > MAX_N_PROBS:
            raise InvalidRequest(f"{name} is {asked}; at most {MAX_N_PROBS} are listed", param=name)
        return asked

    def options(self) -> GenerationOptions:
        """The generation options this body asks for. Raises InvalidRequest naming a field we cannot honour."""
        self._refuse_unsupported()
        check_stops(self.stops, param="stop")
        sampling = self.sampling_params(
            seed=None if self.seed < 0 else self.seed, logit_bias=parse_logit_bias(self.logit_bias)
        )
        return GenerationOptions(
            sampling=_only_samplers(sampling, self.samplers),
            max_tokens=self.n_tokens,
            stop=self.stops,
            response_format=ResponseFormat("grammar", grammar=self.grammar) if self.grammar else ResponseFormat(),
            ignore_eos=self.ignore_eos,
            cache_prompt=self.cache_prompt,
            logprobs=self.n_probs_asked if self.n_probs_asked > 0 else None,
            logprobs_of_end=True,
            logprobs_after_sampling=self.post_sampling_probs,
            timings_per_token=self.timings_per_token,
            return_progress=self.return_progress and self.stream,  # llama-server sends progress only in a stream
            n_keep=self.n_keep,
            lora=lora_pairs(self.lora),
        )

    def settings(self, options: GenerationOptions, n_ctx: int, eog_ids: tuple[int, ...] = ()) -> dict[str, Any]:
        """llama-server's ``generation_settings`` for this request (``generation_settings``)."""
        return generation_settings(options, n_ctx, eog_ids, stream=self.stream)


class TokenizeBody(_Wire):
    """``POST /tokenize``: llama-server's defaults (no BOS, control tokens parsed)."""

    content: Prompt
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(_Wire):
    """``POST /detokenize``."""

    tokens: list[TokenId]


async def with_token_ids(
    options: GenerationOptions, tokenize: Callable[[str], Awaitable[list[int]]]
) -> GenerationOptions:
    """``options`` with each logit bias on a text made one on each of its tokens, as llama-server resolves them
    (``tokenize``: the model's, without BOS or control tokens), so that the settings shown name token ids."""
    biases = options.sampling.logit_bias
    if not any(isinstance(key, str) for key, _ in biases):
        return options
    resolved: list[tuple[int | str, float]] = []
    for key, bias in biases:
        tokens = await tokenize(key) if isinstance(key, str) else [key]
        resolved.extend((token, bias) for token in tokens)
    sampling = dataclasses.replace(options.sampling, logit_bias=tuple(resolved))
    return dataclasses.replace(options, sampling=sampling)


def _only_samplers(sampling: SamplingParams, samplers: list[str] | str | None) -> SamplingParams:
    """``sampling`` with the samplers ``samplers`` leaves out turned off, as llama-server runs only those named.
    Raises InvalidRequest for a sampler we do not have."""
    if samplers is None:
        return sampling
    if isinstance(samplers, str):  # llama-server's one-letter form: "kpmt"...
        raise InvalidRequest("samplers must be a list of sampler names", param="samplers")
    unknown = sorted(set(samplers) - OUR_SAMPLERS - INERT_SAMPLERS)
    if unknown:
        raise InvalidRequest(f"samplers not supported by this server: {', '.join(unknown)}", param="samplers")
    named = set(samplers)
    changes: dict[str, Any] = {}
    if "top_k" not in named:
        changes["top_k"] = 0
    if "top_p" not in named:
        changes["top_p"] = 1.0
    if "min_p" not in named:
        changes["min_p"] = 0.0
    if "penalties" not in named:
        changes.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    if "temperature" not in named and sampling.temperature > 0:  # sampled from the model's own distribution
        changes["temperature"] = 1.0
    return dataclasses.replace(sampling, **changes)


def _runs(name: str, s: SamplingParams) -> bool:
    """Whether the sampler ``name`` changes anything with ``s``."""
    return {
        "penalties": s.repeat_penalty != 1.0 or s.presence_penalty != 0.0 or s.frequency_penalty != 0.0,
        "top_k": s.top_k > 0,
        "top_p": s.top_p < 1.0,
        "min_p": s.min_p > 0.0,
        "temperature": True,
    }[name]


def generation_settings(
    options: GenerationOptions, n_ctx: int, eog_ids: tuple[int, ...] = (), *, stream: bool
) -> dict[str, Any]:
    """llama-server's ``generation_settings``: what a request was served with (on every route: its ``/completion``
    answers, and ``__verbose`` on the OpenAI ones). ``eog_ids``: the model's end-of-generation tokens, which an
    ``ignore_eos`` request bans after its own biases (as llama-server shows it); its biases' texts are shown as they
    are unless resolved first (with_token_ids)."""
    s = options.sampling
    bans = tuple((token, float("-inf")) for token in eog_ids) if options.ignore_eos else ()
    n_predict = -1 if options.max_tokens is None else options.max_tokens
    return {
        "n_ctx": n_ctx,
        "n_predict": n_predict,
        "max_tokens": n_predict,
        "seed": -1 if s.seed is None else s.seed,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_last_n": s.repeat_last_n,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "stop": list(options.stop),
        "ignore_eos": options.ignore_eos,
        "stream": stream,
        "logit_bias": shown_logit_bias(s.logit_bias + bans),
        "grammar": options.response_format.grammar,
        "cache_prompt": options.cache_prompt,
        "n_probs": options.logprobs or 0,
        "post_sampling_probs": options.logprobs_after_sampling,
        "timings_per_token": options.timings_per_token,
        "samplers": [name for name in ("penalties", "top_k", "top_p", "min_p", "temperature") if _runs(name, s)],
    }
