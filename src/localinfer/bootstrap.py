"""The one composition root: settings in; the model library, this machine's hardware profile, the engine (its
scheduler and backend registry inside) and the in-process client out. ``serve``, the app (``localinfer``,
``localinfer --serve``) and ``run`` build what they serve with ``local_stack``; none wires these parts itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localinfer.backends.base import LoraAdapter
from localinfer.backends.registry import backends_for
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.engine.load_plan import ServedAs
from localinfer.hardware.detect import detect
from localinfer.hardware.profile import HardwareProfile
from localinfer.hardware.rpc_devices import RemoteDevice
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest, ModelSource


@dataclass(frozen=True)
class LocalStack:
    settings: Settings
    library: ModelLibrary
    hardware: HardwareProfile
    models: ModelSource  # what the engine resolves names with
    engine: Engine
    client: LocalClient


def local_stack(
    settings: Settings,
    *,
    library: ModelLibrary | None = None,
    hardware: HardwareProfile | None = None,
    names_only: bool = True,
    served: Manifest | None = None,
    original: str | None = None,
    serving: str | None = None,
    rpc_devices: tuple[RemoteDevice, ...] = (),
) -> LocalStack:
    """Everything an in-process engine needs, built from ``settings``. ``names_only`` (anything that answers
    HTTP clients): models are resolved by name only, never as paths, ``served`` (the model the command line
    named, perhaps as a path, under its own name; ``original``: the name it is listed under) among them; without,
    the library resolves paths too (the person at the keyboard). ``serving``: the URL the API is served at.
    ``rpc_devices``: the RPC workers' devices and the memory they offered at start, for the planner."""
    library = library or ModelLibrary.from_settings(settings)
    hardware = hardware or detect()
    models: ModelSource = ServedModels(library, served, original=original) if names_only else library
    served_as = (
        {
            served.name: ServedAs(
                settings.chat_template, settings.pooling or "", lora_adapters(settings), settings.mmproj
            )
        }
        if served is not None
        else {}
    )
    backends = backends_for(settings)  # Hugging Face folders on the engine named; GGUF on RPC workers in a child
    engine = Engine(settings, models, backends, hardware=hardware, served_as=served_as, rpc_devices=rpc_devices)
    client = LocalClient(engine, library, settings, serving=serving)
    return LocalStack(settings, library, hardware, models, engine, client)


def lora_adapters(settings: Settings) -> tuple[LoraAdapter, ...]:
    """The adapters of ``settings.lora`` (FILE or FILE:SCALE entries: a colon not followed by a number is part of
    the path), all at scale 0 with ``lora_init_without_apply``."""
    adapters = []
    for entry in settings.lora:
        path, sep, scale = entry.rpartition(":")
        try:
            value = float(scale) if sep and path else None
        except ValueError:
            value = None
        if value is None:
            path, value = entry, 1.0
        adapters.append(LoraAdapter(Path(path).expanduser(), 0.0 if settings.lora_init_without_apply else value))
    return tuple(adapters)
