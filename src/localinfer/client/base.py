"""The ``InferenceClient`` protocol: chat, list, load, pull, remove and status, wherever the engine runs."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Protocol

from localinfer.backends.base import DeviceUse, LoraState
from localinfer.progress import ProgressEvent
from localinfer.types import ChatRequest, ModelInfo, TokenChunk


@dataclass(frozen=True)
class LoadedModelStatus:
    """How one loaded model runs: its backend, context, slots, CPU threads and GPU layers."""

    name: str
    backend: str
    context_length: int
    slots: int
    threads: int | None = None  # None: not reported (a remote server)
    gpu_layers: int = 0
    size_bytes: int = 0  # the weights in memory
    memory_bytes: int = 0  # what the scheduler counts it as taking: weights, KV cache and compute buffers
    pinned: bool = False  # never unloaded for room or by keep-alive
    in_flight: int = 0  # requests running on it now
    expires_in: float | None = None  # seconds until its keep-alive unloads it; None: in use, pinned or for good
    vram_bytes: int = 0  # the part of memory_bytes on GPUs
    cache_type_k: str = ""  # the KV cache's element types (llama.cpp); "": the backend's own
    cache_type_v: str = ""
    devices: tuple[DeviceUse, ...] = ()  # where its memory is, device by device (llama.cpp over RPC workers)
    adapters: tuple[LoraState, ...] = ()  # the LoRA adapters loaded with it, at their global scales

    def lora(self) -> str:
        """Its adapters as ``ps`` shows them: ``tone.gguf x1, style.gguf x0.5``; "" for none."""
        return ", ".join(f"{a.path.name} x{a.scale:g}" for a in self.adapters)

    def spans(self) -> str:
        """The devices it is on with what each holds, as ``ps`` shows them: ``CPU 60 MB, RPC0 (10.0.0.2:50052)
        52 MB``; "" when the backend does not say."""
        return ", ".join(
            f"{d.name}{'' if d.where == 'local' else f' ({d.where})'} {d.size_bytes / 1_000_000:.0f} MB"
            for d in self.devices
        )

    def kv_cache(self) -> str:
        """The KV cache's type as ``ps`` shows it: ``q8_0``, or ``q8_0/f16`` when keys and values differ."""
        if self.cache_type_k == self.cache_type_v:
            return self.cache_type_k or "-"
        return f"{self.cache_type_k or '-'}/{self.cache_type_v or '-'}"

    def until(self, *, exact: bool = True) -> str:
        """When it is unloaded if no request comes, in ``ollama ps``'s words; minutes rounded up unless ``exact``."""
        if self.pinned:
            return "pinned"
        if self.in_flight:
            return f"in use ({self.in_flight})"
        if self.expires_in is None:
            return "forever"
        seconds = round(self.expires_in)
        if not exact:
            return f"{-(-seconds // 60)} min" if seconds >= 60 else f"{seconds} s"
        return f"in {seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"in {seconds} s"

    @property
    def on_rpc_workers(self) -> bool:
        """Whether RPC workers (other machines' devices) hold some of it."""
        return any(d.where != "local" for d in self.devices)

    def placement(self) -> str:
        """Where its memory is, as ``ollama ps`` says it: ``100% CPU``, ``100% GPU`` or ``30%/70% CPU/GPU``; a
        model on RPC workers counts what they hold as ``RPC`` (another machine's, whatever device it lends):
        ``3%/97% CPU/RPC``."""
        if self.on_rpc_workers:
            return _shares((_kind(d), d.size_bytes) for d in self.devices)
        total = self.memory_bytes or self.size_bytes
        gpu = round(100 * self.vram_bytes / total) if total else 0
        if gpu <= 0:
            return "100% CPU"
        return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def _kind(device: DeviceUse) -> str:
    if device.where != "local":
        return "RPC"
    return "CPU" if device.name.upper().startswith("CPU") else "GPU"


def _shares(parts: Iterable[tuple[str, int]]) -> str:
    """``a%/b% X/Y`` of the bytes per kind (CPU, GPU, RPC, in that order): whole percents that add up to 100
    (largest remainders round up), kinds that get 0 % left out."""
    sizes = dict.fromkeys(("CPU", "GPU", "RPC"), 0)
    for kind, size in parts:
        sizes[kind] += size
    total = sum(sizes.values())
    if not total:
        return "100% RPC"  # nothing measured, but some of it is on workers (the only caller's case)
    exact = {kind: 100 * size / total for kind, size in sizes.items()}
    shares = {kind: int(share) for kind, share in exact.items()}
    for kind in sorted(exact, key=lambda k: exact[k] - shares[k], reverse=True)[: 100 - sum(shares.values())]:
        shares[kind] += 1
    shown = [(kind, share) for kind, share in shares.items() if share > 0]
    return "/".join(f"{share}%" for _, share in shown) + " " + "/".join(kind for kind, _ in shown)


@dataclass(frozen=True)
class ClientStatus:
    """What the status bar shows. Memory figures are None when the engine's machine does not report them."""

    where: str  # "in-process" or the server's URL
    loaded: tuple[LoadedModelStatus, ...] = ()
    memory_used: int | None = None  # bytes the engine's process holds
    memory_total: int | None = None
    memory_available: int | None = None
    serving: str | None = None  # the API's URL when this process serves it too


class InferenceClient(Protocol):
    """Everything the TUI needs from an engine. Errors are ``LocalInferError`` subclasses, whatever the transport."""

    @property
    def where(self) -> str:
        """``in-process``, or the URL of the server this client talks to."""
        ...

    def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream a reply; closing the iterator early stops the generation."""
        ...

    async def models(self) -> list[ModelInfo]:
        """Every model the engine can serve, loaded ones first."""
        ...

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        """Load ``model`` (unloading the others an in-process engine holds), returning when it is ready; a
        ``context_length`` other than the loaded one reloads it where the engine is in this process."""
        ...

    def pull(self, ref: str) -> AsyncGenerator[ProgressEvent, None]:
        """Fetch or register ``ref``; events until it is done. Closing the iterator early stops the pull
        (what was downloaded is kept for a resume)."""
        ...

    async def remove(self, model: str) -> int:
        """Unregister ``model`` and delete the files only it uses; the bytes freed."""
        ...

    async def status(self) -> ClientStatus: ...

    async def close(self) -> None: ...
