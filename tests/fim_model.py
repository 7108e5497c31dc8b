"""SmolLM2 with fill-in-the-middle tokens declared: the FIM test model, derived once into the test home.

Neither test model declares FIM tokens, so ``/infill`` and ``suffix`` would have nothing to build a prompt from.
This copies SmolLM2's GGUF (every key and tensor, byte for byte) and adds ``tokenizer.ggml.fim_{pre,suf,mid,pad,
rep,sep}_token_id``, pointing at control tokens its vocabulary already has. SmolLM2's vocabulary has no
``<fim_prefix>``/``<fim_suffix>``/``<fim_middle>``/``<fim_pad>`` (only StarCoder's repository tokens survived), so
the prefix, suffix, middle and pad roles go to its four unused Jupyter control tokens and the repository and file
separator roles to ``<repo_name>`` and ``<file_sep>``. The model was never trained on this layout: what it writes
is not a good completion, but the prompt is built token for token as llama-server builds it, which is what the
tests compare. The copy is registered as ``smollm2-fim``; its source names the original's sha256 and this
mapping's version, so a changed original or mapping derives it again.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import gguf

from localinfer.models.store import Manifest, ModelFile, ModelStore

NAME = "smollm2-fim"
MAPPING_VERSION = 1
# role -> the control token of SmolLM2's vocabulary that plays it
FIM_TOKENS: dict[str, str] = {
    "fim_pre": "<jupyter_start>",
    "fim_suf": "<jupyter_text>",
    "fim_mid": "<jupyter_code>",
    "fim_pad": "<empty_output>",
    "fim_rep": "<repo_name>",
    "fim_sep": "<file_sep>",
}


def _source(original: Manifest) -> str:
    digest = original.files[0].sha256 or f"{original.path}:{original.size}"
    return f"derived:{original.source}#sha256={digest}+fim-v{MAPPING_VERSION}"


def _token_ids(reader: gguf.GGUFReader) -> dict[str, int]:
    field = reader.fields[gguf.Keys.Tokenizer.LIST]
    names = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    types = reader.fields[gguf.Keys.Tokenizer.TOKEN_TYPE]
    ids: dict[str, int] = {}
    for role, text in FIM_TOKENS.items():
        token = names.index(text)  # ValueError: the original is not the SmolLM2 this mapping was written for
        assert int(types.parts[types.data[token]][0]) == gguf.TokenType.CONTROL, f"{text} is not a control token"
        ids[role] = token
    return ids


def write_fim_copy(original: Path, target: Path) -> dict[str, int]:
    """Write ``original`` to ``target`` with the FIM token ids added; returns them by role."""
    reader = gguf.GGUFReader(original)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    ids = _token_ids(reader)
    writer = gguf.GGUFWriter(target, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    for role, token in ids.items():
        writer.add_uint32(f"tokenizer.ggml.{role}_token_id", token)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    return ids


def fim_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The FIM copy of ``original`` registered in ``store`` as ``smollm2-fim``, derived when it is missing or was
    derived from another file or mapping."""
    source = _source(original)
    found = store.get(NAME)
    if found is not None and found.source == source and found.files_present():
        return found
    with store.partial_file() as partial:
        write_fim_copy(original.path, partial)
        sha = hashlib.sha256()
        with partial.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        blob = store.blob_path(sha.hexdigest())
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, blob)
    manifest = Manifest(
        name=NAME,
        source=source,
        format="gguf",
        files=(ModelFile(path=blob, size=blob.stat().st_size, sha256=sha.hexdigest()),),
        quantization=original.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    return manifest
