"""What a GGUF file's name says: its quantization, whether it is part of a split model, whether it is a model.

Repositories name files in several styles (``Model-Q4_K_M.gguf``, ``model.Q4_K_M.gguf``,
``model-q4_k_m.gguf``, ``UD-Q4_K_XL``, ``Model-Q8_0-00001-of-00003.gguf``); these functions read all of
them. A model is a group of files: one file, or every part of a split model, loaded through its first part.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8](?:_[0-9]){0,2}(?:_[KL])?(?:_(?:XXS|XS|XL|NL|S|M|L))?|TQ[12]_0|BF16|F16|F32|MXFP4))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_AUXILIARY_WORDS = ("mmproj", "imatrix", "draft")


def quant_label(filename: str) -> str | None:
    """The quantization a file name states, upper-cased (``Q4_K_M``, ``IQ4_XS``, ``BF16``), or None.

    When several appear, the last one wins: repositories put the quantization at the end of the name.
    """
    stem = PurePosixPath(split_prefix(filename) or filename).name
    matches = _QUANT_RE.findall(stem)
    return matches[-1].upper() if matches else None


def split_part(filename: str) -> tuple[int, int] | None:
    """``(index, count)`` for a part of a split GGUF (``x-00002-of-00003.gguf`` → ``(2, 3)``), else None."""
    match = _SPLIT_RE.match(PurePosixPath(filename).name)
    if match is None:
        return None
    return int(match["index"]), int(match["count"])


def split_prefix(filename: str) -> str | None:
    """The path before ``-0000i-of-0000N.gguf`` for a split part, else None."""
    match = _SPLIT_RE.match(PurePosixPath(filename).name)
    if match is None:
        return None
    return str(PurePosixPath(filename).with_name(match["prefix"]))


def is_auxiliary(filename: str) -> bool:
    """True for GGUF files that are not a language model on their own: projectors, imatrix data, drafts."""
    name = PurePosixPath(filename).name.lower()
    return any(word in name for word in _AUXILIARY_WORDS)


@dataclass(frozen=True)
class FileGroup:
    """One model's files: a single GGUF, or all parts of a split one in order (the first is what loads)."""

    paths: tuple[str, ...]
    quant: str | None
    complete: bool = True

    @property
    def main(self) -> str:
        return self.paths[0]


def group_model_files(paths: Iterable[str]) -> list[FileGroup]:
    """The models among ``paths``: GGUF files that are not auxiliary, split parts gathered into one group.

    Groups keep the order in which their first file appears. A split group missing a part has
    ``complete=False``.
    """
    singles: dict[str, FileGroup] = {}
    parts: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    order: list[str] = []
    for path in paths:
        if not path.lower().endswith(".gguf") or is_auxiliary(path):
            continue
        part = split_part(path)
        if part is None:
            singles[path] = FileGroup(paths=(path,), quant=quant_label(path))
            order.append(path)
            continue
        prefix = split_prefix(path)
        assert prefix is not None
        if prefix not in parts:
            parts[prefix] = {}
            order.append(prefix)
        parts[prefix][part[0]] = path
        counts[prefix] = max(counts.get(prefix, 0), part[1])
    groups: list[FileGroup] = []
    for key in order:
        if key in singles:
            groups.append(singles[key])
            continue
        found = parts[key]
        complete = sorted(found) == list(range(1, counts[key] + 1))
        ordered = tuple(found[i] for i in sorted(found))
        groups.append(FileGroup(paths=ordered, quant=quant_label(ordered[0]), complete=complete))
    return groups


DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
QUALITY_LADDER = (  # quantizations best first, to Q8_0 at most: F16 and BF16 only when asked for by tag
    "Q8_0",
    "Q6_K",
    "Q6_K_L",
    "Q5_K_L",
    "Q5_K_M",
    "Q5_K_S",
    "Q5_1",
    "Q5_0",
    "Q4_K_L",
    "Q4_K_M",
    "IQ4_NL",
    "Q4_K_S",
    "IQ4_XS",
    "Q4_1",
    "Q4_0",
    "Q3_K_XL",
    "Q3_K_L",
    "Q3_K_M",
    "IQ3_M",
    "IQ3_XS",
    "Q3_K_S",
    "IQ3_XXS",
    "Q2_K_L",
    "Q2_K",
    "IQ2_M",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
)


@dataclass(frozen=True)
class Choice:
    """The model files picked from a repository, and a sentence that says why."""

    group: FileGroup
    reason: str


def choose_files(
    groups: list[FileGroup],
    tag: str | None,
    *,
    sizes: Mapping[str, int] | None = None,
    fits: Callable[[int], bool] | None = None,
) -> Choice | None:
    """Pick a model like llama.cpp's ``-hf`` and Ollama's ``hf.co/`` do; None when nothing matches.

    With a tag: the group whose quantization equals it (case-insensitively), else the first whose file name
    contains it between separators. Without, when ``fits`` (does a model of this many bytes fit this machine?)
    and each file's size are given: the best quantization up to Q8_0 that fits, else the smallest there is.
    Otherwise: ``Q4_K_M``, then ``Q8_0``, then the first model file.
    """
    if tag is not None:
        wanted = tag.upper()
        for group in groups:
            if group.quant == wanted:
                return Choice(group, f"it is the {group.quant} file the tag {tag} asks for")
        pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9])", re.IGNORECASE)
        for group in groups:
            if pattern.search(PurePosixPath(group.main).name):
                return Choice(group, f"its name contains the tag {tag}")
        return None
    if fits is not None and sizes is not None:
        fitted = _largest_that_fits(groups, sizes, fits)
        if fitted is not None:
            return fitted
    for quant in DEFAULT_QUANTS:
        for group in groups:
            if group.quant == quant:
                return Choice(group, f"no tag was given and {quant} is the default quantization")
    if groups:
        others = "; no Q4_K_M or Q8_0 file" if len(groups) > 1 else ""
        return Choice(groups[0], f"it is the repository's first model file{others}")
    return None


def _largest_that_fits(groups: list[FileGroup], sizes: Mapping[str, int], fits: Callable[[int], bool]) -> Choice | None:
    ranked = sorted((g for g in groups if g.quant in QUALITY_LADDER), key=lambda g: QUALITY_LADDER.index(g.quant or ""))
    if not ranked:
        return None
    size = {g.main: sum(sizes.get(p, 0) for p in g.paths) for g in ranked}
    for group in ranked:
        if fits(size[group.main]):
            best = " the best quantization" if group is ranked[0] else " the largest quantization"
            return Choice(group, f"no tag was given and {group.quant} is{best} that fits this machine's memory")
    smallest = min(ranked, key=lambda g: size[g.main])
    return Choice(smallest, f"no tag was given and none fits this machine's memory: {smallest.quant} is the smallest")
