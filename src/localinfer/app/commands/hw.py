"""``localinfer hw``: the hardware detection found (OS, CPU, memory, GPUs) and which backends can run here."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.render import row, section
from localinfer.app.commands.rpc_workers import paste_line
from localinfer.backends.engine_process.recipes import RECIPES
from localinfer.backends.llamacpp.rpc.wire import parse_endpoints, remote_devices
from localinfer.errors import ConfigError
from localinfer.hardware.layer_split import parse_tensor_split
from localinfer.hardware.model_profile import from_gguf, from_path, with_draft
from localinfer.hardware.plan import BACKENDS, Overrides, plan
from localinfer.hardware.profile import GiB
from localinfer.types import kv_cache_type

if TYPE_CHECKING:
    from localinfer.config import Settings
    from localinfer.hardware.model_profile import ModelProfile
    from localinfer.hardware.plan import Plan
    from localinfer.hardware.profile import BackendAvailability, GPUInfo, HardwareProfile
    from localinfer.models.library import ModelLibrary

_GPU_LABEL_WIDTH = 18  # GPU detail rows are indented two more spaces, their values stay in the same column


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "hw",
        help="show the hardware found and the backends that can run on it",
        description="Show what localinfer detects on this machine: OS, CPU and its SIMD features, memory (capped "
        "by a container's limit), GPUs, the inference backends that can run here (or why not) and ONNX "
        "Runtime's execution providers.",
    )
    p.add_argument("--json", action="store_true", help="print the hardware profile as one JSON object")
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long each probe (NVML, nvidia-smi, llama.cpp, ONNX Runtime) may take (default: 10)",
    )
    plan = p.add_argument_group("planning a model")
    plan.add_argument(
        "--plan", metavar="MODEL", help="also show how MODEL (a name, .gguf path or model folder) would run"
    )
    plan.add_argument(
        "--draft", metavar="MODEL", help="with --plan: a draft model for it (serve --draft), planned beside it"
    )
    plan.add_argument("--backend", choices=BACKENDS, help="with --plan: the backend to use instead of the planned one")
    plan.add_argument("--gpu-layers", type=int, help="with --plan: layers on the GPU (-1: all)")
    plan.add_argument("--ctx", type=int, help="with --plan: the context length in tokens")
    plan.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="with --plan: RPC workers taking offloaded layers, each asked the memory it offers (as serve --rpc)",
    )
    plan.add_argument(
        "--tensor-split",
        "-ts",
        metavar="N[,N...]",
        help="with --plan: shares of the offloaded layers per device, the RPC workers first (default: by memory)",
    )
    plan.add_argument("--parallel", type=int, help="with --plan: requests decoded together (slots)")
    plan.add_argument("--cache-type-k", "-ctk", type=_kv_type, metavar="TYPE", help="with --plan: the KV cache's keys")
    plan.add_argument(
        "--cache-type-v", "-ctv", type=_kv_type, metavar="TYPE", help="with --plan: the KV cache's values"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Detect the hardware and print it (detection reports failures as notes, never raises), and with ``--plan``
    how a model would run here; a model that cannot run here is a PlanError (one line and a hint)."""
    planning = (
        args.draft,
        args.backend,
        args.gpu_layers,
        args.ctx,
        args.parallel,
        args.cache_type_k,
        args.cache_type_v,
        args.rpc,
        args.tensor_split,
    )
    if args.plan is None and any(value is not None for value in planning):
        raise ConfigError(
            "--draft, --backend, --gpu-layers, --ctx, --parallel, --cache-type-k/-v, --rpc and --tensor-split go "
            "with --plan MODEL",
            hint="add --plan MODEL",
        )
    from localinfer.hardware.detect import detect  # it probes llama.cpp and ONNX Runtime
    from localinfer.models.library import ModelLibrary

    profile = detect(timeout=args.timeout)
    chosen = None
    if args.plan is not None:
        library = ModelLibrary.from_settings(settings)
        model = model_profile(library, args.plan)
        engine = planned_engine(library, args.plan, settings.engine) if model.format == "hf" else settings.engine
        if args.draft is not None:
            draft = model_profile(library, args.draft)
            if (model.format, draft.format) != ("gguf", "gguf"):
                raise ConfigError(
                    "--draft plans a GGUF model with a GGUF draft model: llama.cpp is what drafts with one",
                    hint="drop --draft, or name two GGUF models of one family",
                )
            model = with_draft(model, draft)
        endpoints = parse_endpoints(args.rpc or "")
        overrides = Overrides(
            backend=args.backend,
            gpu_layers=args.gpu_layers,
            ctx_size=args.ctx,
            parallel=args.parallel,
            cache_type_k=args.cache_type_k,
            cache_type_v=args.cache_type_v,
            rpc_workers=len(endpoints),
            rpc_devices=remote_devices(endpoints),  # each worker asked now: one that does not answer is named
            tensor_split=parse_tensor_split(args.tensor_split or ""),
            engine=engine,
            engine_asked=settings.engine is not None,
        )
        chosen = plan(profile, model, overrides)
    if args.json:
        data: dict[str, Any] = profile.to_json()
        if chosen is not None:
            data = {"hardware": data, "plan": dataclasses.asdict(chosen) | {"draft": args.draft}}
        print(json.dumps(data, indent=2))
    else:
        print(render_report(profile))
        if profile.backend("llamacpp").available:
            print(row("rpc worker", paste_line()))
        if chosen is not None:
            print()
            print(render_plan(args.plan if args.draft is None else f"{args.plan} with the draft {args.draft}", chosen))
    return 0


def model_profile(library: ModelLibrary, ref: str) -> ModelProfile:
    """What the planner needs of ``ref``: a model folder (ONNX or Hugging Face) by path, else a model name or
    a .gguf path as ``serve`` takes them."""
    from localinfer.engine import profiles as engine_profiles
    from localinfer.models.metadata.gguf import cached_gguf_info

    folder = Path(ref).expanduser()
    if folder.is_dir():
        return from_path(folder, folder.name)
    manifest = library.resolve(ref)
    if manifest.format != "gguf":
        return engine_profiles.model_profile(manifest)  # by its genai_config.json or config.json
    profile = from_gguf(manifest.name, cached_gguf_info(manifest.path), manifest.size)
    projector = manifest.projector.path if manifest.projector is not None else None
    return engine_profiles.with_its_projector(profile, projector)


def planned_engine(library: ModelLibrary, ref: str, engine: str | None) -> str:
    """The engine that would serve the Hugging Face model ``ref`` (a folder, or a name): ``engine`` when named,
    else the one its files choose (TensorRT-LLM for a built TensorRT-LLM engine, vLLM for any other), as the
    registry chooses it when the model loads."""
    from localinfer.backends.registry import engine_for
    from localinfer.models.store import hf_manifest

    folder = Path(ref).expanduser()
    return engine_for(hf_manifest(folder) if folder.is_dir() else library.resolve(ref), engine)


def render_plan(name: str, chosen: Plan) -> str:
    """The plan as a section of rows, then why, a sentence per choice."""
    rows = [
        row("backend", chosen.backend + (f" ({chosen.provider})" if chosen.provider else "")),
        row("device", chosen.device),
        row("gpu layers", "all" if chosen.gpu_layers < 0 else str(chosen.gpu_layers)),
        row("context", f"{chosen.ctx_size} tokens"),
        row("kv cache", _kv_label(chosen) if chosen.backend == "llamacpp" else "the backend's own"),
        row("slots", str(chosen.parallel) if chosen.parallel else "the backend's own batching"),
        row("threads", str(chosen.threads)),
        row("memory", _gib(chosen.memory_bytes) + ("" if chosen.fits else " (more than this machine has free)")),
    ]
    why = [f"  - {reason}" for reason in chosen.reasons]
    return "\n".join(section(f"Plan for {name}", [*rows, "why", *why])).rstrip()


def _kv_type(value: str) -> str:
    try:
        return kv_cache_type(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _kv_label(chosen: Plan) -> str:
    if chosen.cache_type_k == chosen.cache_type_v:
        return chosen.cache_type_k
    return f"{chosen.cache_type_k} keys, {chosen.cache_type_v} values"


def render_report(profile: HardwareProfile) -> str:
    """The profile as indented sections: System, CPU, Memory, GPUs, Backends, ONNX Runtime providers, Notes."""
    cpu, memory = profile.cpu, profile.memory
    memory_rows = [row("total", _gib(memory.total)), row("available", _gib(memory.available))]
    if memory.cgroup_limit is not None:
        memory_rows.append(row("cgroup limit", f"{_gib(memory.cgroup_limit)} (the container's limit caps the RAM)"))
    backends = [row(b.name, _backend_state(b)) for b in profile.backends]
    lines = [
        *section("System", [row("os", f"{profile.os}: {profile.os_version}")]),
        *section(
            "CPU",
            [
                row("model", cpu.model),
                row("architecture", cpu.arch),
                row("cores", f"{cpu.physical_cores} physical, {cpu.logical_cores} logical"),
                row("SIMD", " ".join(cpu.features) or "none detected"),
            ],
        ),
        *section("Memory", memory_rows),
        *section("GPUs", [line for gpu in profile.gpus for line in _gpu_rows(gpu)] or ["none found"]),
        *section("Backends", backends or ["none probed"]),
        *section(
            "ONNX Runtime providers",
            profile.onnx_providers or ["none (onnxruntime is not installed, or it did not load)"],
        ),
    ]
    if profile.notes:
        lines += section("Notes", profile.notes)
    return "\n".join(lines).rstrip("\n")


def _backend_state(backend: BackendAvailability) -> str:
    """Whether ``backend`` can run here and why; for an engine that checks no key, what that means here."""
    if not backend.available:
        return f"not available: {backend.reason}"
    recipe = RECIPES.get(backend.name)
    note = recipe.no_key_note if recipe is not None else ""
    return f"available: {backend.reason}" + (f"; {note}" if note else "")


def _gpu_rows(gpu: GPUInfo) -> list[str]:
    if gpu.unified_memory:
        memory = f"{_gib(gpu.memory_total)} usable, shared with the CPU (unified memory)"
    elif gpu.memory_free is not None:
        memory = f"{_gib(gpu.memory_free)} free of {_gib(gpu.memory_total)}"
    else:
        memory = _gib(gpu.memory_total) if gpu.memory_total else "unknown"
    details = [
        ("memory", memory),
        ("compute", ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else None),
        ("driver", gpu.driver),
        ("api", f"{gpu.api}, found by {gpu.source}" if gpu.source else gpu.api),
    ]
    return [
        row(f"GPU {gpu.index}", f"{gpu.name} ({gpu.vendor})"),
        *(f"  {row(label, value, width=_GPU_LABEL_WIDTH)}" for label, value in details if value is not None),
    ]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _gib(size: int) -> str:
    return f"{size / GiB:.1f} GiB"
