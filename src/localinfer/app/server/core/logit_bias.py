"""``logit_bias`` as llama-server reads it, on its own routes and OpenAI's: OpenAI's map ``{"15339": -100}`` or
llama-server's list ``[[15339, -1.0], ["Hello", false]]``. A key is a token id, or a text whose every token gets
the bias (in the map, a key of digits is an id; in the list, an id is a JSON integer and a string is always a
text); a bias is a number, or ``false`` to ban the token. The model's tokenizer and vocabulary check the rest.

Where llama-server drops an entry it cannot read without a word, this is a 400 naming ``logit_bias``: a client
that sent it meant something.
"""

from __future__ import annotations

import math
import re
from typing import Any

from localinfer.errors import InvalidRequest

PARAM = "logit_bias"
_ID = re.compile(r"\s*[+-]?\d+")  # what llama-server's strtol reads whole as a number

LogitBias = tuple[tuple[int | str, float], ...]


def parse_logit_bias(value: dict[str, Any] | list[Any] | None) -> LogitBias:
    """The (token id or text, bias) pairs ``value`` asks for; -inf for a ban. Raises InvalidRequest naming
    ``logit_bias`` for an entry that is neither shape, or a bias that is neither a number nor ``false``."""
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple((_map_key(key), _bias(bias, key)) for key, bias in value.items())
    pairs: list[tuple[int | str, float]] = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 2:
            raise _bad(f"each entry of the list is a [token, bias] pair, not {_shown(entry)}")
        key, bias = entry
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise _bad(f"a token is an id (an integer) or a text, not {_shown(key)}")
        pairs.append((key, _bias(bias, key)))
    return tuple(pairs)


def shown_logit_bias(biases: tuple[tuple[int | str, float], ...]) -> list[dict[str, Any]]:
    """Resolved biases as llama-server's ``generation_settings`` shows them: ``{"bias", "token"}`` each, in order, a
    ban's -inf as ``null`` (JSON has no infinity, and llama-server's writer puts null there)."""
    return [{"bias": bias if math.isfinite(bias) else None, "token": token} for token, bias in biases]


def _map_key(key: str) -> int | str:
    return int(key) if _ID.fullmatch(key) else key


def _bias(value: Any, key: object) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"the bias of {_shown(key)} is a number, or false to ban the token, not {_shown(value)}")
    bias = float(value)
    if not math.isfinite(bias):
        raise _bad(f"the bias of {_shown(key)} is not a finite number")
    return bias


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(reason: str) -> InvalidRequest:
    return InvalidRequest(f"logit_bias: {reason}", param=PARAM)
