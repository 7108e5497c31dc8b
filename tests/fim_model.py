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

from pathlib import Path

import gguf

from localinfer.models.store import Manifest, ModelStore
from tests.derived_gguf import copy_with_keys, derived_once

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
    ids = _token_ids(gguf.GGUFReader(original))
    copy_with_keys(original, target, {f"tokenizer.ggml.{role}_token_id": token for role, token in ids.items()})
    return ids


def fim_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The FIM copy of ``original`` registered in ``store`` as ``smollm2-fim``, derived when it is missing or was
    derived from another file or mapping."""
    return derived_once(
        original, store, NAME, f"fim-v{MAPPING_VERSION}", lambda target: write_fim_copy(original.path, target)
    )
