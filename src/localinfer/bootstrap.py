"""The one composition root: settings in; the model library, this machine's hardware profile, the engine (its
scheduler and backend registry inside) and the in-process client out. ``serve``, the app (``localinfer``,
``localinfer --serve``) and ``run`` build what they serve with ``local_stack``; none wires these parts itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from localinfer.backends.registry import engine_backends
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine, ServedAs
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
        {served.name: ServedAs(settings.chat_template, settings.pooling or "", settings.mmproj)}
        if served is not None
        else {}
    )
    backends = engine_backends(settings.engine)  # Hugging Face folders on the engine the settings name
    engine = Engine(settings, models, backends, hardware=hardware, served_as=served_as, rpc_devices=rpc_devices)
    client = LocalClient(engine, library, settings, serving=serving)
    return LocalStack(settings, library, hardware, models, engine, client)
