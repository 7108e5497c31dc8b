"""LoRA adapters on a llama.cpp model, as llama-server applies them (``--lora``, ``/lora-adapters``, a request's
``lora``).

llama.cpp applies adapters to a whole context, not to a sequence: every token of one ``llama_decode`` is computed
with the same adapters at the same scales. So each job carries the scales it is served with (``Scales``: one per
adapter, in id order), a slot's cache is valid only for the scales it was computed with, and the step loop puts
into one batch only the slots of one set of scales, taking the sets in turns of several steps (``next_group``),
as llama-server batches only slots whose adapters are equal. Setting other adapters on the context makes llama.cpp
reserve its compute graph again at the next decode: what mixing costs (bench/lora.py).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import LoraAdapter, LoraState
from localinfer.errors import InvalidRequest, ModelLoadError

log = logging.getLogger(__name__)

Scales = tuple[float, ...]  # one scale per adapter of the model, in id order; () for a model without adapters
# Steps a set of scales keeps the batch while other sets wait. Every change of set makes llama.cpp reserve its graph
# again (about 9 ms a change with SmolLM2 on 2 CPU cores, bench/lora.py), so sets take turns of several steps: with a
# turn of one step, mixed scales decoded at 0.56x of one scale's rate, llama-server (which batches the first busy
# slot's set until it ends) at 0.79x. A set waits at most this many steps per other set.
TURN_STEPS = 8


class _Errors(logging.Handler):
    """The errors llama.cpp logs (through model.py's callback) while an adapter loads: why it refused it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _refusal(errors: list[str]) -> str:
    """llama.cpp's reason, from its log lines (``llama_adapter_lora_init_impl: failed to apply lora adapter: X``)."""
    for line in reversed(errors):
        if "failed to apply lora adapter:" in line:
            return line.split("failed to apply lora adapter:", 1)[1].strip()
    return errors[-1].split(": ", 1)[-1] if errors else "llama.cpp could not read it"


class LoraAdapters:
    """The adapters loaded with one model, the scales requests that name none are served with, and what the
    context applies now. ``apply`` runs on the inference thread only; the global scales may be set from any."""

    def __init__(self, model: lc.llama_model_p, adapters: Sequence[LoraAdapter]) -> None:
        """Load ``adapters`` for ``model``. Raises ModelLoadError naming the file and llama.cpp's reason (missing,
        not a LoRA GGUF, made for another architecture or another model's shapes); none stays loaded then."""
        self._paths = tuple(Path(a.path) for a in adapters)
        self._pointers: list[lc.llama_adapter_lora_p] = []
        self._lock = threading.Lock()
        try:
            for adapter in adapters:
                self._pointers.append(_load(model, Path(adapter.path)))
        except BaseException:
            self.free()
            raise
        self._scales: Scales = tuple(float(a.scale) for a in adapters)
        self._applied: Scales | None = None  # the scales set on the context (None: none set yet, nothing applied)
        self.bytes = sum(p.stat().st_size for p in self._paths)  # what they hold in memory, about their files' size

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def scales(self) -> Scales:
        """The scales requests that name no adapters are served with now."""
        return self._scales

    def states(self) -> tuple[LoraState, ...]:
        scales = self._scales
        return tuple(LoraState(i, path, scale) for i, (path, scale) in enumerate(zip(self._paths, scales, strict=True)))

    def set_scales(self, scales: Mapping[int, float]) -> None:
        """Make ``scales`` (id -> scale; adapters left out: 0) the global ones. Raises InvalidRequest for an id no
        adapter has (llama-server ignores it)."""
        self._scales = self.resolve(tuple(scales.items()), param="id")

    def for_request(self, lora: tuple[tuple[int, float], ...] | None) -> Scales:
        """The scales a request is served with: its own ``lora`` pairs (adapters it leaves out at 0, as
        llama-server), or the global ones when it names none. Raises InvalidRequest for an unknown id."""
        return self._scales if lora is None else self.resolve(lora, param="lora")

    def resolve(self, pairs: tuple[tuple[int, float], ...], *, param: str) -> Scales:
        scales = [0.0] * len(self._paths)
        for adapter_id, scale in pairs:
            if not 0 <= adapter_id < len(scales):
                known = f"ids 0 to {len(scales) - 1}" if scales else "none: the model was loaded without --lora"
                raise InvalidRequest(
                    f"no LoRA adapter has id {adapter_id}", param=param, hint=f"GET /lora-adapters lists them ({known})"
                )
            scales[adapter_id] = float(scale)
        return tuple(scales)

    def apply(self, ctx: lc.llama_context_p, scales: Scales) -> None:
        """Set ``scales`` on ``ctx`` for the next decode, unless they are set already."""
        if scales == self._applied or (self._applied is None and not any(scales)):
            return
        n = len(self._pointers)
        pointers = (lc.llama_adapter_lora_p_ctypes * n)(*cast(list[Any], self._pointers))
        values = (ctypes.c_float * n)(*scales)
        lc.llama_set_adapters_lora(ctx, pointers, n, values)
        self._applied = scales

    def free(self) -> None:
        """Free the adapters (after the context that applies them is done with; the model frees any left)."""
        with self._lock:
            pointers, self._pointers = self._pointers, []
        for pointer in pointers:
            lc.llama_adapter_lora_free(pointer)


def check_adapter_files(adapters: Sequence[LoraAdapter]) -> None:
    """Refuse, before anything loads, an adapter whose file is not there (ModelLoadError naming it)."""
    for adapter in adapters:
        if not Path(adapter.path).is_file():
            raise ModelLoadError(f"LoRA adapter not found: {adapter.path}", hint="check the path given to --lora")


def _load(model: lc.llama_model_p, path: Path) -> lc.llama_adapter_lora_p:
    check_adapter_files((LoraAdapter(path),))
    errors = _Errors()
    source = logging.getLogger("localinfer.backends.llamacpp.model")  # where llama.cpp's log lines go
    source.addHandler(errors)
    try:
        pointer = lc.llama_adapter_lora_init(model, str(path).encode())
    finally:
        source.removeHandler(errors)
    if not pointer:
        raise ModelLoadError(
            f"llama.cpp could not load the LoRA adapter {path}: {_refusal(errors.lines)}",
            hint="give a LoRA GGUF made for this model (localinfer convert FOLDER --to gguf-lora --base MODEL)",
        )
    return cast(lc.llama_adapter_lora_p, pointer)


def next_group(groups: Sequence[Scales], last: Scales | None, steps: int = TURN_STEPS) -> Scales:
    """Of the scale sets the busy slots hold (``groups``, in slot order, no repeats), the one to batch this step:
    ``last`` (the one batched last step, for ``steps`` steps in a row) until its turn of TURN_STEPS steps is over,
    then the set after it, so that every set gets its turn; the first when ``last`` is no longer among them."""
    if last is None or last not in groups:
        return groups[0]
    if steps < TURN_STEPS:
        return last
    return groups[(groups.index(last) + 1) % len(groups)]


def no_adapters(lora: tuple[tuple[int, float], ...] | None) -> tuple[float, ...]:
    """The scales of a request to a model loaded without adapters: none. Raises InvalidRequest when it names one."""
    if lora:
        raise InvalidRequest(
            f"no LoRA adapter has id {lora[0][0]}: the model was loaded without adapters",
            param="lora",
            hint="load some with --lora FILE",
        )
    return ()
