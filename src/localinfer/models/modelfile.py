"""Modelfiles, as Ollama reads and writes them (its ``parser/parser.go``): parsed to a list of typed commands, and
written back from one by the same module.

One instruction a line, case-insensitive, then its value: the rest of the line, or a ``"..."`` or ``\"\"\"...\"\"\"``
quoted text that may span lines. ``#`` starts a comment line. ``PARAMETER NAME VALUE`` and ``MESSAGE ROLE TEXT``
take a name first. Every Modelfile has a ``FROM``. What cannot make a model is a ModelfileError naming its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from localinfer.errors import ModelfileError
from localinfer.models.defaults import (
    MESSAGE_ROLES,
    NOT_HONOURED,
    PARAMETERS,
    ModelDefaults,
    ParamValue,
    typed_parameter,
)
from localinfer.models.store import Manifest

INSTRUCTIONS: Final = ("FROM", "PARAMETER", "SYSTEM", "TEMPLATE", "MESSAGE", "ADAPTER", "LICENSE")
# Ollama's instructions that localinfer does not take, with why
_NOT_TAKEN: Final = {
    "DRAFT": "a draft model is a serve setting here: use 'serve --model-draft'",
    "RENDERER": "Ollama's built-in renderers are not available here: give a TEMPLATE",
    "PARSER": "Ollama's built-in output parsers are not available here",
    "REQUIRES": "localinfer does not check Ollama versions",
}
_WORD = re.compile(r"([A-Za-z]+)(?:[ \t]+(.*))?$", re.DOTALL)
_NAME = re.compile(r"([A-Za-z0-9_]+)(?:[ \t]+(.*))?$", re.DOTALL)
_HINT = "see docs/models.md (Modelfiles) for the instructions localinfer takes"


@dataclass(frozen=True)
class Command:
    """One instruction. ``key`` is a PARAMETER's name or a MESSAGE's role (else ""); ``value`` is the text after it,
    unquoted; ``line`` where it starts (0 for a command not read from a file)."""

    instruction: str
    value: str
    key: str = ""
    line: int = 0


def parse(text: str) -> tuple[Command, ...]:
    """The commands of a Modelfile, in order. Raises ModelfileError naming the line of an unknown instruction, a
    PARAMETER localinfer does not honour or of the wrong type, a MESSAGE of another role, a quote left open, a
    value missing; and the whole file when it has no FROM."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        number, stripped = index + 1, lines[index].strip()
        index += 1
        if not stripped or stripped.startswith("#"):
            continue
        word, rest = _split(stripped, _WORD)
        instruction = word.upper()
        if instruction in _NOT_TAKEN:
            raise ModelfileError(f"{instruction} is not supported: {_NOT_TAKEN[instruction]}", line=number, hint=_HINT)
        if instruction not in INSTRUCTIONS:
            raise ModelfileError(
                f"unknown instruction {word!r}: use one of {', '.join(INSTRUCTIONS)}", line=number, hint=_HINT
            )
        key = ""
        if instruction in ("PARAMETER", "MESSAGE"):
            key, rest = _split(rest.strip(), _NAME)
        value, index = _value(rest, lines, index, number)
        if not value.strip() and instruction in ("FROM", "PARAMETER", "ADAPTER"):
            raise ModelfileError(f"{instruction} {key} needs a value".replace("  ", " "), line=number, hint=_HINT)
        command = Command(instruction, value.strip() if instruction in ("FROM", "ADAPTER") else value, key, number)
        check(command)
        commands.append(command)
    if not any(c.instruction == "FROM" for c in commands):
        raise ModelfileError(
            "the Modelfile has no FROM line", hint="start it with FROM and a model name or a .gguf file"
        )
    return tuple(commands)


def check(command: Command) -> None:
    """Raises ModelfileError for a command that cannot be taken (see ``parse``)."""
    if command.instruction == "PARAMETER":
        parameter_value(command.key, command.value, command.line)
    elif command.instruction == "MESSAGE" and command.key not in MESSAGE_ROLES:
        raise ModelfileError(
            f"MESSAGE role {command.key!r} is not one of {', '.join(MESSAGE_ROLES)}", line=command.line, hint=_HINT
        )


def parameter_value(name: str, value: object, line: int = 0) -> ParamValue:
    """``value`` as the type of the parameter ``name``. Raises ModelfileError for a name localinfer does not
    honour, or a value of the wrong type."""
    if name in NOT_HONOURED:
        raise ModelfileError(f"PARAMETER {name} is not supported: {NOT_HONOURED[name]}", line=line, hint=_param_hint())
    if name not in PARAMETERS:
        raise ModelfileError(f"PARAMETER {name!r} is not a parameter", line=line, hint=_param_hint())
    try:
        return typed_parameter(name, value)
    except ValueError as exc:
        raise ModelfileError(f"PARAMETER {name} {exc}", line=line, hint=_param_hint()) from None


def _param_hint() -> str:
    return "parameters localinfer takes: " + ", ".join(PARAMETERS)


def _split(text: str, pattern: re.Pattern[str]) -> tuple[str, str]:
    """The name ``text`` starts with (``pattern``'s first group) and the rest after the blanks that follow it; a
    text that does not start with one gives its first word and ""."""
    found = pattern.match(text)
    if found is None:
        return text.split()[0] if text.split() else text, ""
    return found.group(1), found.group(2) or ""


def _value(rest: str, lines: Sequence[str], index: int, line: int) -> tuple[str, int]:
    """The value starting with ``rest`` (continued on the next lines while a quote is open), unquoted, and the index
    of the line after it."""
    value = rest.strip()
    for quote in ('"""', '"'):
        if not value.startswith(quote):
            continue
        while not (len(value.rstrip()) >= 2 * len(quote) and value.rstrip().endswith(quote)):
            if index >= len(lines):
                raise ModelfileError(f"a {quote} quote is never closed", line=line, hint="close the quoted text")
            value = value + "\n" + lines[index]
            index += 1
        return value.rstrip()[len(quote) : -len(quote)], index
    return value, index


def write(commands: Iterable[Command]) -> str:
    """The Modelfile text of ``commands``, which ``parse`` reads back as the same commands (lines aside). Raises
    ModelfileError for a text that no quoting can carry (three double quotes ending a line inside it)."""
    out = []
    for c in commands:
        head = f"{c.instruction} {c.key}" if c.key else c.instruction
        text = c.value if c.instruction == "FROM" else _quoted(c.value)
        out.append(f"{head} {text}")
        back = parse(f"FROM x\n{out[-1]}\n")[-1]
        if (back.instruction, back.key, back.value) != (c.instruction, c.key, c.value):
            raise ModelfileError(f"the {c.instruction} text cannot be written in a Modelfile", hint=_HINT)
    return "\n".join(out) + "\n"


def _quoted(value: str) -> str:
    """As Ollama quotes (text with a line break or spaces at an end), and also text that starts with a quote."""
    if "\n" in value or value != value.strip() or value.startswith('"') or not value:
        return f'"""{value}"""' if '"' in value or not value else f'"{value}"'
    return value


def of_model(manifest: Manifest) -> str:
    """The Modelfile that makes ``manifest`` again (Ollama's ``show --modelfile``): FROM its file, then its
    adapters, template, system prompt, parameters, license and messages."""
    main = manifest.path if manifest.format == "gguf" else manifest.path.parent
    d = manifest.defaults
    commands = [Command("FROM", str(main)), *(Command("ADAPTER", str(a.path)) for a in manifest.adapters)]
    commands += [Command("TEMPLATE", d.template)] if d.template is not None else []
    commands += [Command("SYSTEM", d.system)] if d.system is not None else []
    for name, value in d.parameters:
        values = value if isinstance(value, tuple) else (value,)
        commands += [Command("PARAMETER", _param_text(v), key=name) for v in values]
    commands += [Command("LICENSE", text) for text in d.license]
    commands += [Command("MESSAGE", content, key=role) for role, content in d.messages]
    header = (
        '# Modelfile generated by "localinfer show"\n'
        "# To build a new Modelfile based on this, replace FROM with:\n"
        f"# FROM {manifest.name}\n\n"
    )
    return header + write(commands)


def parameter_lines(defaults: ModelDefaults) -> str:
    """The parameters as Ollama's ``/api/show`` lists them: a name padded to 30, then the Go-quoted value; one line
    per stop string."""
    lines = []
    for name, value in defaults.parameters:
        for v in value if isinstance(value, tuple) else (value,):
            lines.append(f"{name:<30} {json.dumps(v) if isinstance(v, str) else _param_text(v)}")
    return "\n".join(lines)


def _param_text(value: str | int | float) -> str:
    if isinstance(value, float):
        return repr(value).removesuffix(".0")
    return str(value)
