"""Which multimodal projector (``mmproj*.gguf``) goes with a model: in a Hub repository, as ``llama-server -hf``
picks it, and beside a model file found on disk.

llama.cpp's rule (``find_best_sibling`` in ``common/download.cpp``): among the repository's ``.gguf`` files whose
path contains ``mmproj``, only those in the model's folder or a folder above it count; the deepest folder wins, then
the precision closest to the model's (the bits of the last ``-``/``.`` part of the name: ``Q4_K_M`` is 4, ``f16``
16, none 0); the first in listing order wins a tie.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from localinfer.errors import LocalInferError
from localinfer.models.files import split_part, split_prefix

if TYPE_CHECKING:
    from localinfer.models.metadata import ProjectorInfo

log = logging.getLogger(__name__)

_KEYWORD = "mmproj"
_TAG_RE = re.compile(r"[-.]([A-Za-z0-9_]+)$")
_DIGITS_RE = re.compile(r"\d+")


def quant_bits(path: str) -> int:
    """The bits a GGUF file name's last ``-``/``.`` part states, as llama.cpp reads them: ``x-Q4_K_M.gguf`` 4,
    ``mmproj-model-f16.gguf`` 16, ``UD-Q4_K_XL`` 4, a name without such a part (or digits in it) 0."""
    stem = split_prefix(path) or path
    if stem.lower().endswith(".gguf"):
        stem = stem[: -len(".gguf")]
    tag = _TAG_RE.search(stem)
    digits = _DIGITS_RE.search(tag.group(1)) if tag else None
    return int(digits.group(0)) if digits else 0


def is_projector(path: str) -> bool:
    """Whether a repository path is a projector file as llama.cpp tells one (``mmproj`` in it, ``.gguf`` at the
    end); a split projector's later parts are not (only its first part could be loaded)."""
    if not path.endswith(".gguf") or _KEYWORD not in path:
        return False
    part = split_part(path)
    return part is None or part[0] == 1


def best_projector(paths: Iterable[str], model: str) -> str | None:
    """The projector among a repository's ``paths`` that llama-server's ``-hf`` would fetch with ``model`` (the
    path of the model's first file in the repository), or None when it has none there."""
    model_dirs = PurePosixPath(model).parts[:-1]
    model_bits = quant_bits(model)
    best: tuple[int, int] | None = None  # (depth, -distance): larger is better
    chosen: str | None = None
    for path in paths:
        if not is_projector(path):
            continue
        dirs = PurePosixPath(path).parts[:-1]
        if tuple(model_dirs[: len(dirs)]) != dirs:
            continue  # in another folder than the model's or one above it
        rank = (len(dirs), -abs(quant_bits(path) - model_bits))
        if best is None or rank > best:
            best, chosen = rank, path
    return chosen


def projector_beside(model: Path, siblings: Sequence[Path]) -> Path | None:
    """The projector among ``siblings`` (files in the model file's folder) that goes with ``model``: the one closest
    to its precision, as a repository's (a folder downloaded from the Hub keeps the repository's files)."""
    names = [p.name for p in siblings if p.parent == model.parent]
    chosen = best_projector(names, model.name)
    return model.parent / chosen if chosen is not None else None


def projector_facts(path: Path | None) -> ProjectorInfo | None:
    """What the projector at ``path`` says (remembered per file), or None when there is none or it cannot be read
    (logged: the load says why, in one line)."""
    if path is None:
        return None
    from localinfer.models.metadata import cached_projector_info  # the gguf package, only when a projector is asked

    try:
        return cached_projector_info(path)
    except (LocalInferError, OSError) as exc:
        log.warning("cannot read the projector %s: %s", path, getattr(exc, "message", exc))
        return None


def modalities(path: Path | None) -> tuple[str, ...]:
    """What a model with the projector at ``path`` takes besides text (``vision``, ``audio``); () without one."""
    facts = projector_facts(path)
    return facts.modalities if facts is not None else ()
