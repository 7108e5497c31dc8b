"""The load a model on RPC workers is planned with goes to the child ``localinfer serve`` in its environment and
comes back through the settings: each planned value, the default ones included, arrives as it left."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.rpc.child import child_env
from localinfer.config import Settings

PLANNED = LoadSpec(
    Path("/models/m.gguf"),
    name="m",
    ctx_size=4096,
    threads=3,
    batch_size=1024,
    ubatch_size=256,
    parallel=2,
    max_queue=9,
    gpu_layers=-1,
    cache_type_k="q8_0",
    cache_type_v="q8_0",
    flash_attn="on",
    speculation="draft",
    draft_path=Path("/models/d.gguf"),
    draft_max=12,
    draft_min=2,
    pooling="cls",
    cache_reuse=0,
    context_shift=True,
    rpc=("10.0.0.1:50052", "10.0.0.2:50053"),
    tensor_split=(3.0, 1.0),
)


def settings_in_child(spec: LoadSpec, home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    env = child_env({"LOCALINFER_CACHE_REUSE": "999", "PATH": "/bin"}, spec, home)
    for key in [k for k in os.environ if k.startswith("LOCALINFER_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


def carried(settings: Settings) -> dict[str, object]:
    return {
        "ctx_size": settings.ctx_size,
        "threads": settings.threads,
        "batch_size": settings.batch_size,
        "ubatch_size": settings.ubatch_size,
        "parallel": settings.parallel,
        "max_queue": settings.max_queue,
        "gpu_layers": settings.gpu_layers or 0,
        "cache_type_k": settings.cache_type_k,
        "cache_type_v": settings.cache_type_v,
        "flash_attn": settings.flash_attn,
        "speculation": settings.speculation,
        "draft_path": Path(settings.draft) if settings.draft else None,
        "draft_max": settings.draft_max,
        "draft_min": settings.draft_min,
        "pooling": settings.pooling or "",
        "cache_reuse": settings.cache_reuse,
        "context_shift": settings.context_shift,
        "rpc": tuple(settings.rpc.split(",")) if settings.rpc else (),
        "tensor_split": tuple(float(s) for s in settings.tensor_split.split(",")) if settings.tensor_split else (),
    }


@pytest.mark.parametrize("spec", [PLANNED, LoadSpec(Path("/models/m.gguf"))], ids=["planned", "defaults"])
def test_the_childs_settings_say_what_the_load_spec_said(
    spec: LoadSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_in_child(spec, tmp_path, monkeypatch)
    sent = {key: getattr(spec, key) for key in carried(settings)}
    assert carried(settings) == sent
    assert settings.rpc_in_process and settings.home == tmp_path and settings.keep_alive_seconds is None


def test_the_parents_own_settings_do_not_reach_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_in_child(dataclasses.replace(PLANNED, cache_reuse=64), tmp_path, monkeypatch)
    assert settings.cache_reuse == 64
