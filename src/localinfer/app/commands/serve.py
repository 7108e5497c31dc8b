"""``localinfer serve [MODEL]``: the OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from localinfer.app.commands import rpc_workers
from localinfer.app.commands.device_flags import add_device_flags, check_devices, device_overrides, list_devices
from localinfer.app.commands.llama_server_flags import (
    add_llama_server_flags,
    add_reasoning_flags,
    add_request_default_flags,
    chat_template_source,
    ctx_per_slot,
    hosts_of,
    model_named,
)
from localinfer.app.commands.media_flags import add_media_flags, media_overrides
from localinfer.app.commands.progress_line import ProgressLine
from localinfer.errors import ConfigError
from localinfer.hardware.fits import machine_fits
from localinfer.models.store import validate_name

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi import FastAPI

    from localinfer.client.local import LocalClient
    from localinfer.config import Settings
    from localinfer.hardware.profile import HardwareProfile
    from localinfer.models.library import ModelLibrary
    from localinfer.models.store import Manifest


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="serve a model over the OpenAI API", description="Serve a model over the OpenAI API."
    )
    p.add_argument(
        "model",
        nargs="?",
        help="a model name (localinfer ls), a .gguf path, an ONNX (onnxruntime-genai) model folder, or a Hub "
        "reference or catalog name to pull first, loaded at start (default: none loaded, each model loads on its "
        "first request; with no model here at all, the starter model is pulled and served)",
    )
    p.add_argument(
        "--host", help="address to bind (default 127.0.0.1); several, comma-separated, as llama-server takes them"
    )
    p.add_argument("--port", type=int, help="port to listen on (default 8080)")
    p.add_argument(
        "--api-key",
        help="require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health and /v1/health",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="a host name the server answers to besides loopback names and its address ('*': any); repeatable",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="a web page origin allowed besides local pages and app:// (e.g. https://chat.example.com, '*' "
        "matches anything); repeatable",
    )
    p.add_argument(
        "--ctx-size",
        "-c",
        type=int,
        help="context length of each request (default: the model's, up to 8192); given with --parallel N, the "
        "whole cache, split into N slots of ctx-size/N, as llama-server's -c -np",
    )
    p.add_argument("--threads", "-t", type=int, help="CPU threads (default: one per physical core)")
    p.add_argument(
        "--parallel", "-np", type=int, help="requests decoded together (slots; default: up to 4, as memory allows)"
    )
    p.add_argument("--max-queue", type=int, help="requests that may wait for a slot before the server says 503")
    p.add_argument("--max-body", type=int, metavar="BYTES", help="largest request body (default 16 MiB); larger: 413")
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long running requests may go on before they are ended (default 5)",
    )
    p.add_argument(
        "--gpu-layers",
        "--n-gpu-layers",
        "-ngl",
        type=int,
        help="layers to offload to the GPU (-1: all; default: as many as fit)",
    )
    rpc_workers.add_serve_arguments(p)
    p.add_argument(
        "--cache-type-k",
        "-ctk",
        metavar="TYPE",
        help="GGUF models: the KV cache's key type, f16, q8_0, q4_0 (and bf16, f32, q4_1, q5_0, q5_1, iq4_nl); "
        "default f16, or q8_0 when f16 would not fit",
    )
    p.add_argument(
        "--cache-type-v",
        "-ctv",
        metavar="TYPE",
        help="GGUF models: the KV cache's value type, as --cache-type-k (a quantized one needs flash attention)",
    )
    p.add_argument(
        "--flash-attn",
        "-fa",
        choices=("auto", "on", "off"),
        help="GGUF models: flash attention; auto (the default) turns it on wherever the device runs it. On a CPU, "
        "off generates within 15 %% of on; it turns --spec off unless --spec is given (drafts verified without it "
        "change greedy text), and cannot read a quantized value cache",
    )
    p.add_argument(
        "--cache-reuse",
        type=int,
        metavar="N",
        help="GGUF models: runs of at least N cached tokens that come again further on in a new prompt are moved, "
        "not recomputed (default 256; 0: off). With one slot (-np 1) a run may follow new tokens, so a keystroke "
        "in an editor computes only what changed; the reply can differ from computing the prompt whole",
    )
    p.add_argument(
        "--context-shift",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="GGUF models: a generation that fills its context drops its oldest half (after n_keep tokens) and "
        "goes on, rather than ending (default: off, as llama-server)",
    )
    p.add_argument(
        "--spec",
        choices=("ngram", "draft", "off"),
        help="speculative decoding (GGUF): ngram guesses the next tokens from the prompt, the reply so far and "
        "(for a request sampled without a seed) the model's recent outputs (the default), draft from a draft model "
        "(--draft); the guesses are verified in one step with the model's own sampler; greedy output is the same "
        "either way where llama.cpp computes one token and several alike, on a CPU not always past 256 tokens of "
        "context (docs/benchmarks.md)",
    )
    p.add_argument(
        "--draft",
        "--model-draft",
        "-md",
        metavar="MODEL",
        help="a draft model for speculative decoding: a small GGUF of the served model's family, by path or name "
        "(Qwen2.5-0.5B for Qwen2.5-7B); it turns --spec draft on",
    )
    p.add_argument("--draft-max", type=int, metavar="N", help="most tokens one draft proposes (default 64)")
    p.add_argument("--draft-min", type=int, metavar="N", help="a shorter draft is not verified (default 0)")
    p.add_argument(
        "--max-loaded",
        type=int,
        metavar="N",
        help="most models loaded at once; the least recently used idle one makes room (default: as many as fit)",
    )
    p.add_argument(
        "--keep-alive",
        metavar="DURATION",
        help="how long a model stays loaded after its last request: 30s, 10m, 1h; -1 for good, 0 unloads at once "
        "(default 5m); a request's keep_alive replaces it for its model",
    )
    p.add_argument(
        "--pin",
        action="append",
        metavar="MODEL",
        help="load MODEL at start and never unload it for room or by keep-alive; repeat it for several",
    )
    p.add_argument(
        "--alias",
        "-a",
        "--served-model-name",
        metavar="NAME[,NAME...]",
        help="the name clients use for the model (default: its own), as llama-server's --alias and vLLM's "
        "--served-model-name; several, comma-separated: the first names it in answers, all are accepted",
    )
    p.add_argument(
        "--tags", metavar="TAG[,TAG...]", help="labels listed with the model in /v1/models, as llama-server's --tags"
    )
    p.add_argument(
        "--strict-model-names",
        action="store_true",
        default=None,
        help="a server started with one model answers a request naming another model with 404, rather than with "
        "its model as llama-server does",
    )
    p.add_argument(
        "--slot-save-path",
        metavar="DIR",
        help="a folder where POST /slots/{id}?action=save writes a slot's cache and restore reads it back, as "
        "llama-server's (default: none, those actions answer 501)",
    )
    add_request_default_flags(p)
    add_reasoning_flags(p)
    add_llama_server_flags(p)
    add_media_flags(p)
    add_device_flags(p)
    p.add_argument(
        "--engine",
        choices=("vllm", "sglang", "tgi", "trtllm"),
        help="the engine, run as a child process, that serves Hugging Face (safetensors) folders (default: vLLM; "
        "a built TensorRT-LLM engine folder: trtllm); `localinfer hw` says which are installed and usable here",
    )
    p.add_argument(
        "--tensor-parallel-size",
        type=int,
        metavar="N",
        help="an engine run as a process (vLLM...): split the model over N GPUs (default: as many as it needs)",
    )
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument given as it is to the engine run as a process ('vllm serve'...); repeat it, with '=' for "
        "dashes: "
        "--engine-arg=--enforce-eager",
    )
    p.set_defaults(run=run)


def _engine_args(args: argparse.Namespace) -> list[str]:
    extra = list(args.engine_arg)
    if args.tensor_parallel_size is not None:
        if args.tensor_parallel_size < 1:
            raise ConfigError("--tensor-parallel-size must be 1 or more", hint="e.g. --tensor-parallel-size 2")
        extra += ["--tensor-parallel-size", str(args.tensor_parallel_size)]
    return extra


def run(args: argparse.Namespace, settings: Settings) -> int:
    # The server's parts load here, not when the command line starts (localinfer --version stays instant).
    from pydantic import SecretStr

    from localinfer.app.server.compose import check_exposure, server_app
    from localinfer.bootstrap import local_stack
    from localinfer.hardware.detect import detect
    from localinfer.models.library import ModelLibrary

    if args.list_devices:
        return list_devices()
    args.model = model_named(args)
    ctx_size, ctx_note = ctx_per_slot(args.ctx_size, args.parallel, unified=args.kv_unified)
    settings = settings.with_overrides(
        host=args.host,
        port=args.port,
        api_key=SecretStr(args.api_key) if args.api_key else None,
        ctx_size=ctx_size,
        batch_size=args.batch_size,
        ubatch_size=args.ubatch_size,
        threads=args.threads,
        parallel=args.parallel,
        max_queue=args.max_queue,
        max_body=args.max_body,
        shutdown_timeout=args.shutdown_timeout,
        gpu_layers=args.gpu_layers,
        rpc=args.rpc,
        tensor_split=args.tensor_split,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        flash_attn=args.flash_attn,
        cache_reuse=args.cache_reuse,
        context_shift=args.context_shift,
        spec=args.spec,
        draft=args.draft,
        draft_max=args.draft_max,
        draft_min=args.draft_min,
        model=args.model,
        engine=args.engine,
        engine_args=_engine_args(args) or None,
        allow_hosts=args.allow_host,
        cors_origins=args.cors_origin,
        max_loaded=args.max_loaded,
        keep_alive=args.keep_alive,
        pin=args.pin,
        chat_template=chat_template_source(args),
        pooling=args.pooling or ("rank" if args.reranking else None),  # --reranking: rank pooling, as llama-server
        lora=args.lora,
        lora_init_without_apply=args.lora_init_without_apply,
        strict_model_names=args.strict_model_names,
        slots_endpoint=False if args.no_slots else None,
        verbose_answers=args.verbose,
        slot_save_path=_slot_folder(args.slot_save_path),
        seed=args.seed,
        temperature=args.temp,
        n_predict=args.n_predict,
        reasoning_format=args.reasoning_format,
        reasoning=args.reasoning,
        reasoning_budget=args.reasoning_budget,
        chat_template_kwargs=args.chat_template_kwargs,
        **media_overrides(args),
        **device_overrides(args),
    )
    check_devices(settings.device)
    hosts = hosts_of(settings.host)
    if not hosts:
        raise ConfigError(f"--host {settings.host!r} names no address", hint="e.g. --host 127.0.0.1")
    check_exposure(hosts, settings)
    # before anything loads (llama.cpp aborts on a worker it cannot reach), while the workers' memory is all free
    rpc_devices = rpc_workers.check_workers(settings)
    library = ModelLibrary.from_settings(settings)
    hardware = detect()
    if settings.speculation == "draft":  # found (or pulled) once, here: a missing draft fails now, in one line
        settings = settings.with_overrides(draft=str(_draft_model(settings, library, hardware)))
    url = f"http://{_url_host(hosts[0])}:{settings.port}"
    preload: Manifest | None = None
    if args.model is None and not args.alias and library.list():  # nothing loaded at start: each model on demand
        model_flags = {
            "--chat-template": settings.chat_template,
            "--pooling": settings.pooling,
            "--lora": settings.lora,
            "--mmproj": settings.mmproj,
        }
        flag = next((name for name, value in model_flags.items() if value), None)
        if flag is not None:
            raise ConfigError(
                f"{flag} changes the model the server is started with, and none is named",
                hint=f"name it: localinfer serve MODEL {flag} ...",
            )
        stack = local_stack(settings, library=library, hardware=hardware, serving=url, rpc_devices=rpc_devices)
        message = f"localinfer: serving on {url}/v1; models load on their first request"
    else:
        preload, original = _model_to_serve(args, settings, library, hardware)
        stack = local_stack(
            settings,
            library=library,
            hardware=hardware,
            served=preload,
            original=original,
            serving=url,
            rpc_devices=rpc_devices,
        )
        stack.engine.check_plan(preload)  # a model this machine cannot run (vLLM's without its GPU) fails here
        message = f"localinfer: serving {preload.name} on {url}/v1"
    app = server_app(
        stack,
        hosts,
        preload=preload,
        aliases=_aliases(args.alias)[1:],
        tags=[tag.strip() for tag in (args.tags or "").split(",") if tag.strip()],
        named_by_alias=bool(_aliases(args.alias)),
    )
    if ctx_note:
        print(f"localinfer: {ctx_note}", flush=True)
    print(message, flush=True)
    _run_server(app, settings, stack.client, hosts)
    return 0


def _model_to_serve(
    args: argparse.Namespace, settings: Settings, library: ModelLibrary, hardware: HardwareProfile
) -> tuple[Manifest, str]:
    """The model named on the command line (pulled first when it is a reference not here yet, the starter when
    none is named and none is here), under ``--alias`` when given; and the name it is listed under."""
    from localinfer.engine.profiles import check_files
    from localinfer.models.pull import ensure_model

    progress = ProgressLine(sys.stderr)
    try:
        manifest = ensure_model(library, settings.model, settings, progress=progress, fits=machine_fits(hardware))
    finally:
        progress.close()
    check_files(manifest)  # a corrupt or truncated model fails here, in one line, not in the background
    original = manifest.name
    aliases = _aliases(args.alias)
    if aliases:
        manifest = dataclasses.replace(manifest, name=aliases[0])
    return manifest, original


def _draft_model(settings: Settings, library: ModelLibrary, hardware: HardwareProfile) -> Path:
    """The draft model's file, pulled first when it is a reference not here yet."""
    from localinfer.engine.profiles import check_files
    from localinfer.models.pull import ensure_model

    if not settings.draft:
        raise ConfigError("--spec draft needs a draft model", hint="name one with --draft MODEL, or use --spec ngram")
    progress = ProgressLine(sys.stderr)
    try:
        manifest = ensure_model(library, settings.draft, settings, progress=progress, fits=machine_fits(hardware))
    finally:
        progress.close()
    if manifest.format != "gguf":
        raise ConfigError(
            f"the draft model {manifest.name} is not a GGUF file", hint="a draft model runs on llama.cpp: pick a GGUF"
        )
    check_files(manifest)
    return manifest.path


def _slot_folder(given: str | None) -> Path | None:
    """``--slot-save-path``'s folder. Raises ConfigError when it is not one (as llama-server refuses to start)."""
    from pathlib import Path

    if given is None:
        return None
    folder = Path(given).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"--slot-save-path {given}: not a directory", hint="create the folder first, or name another")
    return folder.resolve()


def _aliases(given: str | None) -> list[str]:
    """``--alias a,b,c``: the names the served model answers to, the first one naming it. Raises PullError for a
    name that cannot be one."""
    return [validate_name(name.strip()) for name in (given or "").split(",") if name.strip()]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _run_server(app: FastAPI, settings: Settings, client: LocalClient, hosts: list[str]) -> None:
    import uvicorn

    from localinfer.app.server.graceful import GracefulServer, bind
    from localinfer.app.server.header_case import UVICORN_OPTIONS

    config = uvicorn.Config(  # header names go out as given (app/server/header_case.py)
        app, host=hosts[0], port=settings.port, log_level=settings.log_level, access_log=False, **UVICORN_OPTIONS
    )
    server = GracefulServer(config, grace=settings.shutdown_timeout, end_requests=client.shutdown)
    server.run(sockets=bind(hosts, settings.port) if len(hosts) > 1 else None)
