"""How a loaded model's keep-alive and memory placement read in `localinfer ps` and the app's models screen."""

from __future__ import annotations

from localinfer.client.base import LoadedModelStatus


def status(**fields: object) -> LoadedModelStatus:
    base: dict[str, object] = {"name": "m", "backend": "llamacpp", "context_length": 2048, "slots": 2}
    return LoadedModelStatus(**{**base, **fields})  # type: ignore[arg-type]


def test_until_says_pinned_in_use_forever_or_when() -> None:
    assert status(pinned=True, expires_in=10.0).until() == "pinned"
    assert status(in_flight=2).until() == "in use (2)"
    assert status().until() == "forever"
    assert status(expires_in=299.6).until() == "in 5 min 0 s"
    assert status(expires_in=299.4).until() == "in 4 min 59 s"
    assert status(expires_in=299.4).until(exact=False) == "5 min"
    assert status(expires_in=12.2).until(exact=False) == "12 s"


def test_placement_reads_as_ollama_ps_says_it() -> None:
    assert status(memory_bytes=1000).placement() == "100% CPU"
    assert status(memory_bytes=1000, vram_bytes=1000).placement() == "100% GPU"
    assert status(memory_bytes=1000, vram_bytes=700).placement() == "30%/70% CPU/GPU"
    assert status(size_bytes=0).placement() == "100% CPU"
