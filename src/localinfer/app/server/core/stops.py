"""Stop sequences, bounded the same way in every dialect."""

from __future__ import annotations

from collections.abc import Sequence

from localinfer.errors import InvalidRequest

MAX_STOPS = 16
MAX_STOP_LENGTH = 512  # each generated token is checked against every stop: bounded work per token


def check_stops(stops: Sequence[str], *, param: str) -> None:
    """Refuse more than MAX_STOPS stop sequences, or one longer than MAX_STOP_LENGTH characters (InvalidRequest
    naming ``param``)."""
    if len(stops) > MAX_STOPS:
        raise InvalidRequest(f"at most {MAX_STOPS} stop sequences are allowed", param=param)
    if any(len(stop) > MAX_STOP_LENGTH for stop in stops):
        raise InvalidRequest(f"a stop sequence may have at most {MAX_STOP_LENGTH} characters", param=param)
