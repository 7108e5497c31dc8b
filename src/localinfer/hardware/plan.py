"""The planner: a hardware profile and a model in, a backend and how to run it out, each choice explained.

Rules (issue 6):
- GGUF runs on llama.cpp, with as many layers on the GPU as fit: each layer's weights plus its slice of the KV
  cache for the context and slots, after a compute reserve and a margin per device.
- ONNX (onnxruntime-genai) runs on ONNX Runtime with the best provider present: CUDA, DirectML, CoreML, else CPU.
- A Hugging Face (safetensors) model runs on an engine run as a child process: vLLM by default, only on Linux with
  an NVIDIA GPU of compute capability >= 8.0 and >= 40 GiB, with vllm importable; SGLang, TGI or TensorRT-LLM when
  the ``engine`` setting (``--engine``) names one, on Linux with an NVIDIA GPU of the compute capability it needs.
  A built TensorRT-LLM engine folder runs on TensorRT-LLM (the registry knows it by its files; its callers pass
  that engine, ``engine_asked`` False), with TensorRT-LLM's own GPU rule, not vLLM's.
- The KV cache is f16, or q8_0 (about half the memory, a small loss) when an f16 one a whole context long does
  not fit beside the weights; the context shrinks only when even that does not fit.
- The user's ``--backend``, ``--gpu-layers``, ``--ctx`` and ``--cache-type-k/-v`` win over every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from localinfer.defaults import CTX_CAP
from localinfer.errors import LocalInferError
from localinfer.hardware.installed import ENGINE_INSTALLS, ENGINE_NAMES, EngineInstall
from localinfer.hardware.model_profile import ModelProfile
from localinfer.hardware.profile import BackendAvailability, GiB, GPUInfo, HardwareProfile
from localinfer.hardware.rpc_devices import Placed, RemoteDevice, Target, split_layers
from localinfer.types import DEFAULT_KV_CACHE_TYPE, kv_cache_scale

MiB = 1 << 20
BACKENDS = ("llamacpp", "onnx", *ENGINE_NAMES)  # the engines run as child processes: vllm, sglang, tgi, trtllm
CTX_FLOOR = 512
MOST_SLOTS = 4
GPU_COMPUTE_RESERVE = 512 * MiB  # llama.cpp's compute buffers and CUDA's context
CPU_COMPUTE_RESERVE = 256 * MiB
VLLM_MIN_MEMORY = 40 * GiB
VLLM_MIN_CC = (8, 0)
VLLM_MEMORY_SHARE = 0.9  # vLLM's default --gpu-memory-utilization
VLLM_WEIGHTS_SHARE = 0.7  # of that, what weights may take so the KV cache keeps room for long contexts
OFFLOAD_APIS = ("cuda", "rocm", "metal", "vulkan")
# llama.cpp's names for the backends that reach a GPU of each API natively (installed.py lists what a build has)
_NATIVE_BACKENDS = {"cuda": ("CUDA",), "rocm": ("ROCm", "HIP"), "metal": ("Metal", "MTL"), "vulkan": ("Vulkan",)}
_VULKAN_REACHES = ("cuda", "rocm", "vulkan", "directml")  # GPUs a Vulkan driver drives (not Apple's: MoltenVK aside)
SMALL_KV_CACHE_TYPE = "q8_0"  # what the cache is kept in when an f16 one does not fit
ORT_PROVIDERS = (  # (provider, what it needs, how to say it)
    ("CUDAExecutionProvider", "nvidia", "the NVIDIA GPU through CUDA"),
    ("DmlExecutionProvider", "directml", "the GPU through DirectML"),
    ("CoreMLExecutionProvider", "apple", "Apple's Neural Engine and GPU through CoreML"),
)


class PlanError(LocalInferError):
    """The model cannot run on this machine as asked (a backend missing, a format no backend here serves)."""


@dataclass(frozen=True)
class Overrides:
    backend: str | None = None
    gpu_layers: int | None = None  # -1: all
    ctx_size: int | None = None
    parallel: int | None = None
    threads: int | None = None
    cache_type_k: str | None = None  # the KV cache's element types (types.KV_CACHE_BYTES); None: planned
    cache_type_v: str | None = None
    flash_attn: str = "auto"  # "off": plain attention, which cannot read a quantized value cache
    rpc_workers: int = 0  # llama.cpp RPC workers (serve --rpc) whose devices take offloaded layers
    rpc_devices: tuple[RemoteDevice, ...] = ()  # their devices with the memory they offer, when asked (hw --plan)
    tensor_split: tuple[float, ...] = ()  # shares of the offloaded layers per device, workers first; (): by memory
    engine: str | None = None  # the engine for Hugging Face folders (vllm, sglang, tgi, trtllm); None: vLLM
    engine_asked: bool = True  # False: ``engine`` was chosen by the folder's files (a built TensorRT-LLM engine)
    projector_offload: bool = True  # a multimodal projector computes on the GPU where there is one (--mmproj-offload)


@dataclass(frozen=True)
class Plan:
    backend: str  # llamacpp, onnx, vllm
    device: str  # "cpu", "cuda:0", "cuda:0,1", "metal", "directml", ...
    gpu_layers: int  # layers offloaded (llama.cpp); the output layer counts as one
    ctx_size: int
    parallel: int
    threads: int
    provider: str | None = None  # the ONNX Runtime execution provider
    memory_bytes: int = 0  # weights + KV cache + compute reserve, all devices
    fits: bool = True
    reasons: tuple[str, ...] = ()
    engine_args: tuple[str, ...] = ()  # for an engine run as a process, as they are
    tensor_parallel: int = 0  # GPUs an engine run as a process splits the model over (its own flag); 0: one
    cache_type_k: str = DEFAULT_KV_CACHE_TYPE  # llama.cpp's KV cache element types
    cache_type_v: str = DEFAULT_KV_CACHE_TYPE
    split: tuple[Placed, ...] = ()  # where the offloaded layers go, when RPC workers' devices were counted


def _gb(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def plan(hw: HardwareProfile, model: ModelProfile, overrides: Overrides = Overrides()) -> Plan:
    """Choose how to run ``model`` here. Raises PlanError when nothing here can serve it as asked."""
    named = overrides.engine if model.format == "hf" else None
    backend = overrides.backend or named or {"gguf": "llamacpp", "onnx": "onnx", "hf": "vllm"}[model.format]
    if backend not in BACKENDS:
        raise PlanError(f"there is no backend called {backend}", hint="use " + ", ".join(BACKENDS))
    engine = _engine(backend)
    if engine is not None:
        _check_engine_hardware(hw, model, engine)  # before availability: installing it would not help without the GPU
    available = hw.backend(backend)
    if not available.available:
        raise PlanError(f"the {backend} backend is not available here: {available.reason}", hint=_install(backend))
    if backend == "llamacpp":
        if model.format != "gguf":
            raise PlanError(f"llama.cpp runs GGUF files, not {model.format} models", hint="pull a GGUF of it")
        return _plan_llamacpp(hw, model, overrides, available)
    if backend == "onnx":
        if model.format != "onnx":
            raise PlanError("ONNX Runtime runs ONNX models", hint="convert it: localinfer convert MODEL --to onnx")
        return _plan_onnx(hw, model, overrides)
    assert engine is not None  # the backends left are engines
    asked = (backend == named and overrides.engine_asked) or overrides.backend is not None
    return _plan_engine(hw, model, overrides, engine, asked=asked)


def _engine(name: str) -> EngineInstall | None:
    return next((e for e in ENGINE_INSTALLS if e.name == name), None)


def _install(backend: str) -> str:
    engine = _engine(backend)
    if engine is not None:
        return engine.how
    return {"onnx": "pip install 'localinfer[onnx]'"}.get(backend, "reinstall localinfer")


def _threads(hw: HardwareProfile, overrides: Overrides) -> int:
    return overrides.threads or max(1, hw.cpu.physical_cores)


def _context(model: ModelProfile, overrides: Overrides) -> tuple[int, str]:
    if overrides.ctx_size:
        return overrides.ctx_size, f"context {overrides.ctx_size} tokens, as asked"
    trained = model.context_train or 4096
    if trained > CTX_CAP:
        return CTX_CAP, f"context {CTX_CAP} tokens of the {trained} the model was trained for (--ctx for more)"
    return trained, f"context {trained} tokens, all the model was trained for"


def _ram_budget(hw: HardwareProfile) -> int:
    available = hw.memory.available
    return max(0, available - max(GiB, available // 10))


def _gpu_free(gpu: GPUInfo) -> int:
    return gpu.memory_free if gpu.memory_free is not None else int(gpu.memory_total * 0.9)


def _gpu_name(gpu: GPUInfo) -> str:
    """The name llama.cpp gives ``gpu`` in its logs (CUDA0, ROCm0, Vulkan0, MTL0)."""
    prefix = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "metal": "MTL"}.get(gpu.api, gpu.api.upper())
    return f"{prefix}{gpu.index}"


def _remote_budget(device: RemoteDevice) -> int:
    """What layers may take of an RPC worker's device: what it reports free less a twentieth and the compute
    reserve (a worker's CPU reports all its RAM as free)."""
    return max(0, device.free - device.total // 20 - CPU_COMPUTE_RESERVE)


def _gpu_budget(gpu: GPUInfo, hw: HardwareProfile) -> int:
    """What llama.cpp may put on ``gpu``: its free memory (the shared RAM for unified memory) less a margin and the
    compute reserve."""
    free = _gpu_free(gpu)
    if gpu.unified_memory:
        free = min(free, hw.memory.available)
    margin = max(512 * MiB, gpu.memory_total // 20)
    return max(0, free - margin - GPU_COMPUTE_RESERVE)


def offload_gpus(hw: HardwareProfile, llama: BackendAvailability) -> list[GPUInfo]:
    """The GPUs this build of llama.cpp (``llama``) can put layers on, each with the API it reaches them by: a GPU
    of its own backend's kind (CUDA for NVIDIA, ROCm/HIP, Metal), else any GPU through Vulkan where it has Vulkan
    (llama.cpp's Vulkan release on Windows drives a GeForce or a Radeon that nvidia-smi or DirectML found)."""
    if not llama.gpu_offload:
        return []
    if not llama.gpu_backends:  # not known (a probe that did not say): the GPUs of the APIs llama.cpp offloads to
        return [g for g in hw.gpus if g.api in OFFLOAD_APIS]
    found = []
    for gpu in hw.gpus:
        if any(name in llama.gpu_backends for name in _NATIVE_BACKENDS.get(gpu.api, ())):
            found.append(gpu)
        elif "Vulkan" in llama.gpu_backends and gpu.api in _VULKAN_REACHES:
            found.append(replace(gpu, api="vulkan"))
    return found


def _plan_llamacpp(hw: HardwareProfile, model: ModelProfile, overrides: Overrides, llama: BackendAvailability) -> Plan:
    reasons = [f"llama.cpp: {model.name} is a GGUF file"]
    ctx, why_ctx = _context(model, overrides)
    gpu_offload = llama.gpu_offload
    gpus = offload_gpus(hw, llama)
    unified = any(g.unified_memory for g in gpus)
    gpu_room = sum(_gpu_budget(g, hw) for g in gpus)
    ram = _ram_budget(hw)
    room = ram if unified else ram + gpu_room  # unified memory is the same RAM: count it once
    room += sum(_remote_budget(d) for d in overrides.rpc_devices)  # the workers' memory, where it was asked
    type_k, type_v, why_kv = _kv_cache_types(model, overrides, ctx, room)
    reasons.append(why_kv)
    kv_scale = kv_cache_scale(type_k, type_v)
    kv_token = int((model.kv_bytes_per_token or 0) * kv_scale)
    fixed = model.size_bytes + CPU_COMPUTE_RESERVE + model.projector_total  # what the context does not change
    projector_on_gpu = bool(model.projector_total and gpus and overrides.projector_offload)
    if model.projector_total:
        reasons.append(_projector_reason(model, gpus, projector_on_gpu))
        if projector_on_gpu and not unified:
            gpu_room = max(gpu_room - model.projector_total, 0)  # the layers get what the projector leaves

    # The context shrinks (unless it was asked for) until one slot fits beside the weights; when the weights
    # alone do not fit, shrinking it would not help.
    weights_fit = fixed + kv_token * CTX_FLOOR <= room
    while not overrides.ctx_size and weights_fit and fixed + kv_token * ctx > room:
        ctx //= 2
        why_ctx = f"context {ctx} tokens: a longer one would not fit in memory"
    reasons.append(why_ctx)

    slots = overrides.parallel or _slots(room - fixed, kv_token * ctx)
    reasons.append(
        f"{slots} slot{'s' if slots != 1 else ''}"
        + (" as asked" if overrides.parallel else ", as many as memory holds")
    )
    need = fixed + kv_token * ctx * slots
    fits = need <= room
    if not fits:
        reasons.append(f"needs {_gb(need)} but only {_gb(room)} can be used here: it will swap or fail to load")

    layers_total = (model.n_layers or 0) + 1  # llama.cpp counts the output layer as one more
    gpu_layers, device = 0, "cpu"
    split: tuple[Placed, ...] = ()
    per_layer = model.layer_bytes + int(model.kv_bytes_per_token_per_layer * kv_scale) * ctx * slots
    if overrides.rpc_devices and overrides.gpu_layers != 0:
        targets = [Target(d.name, d.endpoint, d.free, _remote_budget(d)) for d in overrides.rpc_devices]
        targets += [Target(_gpu_name(g), g.name, _gpu_free(g), _gpu_budget(g, hw)) for g in gpus]
        cut = split_layers(targets, model.n_layers or 0, per_layer, overrides.gpu_layers, overrides.tensor_split)
        gpu_layers, split, fits = cut.layers, cut.placed, fits and cut.fits
        device = "rpc" + (f"+{_devices(gpus)}" if gpus else "")
        reasons.extend(cut.reasons)
    elif overrides.rpc_workers and overrides.gpu_layers != 0:
        gpu_layers, device, why = _rpc_layers(overrides, gpus, layers_total)
        reasons.append(why)
    elif overrides.gpu_layers is not None and overrides.gpu_layers != 0 and not gpus:
        reasons.append("GPU layers were asked for, but no GPU here can take them: every layer runs on the CPU")
    elif overrides.gpu_layers is not None:
        gpu_layers = layers_total if overrides.gpu_layers < 0 else min(overrides.gpu_layers, layers_total)
        device = _devices(gpus) if gpu_layers else "cpu"
        reasons.append(f"{gpu_layers} layers on the GPU, as asked")
    elif not hw.gpus:
        reasons.append("no GPU was found: every layer runs on the CPU")
    elif not gpu_offload:
        reasons.append("llama-cpp-python was built without GPU support: every layer runs on the CPU")
    elif not gpus:
        built = f" (built with {', '.join(llama.gpu_backends)})" if llama.gpu_backends else ""
        reasons.append(f"this build of llama.cpp{built} cannot reach the GPU found")
    else:
        gpu_layers = min(layers_total, gpu_room // max(per_layer, 1))
        device = _devices(gpus) if gpu_layers else "cpu"
        where = f"{len(gpus)} GPUs" if len(gpus) > 1 else gpus[0].name
        if gpu_layers == layers_total:
            reasons.append(f"all {layers_total} layers on {where} ({_gb(gpu_room)} free for them)")
        elif gpu_layers:
            reasons.append(
                f"{gpu_layers} of {layers_total} layers on {where}: each takes {per_layer / MiB:.0f} MiB with its "
                f"KV cache and {_gb(gpu_room)} is free; the rest run on the CPU"
            )
        else:
            reasons.append(f"no layer fits on {where} ({_gb(gpu_room)} free): every layer runs on the CPU")
    threads = _threads(hw, overrides)
    reasons.append(f"{threads} CPU threads, one per physical core")
    return Plan(
        "llamacpp",
        device,
        gpu_layers,
        ctx,
        slots,
        threads,
        memory_bytes=need,
        fits=fits,
        reasons=tuple(reasons),
        cache_type_k=type_k,
        cache_type_v=type_v,
        split=split,
    )


def _projector_reason(model: ModelProfile, gpus: list[GPUInfo], on_gpu: bool) -> str:
    taken = (
        f"the projector takes {model.projector_total / MiB:.0f} MiB ({model.projector_bytes / MiB:.0f} MiB of weights "
        f"and about {model.projector_compute_bytes / MiB:.0f} MiB to encode an image)"
    )
    if on_gpu:
        return f"{taken} on {_devices(gpus)}"
    return f"{taken} in RAM" + (" (--no-mmproj-offload)" if gpus else "")


def _rpc_layers(overrides: Overrides, gpus: list[GPUInfo], layers_total: int) -> tuple[int, str, str]:
    """Layers offloaded, the device and why, with RPC workers: all unless --gpu-layers says how many (the first
    ones stay on this machine's CPU), shared by llama.cpp among the workers and the local GPUs."""
    asked = overrides.gpu_layers
    layers = layers_total if asked is None or asked < 0 else min(asked, layers_total)
    workers = f"{overrides.rpc_workers} RPC worker{'s' if overrides.rpc_workers > 1 else ''}"
    over = f"{workers} and {len(gpus)} local GPU{'s' if len(gpus) > 1 else ''}" if gpus else workers
    rest = "" if layers == layers_total else f"; the first {layers_total - layers} on this machine's CPU"
    how = "as asked" if asked is not None and asked >= 0 else "all"
    why = f"{layers} of {layers_total} layers ({how}) over {over}, shared by free memory or --tensor-split{rest}"
    return layers, "rpc" + (f"+{_devices(gpus)}" if gpus else ""), why


def _kv_cache_types(model: ModelProfile, overrides: Overrides, ctx: int, room: int) -> tuple[str, str, str]:
    """The KV cache's key and value types and why: as asked; else f16 when one slot of it a whole context long
    fits beside the weights, else q8_0, for the keys only under plain attention (which cannot read quantized values);
    the context then shrinks only if even that does not fit."""
    if overrides.cache_type_k or overrides.cache_type_v:
        type_k = overrides.cache_type_k or DEFAULT_KV_CACHE_TYPE
        type_v = overrides.cache_type_v or DEFAULT_KV_CACHE_TYPE
        return type_k, type_v, f"KV cache of {type_k} keys and {type_v} values, as asked"
    f16_slot = (model.kv_bytes_per_token or 0) * ctx
    if model.size_bytes + f16_slot + CPU_COMPUTE_RESERVE <= room or model.size_bytes + CPU_COMPUTE_RESERVE > room:
        return DEFAULT_KV_CACHE_TYPE, DEFAULT_KV_CACHE_TYPE, "KV cache in f16"
    small = SMALL_KV_CACHE_TYPE
    # plain attention (--flash-attn off) reads quantized keys but not quantized values
    values = DEFAULT_KV_CACHE_TYPE if overrides.flash_attn == "off" else small
    share = kv_cache_scale(small, values)
    kept = f"{small} keys and {values} values" if values != small else small
    return (
        small,
        values,
        f"KV cache in {kept} ({share:.0%} of f16's memory): an f16 one {ctx} tokens long "
        f"({_gb(f16_slot)}) would not fit beside the weights",
    )


def _slots(room: int, per_slot: int) -> int:
    """Up to MOST_SLOTS, as many as fit in a quarter of the memory left after the weights."""
    if per_slot <= 0:
        return MOST_SLOTS
    return max(1, min(MOST_SLOTS, max(room, 0) // 4 // per_slot))


def _devices(gpus: list[GPUInfo]) -> str:
    api = gpus[0].api
    return "metal" if api == "metal" else f"{api}:" + ",".join(str(g.index) for g in gpus)


def _plan_onnx(hw: HardwareProfile, model: ModelProfile, overrides: Overrides) -> Plan:
    ctx, why_ctx = _context(model, overrides)
    provider, device, why = "CPUExecutionProvider", "cpu", "ONNX Runtime on the CPU: no GPU provider fits this machine"
    vendors = {g.vendor for g in hw.gpus}
    apis = {g.api for g in hw.gpus}
    for name, needs, said in ORT_PROVIDERS:
        present = name in hw.onnx_providers
        if present and (needs in vendors or needs in apis):
            provider, device, why = name, needs if needs != "nvidia" else "cuda:0", f"ONNX Runtime on {said}"
            break
    threads = _threads(hw, overrides)
    need = model.size_bytes + (model.kv_bytes_per_token or 0) * ctx + CPU_COMPUTE_RESERVE
    reasons = (why, why_ctx, "1 slot: onnxruntime-genai runs one request at a time", f"{threads} CPU threads")
    return Plan("onnx", device, 0, ctx, 1, threads, provider=provider, memory_bytes=need, reasons=reasons)


def _engine_gpus(hw: HardwareProfile, engine: EngineInstall) -> list[GPUInfo]:
    """The GPUs ``engine`` runs on: NVIDIA ones of its compute capability; for vLLM, the default engine, only
    datacenter ones (compute capability 8.0, 40 GiB), where it serves faster than llama.cpp."""
    need, memory = engine.min_compute, 0
    if engine.name == "vllm":
        need, memory = max(need, VLLM_MIN_CC), VLLM_MIN_MEMORY
    return [
        g
        for g in hw.gpus
        if g.vendor == "nvidia" and (g.compute_capability or (0, 0)) >= need and g.memory_total >= memory
    ]


def _check_engine_hardware(hw: HardwareProfile, model: ModelProfile, engine: EngineInstall) -> None:
    if model.format == "gguf":
        raise PlanError(f"{engine.title} is not used for GGUF files here", hint="serve it with llama.cpp (the default)")
    if model.format == "onnx":
        raise PlanError(f"{engine.title} does not run ONNX models", hint="serve it with ONNX Runtime (the default)")
    convert = "convert the model to ONNX (localinfer convert MODEL --to onnx) or pull a GGUF of it"
    if hw.os != "linux":
        raise PlanError(f"{model.name} needs {engine.title}, which runs on Linux only", hint=convert)
    if not _engine_gpus(hw, engine):
        cc = ".".join(map(str, VLLM_MIN_CC if engine.name == "vllm" else engine.min_compute))
        memory = " with 40 GiB or more" if engine.name == "vllm" else ""
        raise PlanError(
            f"{model.name} needs {engine.title}, which needs an NVIDIA GPU of compute capability {cc} or more{memory}",
            hint=convert,
        )


def _plan_engine(
    hw: HardwareProfile, model: ModelProfile, overrides: Overrides, engine: EngineInstall, *, asked: bool
) -> Plan:
    ctx, why_ctx = _context(model, overrides)
    gpus = _engine_gpus(hw, engine)
    gpu = gpus[0]
    on = f"{engine.title} on {gpu.name} ({_gb(gpu.memory_total)}, compute capability {gpu.compute_capability})"
    if asked:
        why = f"{on}, as asked (--engine {engine.name})"
    elif engine.name != "vllm":  # chosen by the folder's files: a built engine runs only on the engine that built it
        why = f"{on}: the folder is a built {engine.title} engine, which only {engine.title} runs"
    else:
        why = (
            f"{on}: a datacenter GPU serves {model.format} models fastest with vLLM, the default engine "
            "(--engine sglang, tgi or trtllm picks another)"
        )
    reasons = [why, why_ctx, f"{engine.title} batches requests itself"]
    per_gpu = int(min(g.memory_total for g in gpus) * VLLM_MEMORY_SHARE * VLLM_WEIGHTS_SHARE)
    size = 1  # tensor parallel size: a power of two, as attention heads divide by it
    while model.size_bytes > per_gpu * size and size * 2 <= len(gpus):
        size *= 2
    fits = model.size_bytes <= per_gpu * size
    if size > 1:
        reasons.append(
            f"split over {size} GPUs (tensor parallelism {size}): its {_gb(model.size_bytes)} of weights "
            f"need more than the {_gb(per_gpu)} one GPU gives them beside the KV cache"
        )
    if not fits:
        reasons.append(
            f"needs {_gb(model.size_bytes)} for weights but {size} GPU{'s' if size > 1 else ''} give "
            f"{_gb(per_gpu * size)}: it will fail to load; pull a quantized GGUF of it"
        )
    return Plan(
        engine.name,
        "cuda:" + ",".join(str(g.index) for g in gpus[:size]),
        -1,
        ctx,
        overrides.parallel or 0,
        _threads(hw, overrides),
        memory_bytes=model.size_bytes,
        fits=fits,
        reasons=tuple(reasons),
        tensor_parallel=size if size > 1 else 0,
    )


def fits_in(hw: HardwareProfile, size_bytes: int) -> bool:
    """Whether a model file of ``size_bytes`` (plus a fifth for its cache and buffers) fits this machine's GPUs
    when llama.cpp can use them, else its RAM: the test ``pull`` uses to pick a quantization."""
    need = int(size_bytes * 1.2) + CPU_COMPUTE_RESERVE
    gpus = offload_gpus(hw, hw.backend("llamacpp"))
    if gpus:
        return need <= sum(_gpu_budget(g, hw) for g in gpus)
    return need <= _ram_budget(hw)
