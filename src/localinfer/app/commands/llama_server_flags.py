"""The flags of ``serve`` that llama-server's users bring with them: what a request leaves unset (``--seed``,
``--temp``, ``--n-predict``), the chat template, and the switches that llama-server needs and localinfer does not
(accepted so that a llama-server command line starts unchanged; ``--help`` says what each does here)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from localinfer.errors import ConfigError

# llama-server switches that change nothing here, and why.
_ACCEPTED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--jinja",), "accepted: chat templates are always rendered as Jinja here"),
    (("--no-jinja",), "accepted and ignored: chat templates are always rendered as Jinja here"),
    (("--metrics",), "accepted: GET /metrics is always on (Prometheus text, llamacpp:* series too)"),
    (("--embedding", "--embeddings"), "accepted: embeddings are always served, by models that can embed"),
    (
        ("--reranking", "--rerank"),
        "serve the model as a reranker (--pooling rank), as llama-server does; a model that states rank pooling "
        "is one without it",
    ),
    (("--slots",), "accepted: GET /slots is on unless --no-slots"),
    (
        ("--kv-unified", "-kvu"),
        "with --parallel N: each request may use the whole --ctx-size, as llama-server's unified cache lets one; "
        "each slot keeps it in a cache of its own (N times the memory), so a request never waits for room",
    ),
    (("--no-webui",), "accepted: localinfer serves no web page (its app runs in the terminal)"),
    (("--cont-batching", "-cb"), "accepted: requests are always batched together"),
)


def add_request_default_flags(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--temp``, ``--n-predict``: what a request that sets none of them is served with, in every
    dialect, as llama-server's flags of the same names."""
    p.add_argument(
        "--seed", "-s", type=int, metavar="N", help="the sampling seed of requests that set none (-1: random)"
    )
    p.add_argument(
        "--temp", "--temperature", type=float, metavar="T", help="the temperature of requests that set none (0: greedy)"
    )
    p.add_argument(
        "--n-predict",
        "--predict",
        "-n",
        type=int,
        metavar="N",
        help="most tokens a request that sets no limit generates (-1: until the context is full)",
    )


def add_reasoning_flags(p: argparse.ArgumentParser) -> None:
    """A reasoning model's thinking for requests that say nothing, as llama-server's flags of the same names."""
    p.add_argument(
        "--reasoning-format",
        choices=("auto", "deepseek", "none"),
        help="a reasoning model's thinking apart from the answer (auto, deepseek: reasoning_content) or in it (none)",
    )
    p.add_argument(
        "--reasoning",
        "-rea",
        choices=("on", "off", "auto"),
        help="a reasoning model thinks (on), answers at once (off), or as its template has it (auto, the default)",
    )
    p.add_argument(
        "--reasoning-budget",
        type=int,
        metavar="N",
        help="thinking tokens before the end of thinking is forced (-1: no limit, the default; 0: none)",
    )
    p.add_argument(
        "--chat-template-kwargs",
        type=_json_object,
        metavar="JSON",
        help="more variables for the chat template, e.g. '{\"enable_thinking\": false}'",
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"enable_thinking\": false}'")
    return value


def add_llama_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        "-m",
        "--hf-repo",
        "-hf",
        dest="model_flag",
        metavar="MODEL",
        help="the model, as the positional MODEL (llama-server's -m FILE and -hf org/repo[:QUANT] spellings)",
    )
    p.add_argument("--batch-size", "-b", type=int, metavar="N", help="most prompt tokens one step takes (default 2048)")
    p.add_argument(
        "--ubatch-size", "-ub", type=int, metavar="N", help="most tokens computed at once within a step (default 512)"
    )
    p.add_argument(
        "--chat-template",
        metavar="NAME|JINJA",
        help="the chat template of the model named here, in place of the one in its file: a name of llama.cpp's "
        "built-in templates (chatml, llama3, gemma, phi3, mistral-v7, deepseek3, ...: rendered by llama.cpp, as "
        "llama-server --no-jinja renders them) or the Jinja text itself",
    )
    p.add_argument(
        "--chat-template-file", metavar="FILE", help="a Jinja file that replaces the served model's chat template"
    )
    p.add_argument(
        "--pooling",
        choices=("mean", "cls", "last", "rank", "none"),
        help="how the model named here pools its embeddings, in place of what its file states (default: that, or "
        "mean); none gives a vector per token on /embeddings, and the OpenAI and Ollama routes refuse it",
    )
    p.add_argument(
        "--lora",
        dest="lora",
        action="extend",
        type=_lora_files,
        metavar="FILE",
        help="a LoRA adapter (GGUF) loaded with the model named here, at scale 1; repeat it or separate files with "
        "commas for more (ids in order: GET /lora-adapters)",
    )
    p.add_argument(
        "--lora-scaled",
        dest="lora",
        action="extend",
        type=_lora_scaled,
        metavar="FILE:SCALE",
        help="a LoRA adapter at SCALE (llama-server's FNAME:SCALE, comma-separated for more)",
    )
    p.add_argument(
        "--lora-init-without-apply",
        action="store_true",
        default=None,
        help="load the adapters at scale 0: applied once POST /lora-adapters or a request's lora asks",
    )
    p.add_argument("--no-slots", action="store_true", default=None, help="GET /slots answers 501, as llama-server's")
    p.add_argument(
        "--spec-type",
        dest="spec",
        type=_spec_type,
        metavar="TYPE",
        help="llama-server's name for --spec: none (off), ngram-simple, ngram-mod... (ngram: localinfer's own "
        "lookup), draft-simple (draft, with --draft)",
    )
    p.add_argument(
        "--verbose",
        "-v",
        "--log-verbose",
        action="store_true",
        default=None,
        help="the OpenAI routes' answers carry llama-server's __verbose (the native answer, the prompt as the model "
        "got it); for debug logs set LOCALINFER_LOG_LEVEL=debug",
    )
    for names, meaning in _ACCEPTED:
        p.add_argument(*names, action="store_true", help=meaning)


def _spec_type(text: str) -> str:
    """``--spec-type``'s llama.cpp kinds (comma-separated) as ``--spec``'s one: ``off``, ``ngram`` or ``draft``.
    Raises ArgumentTypeError for a kind served only by llama.cpp's own drafters (EAGLE-3, MTP...) or for two."""
    kinds = {item.strip() for item in text.split(",") if item.strip()} - {"none"}
    specs = {"ngram" if kind.startswith("ngram-") else "draft" if kind == "draft-simple" else kind for kind in kinds}
    if not specs:
        return "off"
    if len(specs) > 1 or not specs <= {"ngram", "draft"}:
        raise argparse.ArgumentTypeError(
            f"{text!r}: localinfer drafts one way, ngram-* (its own lookup) or draft-simple (with --draft)"
        )
    return specs.pop()


def _lora_files(text: str) -> list[str]:
    """``--lora``'s files (comma-separated, as llama-server's), each as a settings entry at scale 1."""
    return [f"{item.strip()}:1" for item in text.split(",") if item.strip()]


def _lora_scaled(text: str) -> list[str]:
    """``--lora-scaled``'s FNAME:SCALE entries (comma-separated), checked. Raises ArgumentTypeError."""
    entries = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        path, sep, scale = item.rpartition(":")
        try:
            float(scale)
        except ValueError:
            sep = ""
        if not sep or not path:
            raise argparse.ArgumentTypeError(f"{item!r} is not FNAME:SCALE (e.g. adapter.gguf:0.5)")
        entries.append(item)
    return entries


def model_named(args: argparse.Namespace) -> str | None:
    """The model the command line names: the positional MODEL or ``-m``/``-hf``. Raises ConfigError for both."""
    if args.model is not None and args.model_flag is not None and args.model != args.model_flag:
        raise ConfigError(f"two models named: {args.model} and {args.model_flag}", hint="name one, as MODEL or with -m")
    named: str | None = args.model if args.model is not None else args.model_flag
    return named


def chat_template_source(args: argparse.Namespace) -> str | None:
    """The template ``--chat-template`` or ``--chat-template-file`` gives: a built-in template's name or Jinja text
    (None: the model's own). Raises ConfigError for both at once, a file that cannot be read, Jinja that does not
    parse, or a bare word that names no built-in template."""
    from localinfer.engine.templates import builtin_template_names, check_template_source

    if args.chat_template and args.chat_template_file:
        raise ConfigError("--chat-template and --chat-template-file both name a template", hint="give one of them")
    if args.chat_template_file:
        path = Path(args.chat_template_file).expanduser()
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read the chat template file {path}: {exc}", hint="give a readable UTF-8 Jinja file"
            ) from None
        check_template_source(source, f"--chat-template-file {path}")
        return source
    if not args.chat_template:
        return None
    text: str = args.chat_template
    names = builtin_template_names()
    if text.strip() in names:
        return text.strip()
    if "{" not in text:  # a name, misspelt: Jinja without a tag would be the prompt's whole text
        raise ConfigError(
            f"llama.cpp has no built-in chat template named {text!r}",
            hint="use one of " + ", ".join(sorted(names)) + ", or give Jinja text or --chat-template-file",
        )
    check_template_source(text, "--chat-template")
    return text


CTX_ALIGNMENT = 256  # llama.cpp rounds each sequence's context up to a multiple of this (llama-context.cpp)


def ctx_per_slot(ctx_size: int | None, parallel: int | None, *, unified: bool = False) -> tuple[int | None, str | None]:
    """Each slot's context, and a line that says how it was read: ``--ctx-size C`` alone is each request's
    context; given with ``--parallel N`` it is the whole cache, split into N slots of C/N tokens, as llama-server
    splits it (so ``-c 8192 -np 4`` takes the memory it takes there, not four times it), rounded up to a multiple
    of 256 as llama.cpp rounds it (``-c 256 -np 4``: 256 tokens a slot). With ``unified``
    (``--kv-unified``) each slot may use all C tokens, as one request may in llama-server's shared cache; here
    each slot has a cache of its own, C long. Raises ConfigError when C/N is under one token."""
    if not ctx_size or not parallel or parallel <= 1:
        return ctx_size, None
    if unified:
        return ctx_size, (
            f"--ctx-size {ctx_size} with --parallel {parallel} and --kv-unified: each request may use all "
            f"{ctx_size} tokens; each slot has its own cache ({parallel} x {ctx_size} tokens of memory)"
        )
    per_slot = ctx_size // parallel
    if per_slot < 1:
        raise ConfigError(
            f"--ctx-size {ctx_size} split into {parallel} slots leaves none a token",
            hint="give a larger --ctx-size or fewer --parallel slots",
        )
    per_slot = -(-per_slot // CTX_ALIGNMENT) * CTX_ALIGNMENT
    return per_slot, f"--ctx-size {ctx_size} with --parallel {parallel}: {per_slot} tokens per slot, as llama-server"


def hosts_of(host: str) -> list[str]:
    """The addresses ``--host`` names: one, or several comma-separated (llama-server's form)."""
    return [h.strip() for h in host.split(",") if h.strip()]
