"""The FastAPI app factory: dialect routers, /health, and the error handlers that use the one error table.

Errors come back in the shape of the dialect the route speaks (``core/dialect.py``): Ollama's (``/api/*``),
``{"error": "..."}``; llama.cpp's native routes', ``{"error": {"code", "message", "type"}}``; Anthropic's
(``/v1/messages``), ``{"type": "error", "error": {"type", "message"}}``; everywhere else OpenAI's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from localinfer import __version__
from localinfer.app.server.anthropic.routes import router as anthropic_router
from localinfer.app.server.core.defaults import RequestDefaults
from localinfer.app.server.core.dialect import dialect_for
from localinfer.app.server.core.media import MediaLimits
from localinfer.app.server.disconnect import ClientDisconnected, client_disconnected_response
from localinfer.app.server.errors import error_body_for, error_for, headers_for
from localinfer.app.server.guard import AccessGuard, AccessPolicy
from localinfer.app.server.header_case import HeaderCase
from localinfer.app.server.limits import BodyLimits
from localinfer.app.server.llamacpp.embeddings import router as llamacpp_embeddings_router
from localinfer.app.server.llamacpp.infill import router as llamacpp_infill_router
from localinfer.app.server.llamacpp.lora_adapters import router as llamacpp_lora_router
from localinfer.app.server.llamacpp.models import router as llamacpp_models_router
from localinfer.app.server.llamacpp.routes import router as llamacpp_router
from localinfer.app.server.llamacpp.slot_actions import router as llamacpp_slot_actions_router
from localinfer.app.server.ollama.create import router as ollama_create_router
from localinfer.app.server.ollama.embed import router as ollama_embed_router
from localinfer.app.server.ollama.generation import router as ollama_generation_router
from localinfer.app.server.ollama.routes import router as ollama_router
from localinfer.app.server.ollama.show import router as ollama_show_router
from localinfer.app.server.openai.chat_prompt import router as chat_prompt_router
from localinfer.app.server.openai.embeddings import router as openai_embeddings_router
from localinfer.app.server.openai.responses_api.routes import router as openai_responses_router
from localinfer.app.server.openai.routes import root_router as openai_root_router
from localinfer.app.server.openai.routes import router as openai_router
from localinfer.app.server.relay import EngineRelay
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.errors import LocalInferError
from localinfer.models.store import Manifest


def create_app(
    engine: Engine,
    *,
    api_key: str | None = None,
    preload: Manifest | None = None,
    pins: Sequence[Manifest] = (),
    default_model: str | None = None,
    one_model: str | None = None,
    aliases: Sequence[str] = (),
    tags: Sequence[str] = (),
    named_by_alias: bool = False,
    request_defaults: RequestDefaults | None = None,
    slots_endpoint: bool = True,
    verbose_answers: bool = False,
    client: LocalClient | None = None,
    access: AccessPolicy | None = None,
    max_body: int = Settings.model_fields["max_body"].default,
    media_limits: MediaLimits | None = None,
) -> FastAPI:
    """An app serving ``engine``. ``preload`` starts loading a model at startup (its keep-alive starts when it is
    loaded), and so does each of ``pins``, never unloaded; /health says 503 until they are loaded.

    ``access`` says who may use it (Host check, CORS allow-list, key; by default: a server on 127.0.0.1 without
    a key); ``api_key``, when given, is the key whatever ``access`` says. Give ``engine`` a names-only model
    source (``ServedModels``): names from the network must never become paths. A body over ``max_body`` bytes,
    or one too costly to parse, is refused before any route runs (``limits.py``).

    ``one_model``, when given, is the model a request naming any model nobody serves gets, as llama-server
    answers: the model of a server started with one (``core/model_name.py``).

    ``aliases`` are more names of the default model (``--alias a,b,c``: ``b`` and ``c``; ``named_by_alias``: its
    name is ``a``), ``tags`` its labels (``--tags``), listed with it in ``/v1/models`` as llama-server lists them;
    ``request_defaults``
    what a request leaves unset is served with (``--seed``, ``--temp``, ``--n-predict``); without
    ``slots_endpoint``, GET /slots answers 501 (``--no-slots``); with ``verbose_answers`` the OpenAI routes' answers
    carry llama-server's ``__verbose`` (``--verbose``).

    ``client`` (over the same engine) backs Ollama's model management (/api/tags, /api/pull...); without one
    those routes answer 503.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for pinned in pins:
            engine.preload(pinned, pin=True)
        if preload is not None:
            engine.preload(preload, pin=any(p.name == preload.name for p in pins))
        yield
        await engine.close()

    app = FastAPI(title="localinfer", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.client = client
    # for requests that name no model: the model given, else the one loaded at start
    app.state.default_model = default_model or (preload.name if preload is not None else None)
    app.state.one_model = one_model  # any name nobody serves gets this model (core/model_name.py)
    app.state.aliases = {alias: default_model for alias in aliases if default_model}
    if default_model:  # llama-server lists every --alias name (none without one) and --tags, sorted
        named = sorted({default_model, *aliases}) if named_by_alias else []
        app.state.model_labels = {default_model: {"aliases": named, "tags": sorted(set(tags))}}
    app.state.request_defaults = request_defaults or RequestDefaults()
    app.state.slots_endpoint = slots_endpoint
    app.state.verbose_answers = verbose_answers  # openai/verbose.py
    app.state.media_limits = media_limits or MediaLimits()  # images and sounds in requests (core/media.py)
    app.include_router(openai_router)
    app.include_router(openai_root_router)
    app.include_router(chat_prompt_router)
    app.include_router(openai_responses_router)
    app.include_router(llamacpp_embeddings_router)
    app.include_router(ollama_router)
    app.include_router(llamacpp_infill_router)
    app.include_router(llamacpp_router)
    app.include_router(llamacpp_models_router)
    app.include_router(llamacpp_slot_actions_router)
    app.include_router(llamacpp_lora_router)
    app.include_router(ollama_generation_router)
    app.include_router(ollama_show_router)
    app.include_router(ollama_create_router)
    app.include_router(openai_embeddings_router)
    app.include_router(ollama_embed_router)
    app.include_router(anthropic_router)
    app.add_middleware(EngineRelay, relay_for=engine.relay)  # models vLLM serves: their OpenAI routes as they are
    app.add_middleware(BodyLimits, max_bytes=max_body)  # after the key check, before the relay buffers a body
    policy = access or AccessPolicy()
    if api_key is not None:
        policy = dataclasses.replace(policy, api_key=api_key)
    app.add_middleware(AccessGuard, policy=policy)  # before the relay, routing and any body is read
    app.add_middleware(HeaderCase)  # outermost: names spelt as llama-server writes them, as they leave

    @app.get("/health")
    @app.get("/v1/health")  # llama-server answers both
    async def health() -> JSONResponse:
        state = engine.health()
        usage = engine.slot_usage()
        body = {
            "status": {"ready": "ok", "loading": "loading model"}.get(state, "error"),
            "slots_idle": usage.idle,
            "slots_processing": usage.processing,
            "requests_waiting": usage.waiting,
        }
        workers = engine.rpc_workers()
        if workers:  # the RPC workers loaded models are on, and which one is gone
            body["rpc_workers"] = [
                {"endpoint": endpoint, "state": worker_state, "models": models}
                for endpoint, (worker_state, models) in workers.items()
            ]
        return JSONResponse(body, status_code=200 if state == "ready" else 503)

    @app.exception_handler(LocalInferError)
    async def on_localinfer_error(request: Request, exc: LocalInferError) -> JSONResponse:
        status, body = error_for(dialect_for(request.url.path), exc)
        return JSONResponse(body, status_code=status, headers=headers_for(exc))

    @app.exception_handler(ClientDisconnected)
    async def on_client_disconnected(request: Request, exc: ClientDisconnected) -> Response:
        return client_disconnected_response()  # nobody reads it: the client is gone

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        location = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(location) or None
        if first.get("type") == "json_invalid":
            message, param = "the request body is not valid JSON", None
        else:
            message = f"{param or 'body'}: {first.get('msg', 'invalid value')}"
        return JSONResponse(error_body_for(dialect_for(request.url.path), 400, message, param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = error_body_for(dialect_for(request.url.path), exc.status_code, str(exc.detail))
        return JSONResponse(body, status_code=exc.status_code)

    return app
