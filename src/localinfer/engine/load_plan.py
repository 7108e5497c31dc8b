"""Load planning: how each model loads (its ``LoadSpec``) and what it takes once loaded (its ``Need``).

The spec comes from the settings, from how the model is served otherwise than its file says (``ServedAs``: the
model ``serve`` was started with), and, with a hardware profile, from the planner (GPU layers, context, slots,
threads, the ONNX Runtime provider, a relayed engine's flags), with the draft model, projector and LoRA adapters
loaded beside it counted in. The engine asks this before it loads a model and the scheduler before it makes room.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from localinfer.backends.base import Backend, LoadSpec, LoraAdapter
from localinfer.backends.llamacpp.devices import parse_devices
from localinfer.backends.llamacpp.rpc.wire import parse_endpoints
from localinfer.backends.registry import PLANNED_FORMATS, RELAYED_FORMATS, engine_for
from localinfer.config import Settings
from localinfer.engine.device_memory import RAM, plan_need
from localinfer.engine.profiles import model_profile, with_its_projector
from localinfer.engine.scheduler import Need
from localinfer.errors import LocalInferError, ModelLoadError
from localinfer.hardware.layer_split import parse_tensor_split
from localinfer.hardware.model_profile import ModelProfile, from_path, with_adapters, with_draft
from localinfer.hardware.plan import Overrides, PlanError, plan
from localinfer.hardware.profile import HardwareProfile
from localinfer.hardware.rpc_devices import RemoteDevice
from localinfer.models.store import Manifest, ModelSource
from localinfer.types import DEFAULT_KV_CACHE_TYPE, OLLAMA_FORMAT_NAMES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedAs:
    """How one model is served otherwise than its file says: ``chat_template`` (a name of llama.cpp's built-in
    templates, or Jinja text) in place of its own; ``pooling`` (mean, cls, last, rank, none) in place of the stated
    one."""

    chat_template: str | None = None
    pooling: str = ""
    lora: tuple[LoraAdapter, ...] = ()  # LoRA adapters loaded with it (--lora, --lora-scaled), in id order
    mmproj: Path | None = None  # its projector, in place of the one paired with it (--mmproj)


NOT_OVERRIDDEN: Final = ServedAs()


class LoadPlanner:
    def __init__(
        self,
        settings: Settings,
        models: ModelSource,
        *,
        hardware: HardwareProfile | None = None,
        served_as: Mapping[str, ServedAs] | None = None,
        rpc_devices: tuple[RemoteDevice, ...] = (),
    ) -> None:
        """With ``hardware``, each model loads as the planner says, except where the settings say otherwise;
        without, as the settings say. ``models`` names the draft model when the draft setting is a name.
        ``served_as`` and ``rpc_devices``: as ``Engine`` takes them."""
        self._settings = settings
        self._models = models
        self._hardware = hardware
        self._served_as = dict(served_as or {})
        self._rpc_devices = rpc_devices

    def spec(self, manifest: Manifest, ctx_size: int | None, *, explain: bool = True) -> LoadSpec:
        """How ``manifest`` loads with a context of ``ctx_size`` (None: its own or the configured one); the plan
        logged when ``explain``. Raises ModelLoadError when a relayed engine cannot run here, ModelNotFound for a
        draft model that is no model."""
        s = self._settings
        spec = LoadSpec(
            path=manifest.path,
            name=manifest.name,
            ctx_size=self.context(manifest, ctx_size),
            threads=s.threads,
            batch_size=s.batch_size,
            ubatch_size=s.ubatch_size,
            parallel=s.parallel,
            max_queue=s.max_queue,
            gpu_layers=s.gpu_layers or 0,
            extra_args=tuple(s.engine_args),
            flash_attn=s.flash_attn,
            cache_reuse=s.cache_reuse,
            context_shift=s.context_shift,
            last_token_alone=s.last_token_alone,
            devices=parse_devices(s.device),
            kv_offload=s.kv_offload,
            op_offload=s.op_offload,
            rpc=parse_endpoints(s.rpc),
            tensor_split=parse_tensor_split(s.tensor_split),
            speculation=s.speculation,
            draft_path=self._draft_path(),
            draft_max=s.draft_max,
            draft_min=s.draft_min,
            pooling=self.served(manifest.name).pooling,
            lora=self._lora(manifest),
            mmproj=self.projector_path(manifest),
            mmproj_offload=s.mmproj_offload,
            image_min_tokens=s.image_min_tokens,
            image_max_tokens=s.image_max_tokens,
        )
        if self._asks_kv_cache_types():
            spec = dataclasses.replace(
                spec,
                cache_type_k=s.cache_type_k or DEFAULT_KV_CACHE_TYPE,
                cache_type_v=s.cache_type_v or DEFAULT_KV_CACHE_TYPE,
            )
        if self._hardware is None or manifest.format not in PLANNED_FORMATS:
            return spec
        try:
            chosen = plan(self._hardware, self._profile(manifest), self._overrides(manifest, spec.ctx_size or None))
        except PlanError as exc:
            if manifest.format in RELAYED_FORMATS:  # its engine cannot run here: starting it would only fail later
                raise ModelLoadError(exc.message, hint=exc.hint) from exc
            log.warning("no plan for %s (%s): loading it as configured", manifest.name, exc.message)
            return spec
        except LocalInferError as exc:
            log.warning("no plan for %s (%s): loading it as configured", manifest.name, exc.message)
            return spec
        if explain:
            log.info("plan for %s: %s", manifest.name, "; ".join(chosen.reasons))
        if explain and not chosen.fits:
            log.warning("%s may not fit in memory: %s", manifest.name, chosen.reasons)
        return dataclasses.replace(
            spec,
            ctx_size=chosen.ctx_size,
            threads=chosen.threads,
            parallel=chosen.parallel,
            gpu_layers=chosen.gpu_layers,
            provider=chosen.provider,
            extra_args=spec.extra_args + chosen.engine_args,
            tensor_parallel=chosen.tensor_parallel,
            cache_type_k=chosen.cache_type_k,
            cache_type_v=chosen.cache_type_v,
        )

    def context(self, manifest: Manifest, ctx_size: int | None) -> int:
        """The context ``manifest`` loads with: ``ctx_size`` when asked, else its Modelfile's ``num_ctx``, else the
        configured one (Ollama's order)."""
        if ctx_size is not None:
            return ctx_size
        num_ctx = manifest.defaults.parameter("num_ctx")
        return num_ctx if isinstance(num_ctx, int) and num_ctx > 0 else self._settings.ctx_size

    def projector_path(self, manifest: Manifest) -> Path | None:
        """The projector to load with ``manifest``'s model: --mmproj's for the served model, else the one paired
        with it in the store; none with --no-mmproj."""
        if self._settings.no_mmproj:
            return None
        given = self.served(manifest.name).mmproj
        return given or (manifest.projector.path if manifest.projector is not None else None)

    def served(self, name: str) -> ServedAs:
        """How the model named ``name`` is served otherwise than its file says (nothing: ``NOT_OVERRIDDEN``)."""
        return self._served_as.get(name, NOT_OVERRIDDEN)

    def check_kv_cache_types(self, manifest: Manifest, backend: Backend) -> None:
        """Raise ModelLoadError when the settings ask KV cache types of a backend that keeps its own."""
        if not self._asks_kv_cache_types() or backend.capabilities.kv_cache_types:
            return
        kind = OLLAMA_FORMAT_NAMES.get(manifest.format, manifest.format)
        raise ModelLoadError(
            f"{manifest.name} ({kind}) is served by {backend.name}, which keeps its KV cache in a type "
            "of its own: --cache-type-k/--cache-type-v apply to GGUF models, served by llama.cpp",
            hint="vLLM takes its own: --engine-arg=--kv-cache-dtype=fp8"
            if manifest.format in RELAYED_FORMATS
            else "start the server without them to serve this model",
        )

    def estimate(self, manifest: Manifest, ctx_size: int | None) -> Need:
        """What ``manifest`` loaded with a context of ``ctx_size`` takes, per device: the planner's estimate, or
        its file's size where there is no plan; with the draft model beside it when one drafts for it (its
        weights and KV cache in the plan, its file's size without one)."""
        if self._hardware is not None and manifest.format in PLANNED_FORMATS:
            overrides = self._overrides(manifest, self.context(manifest, ctx_size) or None)
            with suppress(LocalInferError):  # no plan: the files' size
                return plan_need(plan(self._hardware, self._profile(manifest), overrides))
        draft_bytes = 0
        with suppress(LocalInferError, OSError):  # serve checked the draft at start: this one was removed since
            draft = self._draft_for(manifest)
            draft_bytes = draft.stat().st_size if draft is not None else 0
        return {RAM: manifest.size + draft_bytes + self._adapter_bytes(manifest)}

    def _draft_path(self) -> Path | None:
        """The draft model's file when GGUF models speculate with one: the draft setting as a path, else the model
        of that name."""
        draft = self._settings.draft
        if self._settings.speculation != "draft" or not draft:
            return None
        return Path(draft) if Path(draft).is_file() else self._models.resolve(draft).path

    def _overrides(self, manifest: Manifest, ctx_size: int | None) -> Overrides:
        """What the settings ask of the planner for ``manifest``, with a context of ``ctx_size`` (None: planned);
        a Hugging Face folder is planned on the engine that will serve it (a built TensorRT-LLM engine's files
        choose TensorRT-LLM when the engine setting names none), as the registry chooses it."""
        s = self._settings
        return Overrides(
            gpu_layers=0 if parse_devices(s.device) == () else s.gpu_layers,
            ctx_size=ctx_size,
            parallel=s.parallel or None,
            threads=s.threads or None,
            cache_type_k=s.cache_type_k,
            cache_type_v=s.cache_type_v,
            flash_attn=s.flash_attn,
            rpc_workers=len(parse_endpoints(s.rpc)),
            rpc_devices=self._rpc_devices,
            engine=engine_for(manifest, s.engine) if manifest.format in RELAYED_FORMATS else s.engine,
            engine_asked=s.engine is not None,
            projector_offload=s.mmproj_offload,
        )

    def _profile(self, manifest: Manifest) -> ModelProfile:
        """What the planner reads of ``manifest``, with its draft model beside it when one drafts for it (the model
        alone, with a warning, when the draft cannot be read: serve checked it at start, so it was removed since,
        and the load will say so)."""
        profile = with_its_projector(model_profile(manifest), self.projector_path(manifest))
        profile = with_adapters(profile, self._adapter_bytes(manifest))
        try:
            draft = self._draft_for(manifest)
            return with_draft(profile, from_path(draft)) if draft is not None else profile
        except LocalInferError as exc:
            log.warning("planning %s without its draft model: %s", manifest.name, exc.message)
            return profile

    def _lora(self, manifest: Manifest) -> tuple[LoraAdapter, ...]:
        """The LoRA adapters ``manifest``'s model is loaded with: its own (a Modelfile's ADAPTER, an Ollama adapter
        layer: at scale 1, as Ollama applies them), then those ``--lora`` gives the model served."""
        if manifest.format != "gguf":
            return ()
        return (*(LoraAdapter(f.path, 1.0) for f in manifest.adapters), *self.served(manifest.name).lora)

    def _adapter_bytes(self, manifest: Manifest) -> int:
        """What the LoRA adapters loaded with ``manifest`` take: their files' size (a missing one: the load says)."""
        total = 0
        for adapter in self._lora(manifest):
            with suppress(OSError):
                total += adapter.path.stat().st_size
        return total

    def _draft_for(self, manifest: Manifest) -> Path | None:
        """The draft model's file when ``manifest`` speculates with one (GGUF models, served by llama.cpp)."""
        return self._draft_path() if manifest.format == "gguf" else None

    def _asks_kv_cache_types(self) -> bool:
        return (self._settings.cache_type_k, self._settings.cache_type_v) != (None, None)
