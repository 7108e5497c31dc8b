"""What every embeddings route shares: the input shapes llama-server takes, and its native answer.

``/embeddings`` (and ``/embedding``) answer in llama-server's own shape, as does ``/v1/embeddings`` when the inputs
come as ``content`` rather than ``input``: ``[{"index", "embedding": [[...]]}]``, one row per input, or under
``--pooling none`` one row per token (at most MAX_TOKEN_ROWS in one answer).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi import Request, Response

from localinfer.app.server.disconnect import unless_disconnected
from localinfer.backends.base import EmbeddingInput
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

MAX_INPUTS = 2048  # OpenAI's own bound on one request's inputs
MAX_TOKEN_ROWS = 16384  # under --pooling none: the most token vectors one answer holds

_SHAPES = (
    "a string, an array of token ids (text mixed in), or a list of strings, arrays of token ids (text mixed in), "
    '{"content": text} and {"prompt_string": text} objects'
)

# An input as given: a text, token ids, or token ids and texts mixed (llama-server's tokenize_mixed), which
# ``tokenized`` turns into ids.
GivenInput = str | list[int] | list[int | str]


def embedding_inputs(given: Any, param: str) -> list[GivenInput]:
    """``given`` as inputs to embed, in any shape llama-server takes: a text, token ids (texts mixed in), or a list
    of texts, token id lists (texts mixed in), ``{"content": text or [{"type": "text", "text"}]}`` and
    ``{"prompt_string": ...}`` objects. Raises InvalidRequest for another shape, none, or more than MAX_INPUTS."""
    if isinstance(given, str):
        inputs: list[GivenInput] = [given]
    elif isinstance(given, list) and any(_is_token(x) for x in given):  # one prompt, as llama-server reads it
        inputs = [_one_input(given, param)]
    elif isinstance(given, list):
        inputs = [_one_input(x, param) for x in given]
    else:
        raise InvalidRequest(f"{param} must be {_SHAPES}", param=param)
    if not inputs:
        raise InvalidRequest(f"{param} is empty", param=param)
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"{param} holds {len(inputs)} items; at most {MAX_INPUTS} are allowed", param=param)
    return inputs


def _one_input(value: Any, param: str) -> GivenInput:
    if isinstance(value, str):
        return value
    if _is_tokens(value):
        return list(value)
    if isinstance(value, list) and value and all(_is_token(x) or isinstance(x, str) for x in value):
        return list(value)
    if isinstance(value, dict) and "prompt_string" in value and "content" not in value:
        if value.get("multimodal_data"):
            raise InvalidRequest("multimodal_data needs a multimodal projector, which this server has not", param=param)
        return _one_input(value["prompt_string"], param)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        parts = value["content"]
        if all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts):
            return "".join(p["text"] for p in parts)
        raise InvalidRequest("only text content parts can be embedded", param=param)
    raise InvalidRequest(f"{param} must be {_SHAPES}", param=param)


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_tokens(value: object) -> bool:
    return isinstance(value, list) and all(_is_token(x) for x in value)


async def tokenized(engine: Engine, model: str, given: list[GivenInput]) -> list[EmbeddingInput]:
    """``given`` for ``engine.embed``: texts and ids as they are; ids and texts mixed as ids, each text tokenized
    as llama-server tokenizes it (control tokens' text read as such, BOS only before a text that comes first)."""
    inputs: list[EmbeddingInput] = []
    for one in given:
        if isinstance(one, str) or all(_is_token(x) for x in one):
            inputs.append(one)  # type: ignore[arg-type]  # a text, or ids alone
            continue
        ids: list[int] = []
        for i, part in enumerate(one):
            if isinstance(part, str):
                ids.extend(await engine.tokenize(model, part, add_special=i == 0, parse_special=True))
            else:
                ids.append(part)
        inputs.append(ids)
    return inputs


async def native_embeddings(request: Request, model: str, given: list[GivenInput], *, normalize: bool) -> Response:
    """llama-server's answer for ``given``: each pooled vector (L2-normalised with ``normalize``) as a row, or
    under pooling none each token's vector, a row each."""
    engine: Engine = request.app.state.engine
    inputs = await tokenized(engine, model, given)
    if (await engine.facts(model)).pooling == "none" and _most_tokens(inputs) > MAX_TOKEN_ROWS:
        raise InvalidRequest(
            f"under --pooling none each token is a vector, and these inputs may be more than {MAX_TOKEN_ROWS} tokens",
            param="content",
            hint="send fewer or shorter inputs a request",
        )
    result = await unless_disconnected(request, engine.embed(model, inputs, normalize=normalize))
    rows = result.token_vectors or tuple((vector,) for vector in result.vectors)
    answer = [{"index": index, "embedding": [list(row) for row in input_rows]} for index, input_rows in enumerate(rows)]
    return Response(pydantic_core.to_json(answer), media_type="application/json")


def _most_tokens(inputs: list[EmbeddingInput]) -> int:
    """The most tokens ``inputs`` can be: ids as they are, a text at most a token a byte (and BOS and EOS)."""
    return sum(len(i.encode("utf-8")) + 2 if isinstance(i, str) else len(i) for i in inputs)


async def check_pooled(engine: Engine, model: str) -> None:
    """Raises InvalidRequest when ``model`` is served with pooling none: its vectors are per token, which only
    llama.cpp's /embeddings answers (as llama-server refuses it on its OpenAI route)."""
    if (await engine.facts(model)).pooling == "none":
        raise InvalidRequest(
            "this model is served with --pooling none (a vector per token), which this route cannot answer",
            param="input",
            hint="use llama.cpp's /embeddings, or serve the model with another --pooling",
        )
