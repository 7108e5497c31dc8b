"""A Hugging Face (safetensors) model repository pulled whole, as vLLM serves it and ``convert`` takes it: the
config, tokenizer and chat template files and the safetensors weights at the top of the repository, into one
snapshot folder of the Hugging Face cache. What else a repository holds (PyTorch ``.bin`` copies, ``original/``
checkpoints, ONNX exports, images) is left on the Hub."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from localinfer.errors import LocalInferError, PullError
from localinfer.models.hub import FetchedFile, HubClient, RepoListing
from localinfer.models.metadata import cached_folder_facts
from localinfer.models.refs import HubRef
from localinfer.models.store import HF_CONFIG, Manifest, ModelFile, ModelStore
from localinfer.progress import ProgressEvent, ProgressSink

FOLDER_FILES = frozenset(
    {
        HF_CONFIG,
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "chat_template.jinja",
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
    }
)

ModelFiles = Callable[[list[Manifest], list[FetchedFile]], tuple[ModelFile, ...]]


def hf_model_paths(paths: Iterable[str]) -> list[str]:
    """The files of a repository's safetensors model, ``config.json`` first; empty when it has none (no
    ``config.json`` or no ``.safetensors`` at its top)."""
    top = [p for p in paths if "/" not in p]
    weights = [p for p in top if p.endswith(".safetensors") or p.endswith(".safetensors.index.json")]
    if HF_CONFIG not in top or not any(p.endswith(".safetensors") for p in weights):
        return []
    return [HF_CONFIG, *sorted(p for p in top if p in FOLDER_FILES and p != HF_CONFIG), *sorted(weights)]


def pull_hf_folder(
    store: ModelStore,
    hub: HubClient,
    ref: HubRef,
    listing: RepoListing,
    *,
    name: str,
    progress: ProgressSink,
    model_files: ModelFiles,
) -> Manifest:
    """Pull the repository's safetensors model (``hf_model_paths``) and register it as ``name``, format ``hf``.

    Raises PullError when it has none, or when its config cannot be read (the files this pull downloaded are
    deleted then), and what ``HubClient.fetch`` raises.
    """
    paths = hf_model_paths(f.path for f in listing.files)
    if not paths:
        raise PullError(
            f"{ref.repo_id} has no GGUF model file and no safetensors model",
            hint="look for a repository named like the model with -GGUF",
        )
    remote = [file for path in paths if (file := listing.get(path)) is not None]
    total = sum(f.size for f in remote)
    weights = sum(1 for f in remote if f.path.endswith(".safetensors"))
    progress(
        ProgressEvent(
            f"using the safetensors model ({total / 1e6:.1f} MB in {weights} weight file{'s' if weights > 1 else ''}"
            f" and {len(remote) - weights} others): {ref.repo_id} has no GGUF file; vLLM serves it, and "
            "'localinfer convert' makes an ONNX model of it"
        )
    )
    hub.check_disk_space(sum(hub.missing_bytes(listing, f) for f in remote))
    fetched = [hub.fetch(listing, f, progress) for f in remote]
    hub.record_ref(ref.repo_id, ref.revision, listing.commit)
    progress(ProgressEvent("verifying the model's config"))
    folder = fetched[0].path.parent
    try:
        facts = cached_folder_facts(folder)
    except LocalInferError as exc:
        hub.discard_downloaded(fetched)
        raise PullError(
            f"{ref.repo_id} is not a usable model: {exc.message}", hint="the repository's config is broken"
        ) from exc
    manifest = Manifest(
        name=name,
        source=f"hf:{ref.repo_id}",
        format="hf",
        files=model_files(store.list(), fetched),
        quantization=facts.quantization,
        created=int(time.time()),
        revision=listing.commit,
    )
    store.register(manifest)
    progress(ProgressEvent("success", total=manifest.size, completed=manifest.size))
    return manifest
