"""What a backend checks of a request before it runs it: fields its capabilities cannot honour, bounds its model
cannot mean, and the 400s for a reranker asked to generate (and a model that is none asked to rerank)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from localinfer.backends.base import Capabilities
from localinfer.errors import InvalidRequest
from localinfer.types import GenerationOptions


def reranker_refusal(model: str, does_not: str) -> InvalidRequest:
    """The 400 for a reranker asked to do what it cannot (``does_not``: "embed texts", "generate text");
    ``model`` says which (``"model 'bge-reranker'"``, or ``"this model"``)."""
    return InvalidRequest(
        f"{model} is a reranker (its metadata states rank pooling): it scores query and document pairs "
        f"(POST /v1/rerank) and does not {does_not}",
        param="model",
    )


def not_a_reranker(model: str) -> InvalidRequest:
    """The 400 for a model that is no reranker asked to score query and document pairs."""
    return InvalidRequest(
        f"{model} is not a reranker (its metadata states no rank pooling): it cannot score query and document "
        "pairs; rerank with a reranker model",
        param="model",
    )


def check_supported(name: str, capabilities: Capabilities, options: GenerationOptions) -> None:
    """Refuses what ``options`` ask that a backend of ``capabilities`` (named ``name``) cannot honour: logit biases
    and GBNF grammars change the answer, so they are never dropped. Raises InvalidRequest naming the field."""
    if options.sampling.logit_bias and not capabilities.logit_bias:
        raise InvalidRequest(f"logit_bias is not supported by the {name} backend", param="logit_bias")
    if options.response_format.type == "grammar" and not capabilities.gbnf:
        raise InvalidRequest(f"a GBNF grammar is not supported by the {name} backend", param="grammar")
    if options.lora is not None and not capabilities.lora:
        raise InvalidRequest(f"LoRA adapters are not applied by the {name} backend", param="lora")
    if options.thinking_budget is not None and not capabilities.thinking_budget:
        raise InvalidRequest(f"a thinking budget is not supported by the {name} backend", param="thinking")


def check_bounds(options: GenerationOptions, *, n_ctx: int, n_vocab: int) -> GenerationOptions:
    """``options`` for a model of ``n_ctx`` tokens of context and ``n_vocab`` tokens, with a ``repeat_last_n`` of
    -1 (Ollama's "the whole context") made ``n_ctx``. Refuses what such a model cannot mean and would pay memory
    for: a repetition window longer than the context, a top-k beyond the vocabulary; and ``max_tokens`` past the
    context where the dialect refuses it (OpenAI's, as OpenAI and vLLM do; Ollama's and llama.cpp's serve it until
    the context is full, as Ollama and llama-server do). Raises InvalidRequest naming the field."""
    if options.refuse_max_tokens_past_context and options.max_tokens is not None and options.max_tokens > n_ctx:
        raise InvalidRequest(
            f"max_tokens is {options.max_tokens} but the model's context holds {n_ctx} tokens", param="max_tokens"
        )
    if options.sampling.repeat_last_n < 0:
        options = dataclasses.replace(options, sampling=dataclasses.replace(options.sampling, repeat_last_n=n_ctx))
    if options.sampling.repeat_last_n > n_ctx:
        raise InvalidRequest(
            f"repeat_last_n is {options.sampling.repeat_last_n} but the model's context holds {n_ctx} tokens",
            param="repeat_last_n",
        )
    if options.sampling.top_k > n_vocab:
        raise InvalidRequest(
            f"top_k is {options.sampling.top_k} but the model's vocabulary has {n_vocab} tokens", param="top_k"
        )
    return options


def check_ids(tokens: Sequence[int], n_vocab: int, *, param: str) -> None:
    """Refuse an id outside the vocabulary (InvalidRequest naming ``param``): llama.cpp would read past its tables."""
    bad = next((token for token in tokens if not 0 <= token < n_vocab), None)
    if bad is not None:
        raise InvalidRequest(f"token id {bad} is not in the model's vocabulary (0 to {n_vocab - 1})", param=param)
