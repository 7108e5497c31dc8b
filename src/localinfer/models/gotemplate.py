"""Ollama's Go chat templates translated to Jinja, once, where a model is made or found: the engine knows one
template language.

The forms Ollama's library uses translate: ``.System``, ``.Prompt``, ``.Response`` (a template without
``.Messages`` is rendered per turn, as Ollama does, the last turn cut after ``.Response``), ``range .Messages`` and
``.Tools`` with their fields (``.Role``, ``.Content``, ``.ToolCalls``, ``.Function.Name``...), ``if``/``else
if``/``else``, ``with``, ``range $i, $m := ...``, variables (``$last := ...``, ``$x = ...``), ``$.Field``, pipelines,
and the functions ``eq ne lt le gt ge and or not len slice index json currentDate``. Anything else
(``define``/``template``/``block``, ``printf``, ``toTypeScriptType``, unknown fields) is NotTranslatable naming it.
Whitespace is kept as Go keeps it (``{{-``/``-}}`` trim; Jinja's own trimming is turned off tag by tag).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Final

_ACTION = re.compile(r"\{\{(-[ \t\r\n])?(.*?)([ \t\r\n]-)?\}\}", re.DOTALL)
_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:\\.|[^"\\])*")|(?P<raw>`[^`]*`)|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>:=|[()|=,])'
    r"|(?P<word>[$.]?[A-Za-z_]?[\w.$]*))"
)
_FIELDS: Final = {
    "Role": "role",
    "Content": "content",
    "ToolCalls": "tool_calls",
    "Function": "function",
    "Name": "name",
    "Arguments": "arguments",
    "Description": "description",
    "Parameters": "parameters",
    "Properties": "properties",
    "Required": "required",
    "Type": "type",
    "Enum": "enum",
    "Items": "items",
    "Thinking": "reasoning_content",
    "ToolName": "name",
    "ToolCallID": "tool_call_id",
    "ID": "id",
}
_STRUCTURED: Final = {
    "tools",
    "arguments",
    "parameters",
    "properties",
    "tool_calls",
    "messages",
    "function",
    "required",
}
_ESCAPE = re.compile(r"\{(?=[{%#])")  # text that Jinja would read as a tag
_COMPARE: Final = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_SYSTEM = (  # Ollama's .System: every system turn's text, joined
    "{%+ set go_system = messages | selectattr('role', 'equalto', 'system') | map(attribute='content')"
    " | join('\\n\\n') +%}"
)


class NotTranslatable(ValueError):
    """A Go template construct with no Jinja translation here; ``construct`` names it."""

    def __init__(self, construct: str) -> None:
        super().__init__(f"the Go template cannot be translated to Jinja: {construct}")
        self.construct = construct


def is_go_template(text: str) -> bool:
    """Whether ``text`` is a Go template rather than Jinja: no ``{%``/``{#`` tags, and every ``{{ }}`` action reads
    as Go (a field, a variable, a comment, a keyword or a function)."""
    if "{%" in text or "{#" in text:
        return False
    actions = [m.group(2).strip() for m in _ACTION.finditer(text)]
    go_start = re.compile(r"^(?:[.$]|/\*|(?:if|else|end|range|with|define|template|block|break|continue)\b|\w+ )")
    return bool(actions) and all(go_start.match(a) for a in actions)


def to_jinja(text: str) -> str:
    """The Jinja text that renders as Ollama renders the Go template ``text``. Raises NotTranslatable."""
    pieces = _lex(text)
    if not any(p.action and re.search(r"\.Messages\b", p.text) for p in pieces):
        return _legacy(pieces)
    body = _Translator(root={"System": "go_system", "Prompt": "''", "Response": "''"}).run(pieces)
    return "{%+ set ns = namespace() +%}" + _SYSTEM + body


@dataclass
class _Piece:
    text: str
    action: bool


def _lex(text: str) -> list[_Piece]:
    """Text and actions, with the text around ``{{-`` and ``-}}`` trimmed as Go trims it."""
    pieces: list[_Piece] = []
    at, trim_next = 0, False
    for match in _ACTION.finditer(text):
        before = text[at : match.start()]
        if trim_next:
            before = before.lstrip()
        if match.group(1):
            before = before.rstrip()
        pieces += [_Piece(before, False), _Piece(match.group(2).strip(), True)]
        at, trim_next = match.end(), bool(match.group(3))
    rest = text[at:]
    pieces.append(_Piece(rest.lstrip() if trim_next else rest, False))
    return [p for p in pieces if p.action or p.text]


def _legacy(pieces: list[_Piece]) -> str:
    """A template of ``.System``/``.Prompt``/``.Response``, rendered per turn as Ollama does: each earlier turn
    whole, the last one up to its ``.Response``."""
    depth, cut = 0, len(pieces)
    for i, piece in enumerate(pieces):
        if not piece.action:
            continue
        head = piece.text.split()[0] if piece.text.split() else ""
        if piece.text in (".Response", "$.Response"):
            if depth:
                raise NotTranslatable("{{ .Response }} inside a block")
            cut = i + 1
            break
        depth += (head in ("if", "range", "with")) - (head == "end")
    roots = {"System": "S", "Prompt": "P", "Response": "R"}
    whole = _Translator(root=roots).run(pieces)
    last = _Translator(root=roots).run(pieces[:cut])
    local = "{%+ set ns = namespace() +%}"  # the template's own variables, inside each turn
    reset = "{%+ set ns.s = '' +%}{%+ set ns.p = '' +%}{%+ set ns.r = '' +%}"
    turn = "{{ turn(ns.s, ns.p, ns.r) }}" + reset
    return (
        "{%+ set ns = namespace(s='', p='', r='') +%}"
        f"{{%+ macro turn(S, P, R) +%}}{local}{whole}{{%+ endmacro +%}}"
        f"{{%+ macro last(S, P, R) +%}}{local}{last}{{%+ endmacro +%}}"
        "{%+ for m in messages +%}"
        f"{{%+ if m.role == 'system' +%}}{{%+ if ns.p or ns.r +%}}{turn}{{%+ endif +%}}{{%+ set ns.s = m.content +%}}"
        f"{{%+ elif m.role == 'user' +%}}{{%+ if ns.r +%}}{turn}{{%+ endif +%}}{{%+ set ns.p = m.content +%}}"
        "{%+ elif m.role == 'assistant' +%}{%+ set ns.r = m.content +%}{%+ endif +%}"
        "{%+ endfor +%}{{ last(ns.s, ns.p, ns.r) }}"
    )


@dataclass
class _Scope:
    kind: str  # root, if, range, with
    dot: str | None  # the Jinja expression ``.`` stands for (None: the root)
    structured: bool = False  # ``.`` is an object Go prints as JSON (a tool, a call, a message)


@dataclass
class _Translator:
    root: dict[str, str]
    scopes: list[_Scope] = field(default_factory=lambda: [_Scope("root", None)])
    variables: dict[str, str] = field(default_factory=dict)
    count: int = 0

    def run(self, pieces: list[_Piece]) -> str:
        out = [self._action(p.text) if p.action else _ESCAPE.sub("{{ '{' }}", p.text) for p in pieces]
        if len(self.scopes) > 1:
            raise NotTranslatable(f"{{{{ {self.scopes[-1].kind} }}}} without {{{{ end }}}}")
        return "".join(out)

    def _action(self, text: str) -> str:
        if text.startswith("/*"):
            return ""
        word, _, rest = text.partition(" ")
        rest = rest.strip()
        if word in ("define", "template", "block"):
            raise NotTranslatable(f"{{{{ {word} }}}}")
        if word == "if":
            self.scopes.append(_Scope("if", self.scopes[-1].dot))
            return f"{{%+ if {self._pipeline(rest)} +%}}"
        if word == "else":
            if rest.startswith("if "):
                return f"{{%+ elif {self._pipeline(rest[3:])} +%}}"
            if rest:
                raise NotTranslatable(f"{{{{ else {rest.split()[0]} }}}}")
            return "{%+ else +%}"
        if word == "end":
            if len(self.scopes) == 1:
                raise NotTranslatable("{{ end }} without a block")
            kind = self.scopes.pop().kind
            return "{%+ endfor +%}" if kind == "range" else "{%+ endif +%}"
        if word in ("break", "continue"):
            return f"{{%+ {word} +%}}"
        if word == "range":
            return self._range(rest)
        if word == "with":
            self.count += 1
            name = f"w{self.count}"
            value = self._pipeline(rest)
            self.scopes.append(_Scope("with", name))
            return f"{{%+ set {name} = {value} +%}}{{%+ if {name} +%}}"
        assigned = re.match(r"(\$\w+)\s*(:=|=)\s*(.*)$", text, re.DOTALL)
        if assigned:
            var = self.variables.setdefault(assigned.group(1), f"ns.v_{assigned.group(1)[1:]}")
            return f"{{%+ set {var} = {self._pipeline(assigned.group(3))} +%}}"
        value = self._pipeline(text)
        return f"{{{{ {value} | tojson }}}}" if self._structured(text) else f"{{{{ {value} }}}}"

    def _range(self, rest: str) -> str:
        declared = re.match(r"(\$\w+)(?:\s*,\s*(\$\w+))?\s*:=\s*(.*)$", rest, re.DOTALL)
        names = [n for n in (declared.group(1), declared.group(2)) if n] if declared else []
        source_text = declared.group(3) if declared else rest
        source = self._pipeline(source_text)
        self.count += 1
        item, index = f"it{self.count}", f"ix{self.count}"
        out = ""
        if source_text.strip().endswith("Properties"):  # a map: Go ranges over its keys in order
            out = f"{{%+ for {index}, {item} in ({source}) | dictsort +%}}"
            if len(names) == 1:
                self.variables[names[0]] = item
        else:
            out = f"{{%+ for {item} in {source} +%}}{{%+ set {index} = loop.index0 +%}}"
            if len(names) == 1:
                self.variables[names[0]] = item
        if len(names) == 2:
            self.variables[names[0]], self.variables[names[1]] = index, item
        last = source_text.strip().rsplit(".", 1)[-1]
        self.scopes.append(_Scope("range", item, structured=last in ("Tools", "ToolCalls", "Messages")))
        return out

    def _structured(self, text: str) -> bool:
        if text.strip() == ".":
            return self.scopes[-1].structured
        last = re.split(r"[.\s]", text.strip().rstrip(")"))[-1]
        return _FIELDS.get(last, last.lower()) in _STRUCTURED and not text.startswith(("json ", "len "))

    # -- expressions -----------------------------------------------------------------------------------------

    def _pipeline(self, text: str) -> str:
        tokens = _tokens(text)
        value, at = self._parse_pipeline(tokens, 0)
        if at != len(tokens):
            raise NotTranslatable(f"{{{{ {text} }}}}")
        return value

    def _parse_pipeline(self, tokens: list[str], at: int) -> tuple[str, int]:
        value: str | None = None
        while True:
            command: list[str] = []
            while at < len(tokens) and tokens[at] not in ("|", ")"):
                if tokens[at] == "(":
                    inner, at = self._parse_pipeline(tokens, at + 1)
                    if at >= len(tokens) or tokens[at] != ")":
                        raise NotTranslatable("an unclosed (")
                    command.append(f"({inner})")
                    at += 1
                else:
                    command.append(tokens[at])
                    at += 1
            if value is not None:
                command.append(value)
            value = self._command(command)
            if at < len(tokens) and tokens[at] == "|":
                at += 1
                continue
            return value, at

    def _command(self, words: list[str]) -> str:
        if not words:
            raise NotTranslatable("an empty pipeline")
        head, args = words[0], [self._operand(w) for w in words[1:]]
        if head in _COMPARE and len(args) >= 2:
            if head == "eq":
                return "(" + " or ".join(f"{args[0]} == {other}" for other in args[1:]) + ")"
            return f"({args[0]} {_COMPARE[head]} {args[1]})"
        if head in ("and", "or") and args:
            return "(" + f" {head} ".join(args) + ")"
        if head == "not" and len(args) == 1:
            return f"(not {args[0]})"
        if head == "len" and len(args) == 1:
            return f"({args[0]} | length)"
        if head == "slice" and len(args) in (2, 3):
            return f"{args[0]}[{args[1]}:{args[2] if len(args) == 3 else ''}]"
        if head == "index" and len(args) >= 2:
            return args[0] + "".join(f"[{a}]" for a in args[1:])
        if head == "json" and len(args) == 1:
            return f"({args[0]} | tojson)"
        if head == "currentDate" and len(args) <= 1:
            return "strftime_now('%Y-%m-%d')"
        if len(words) == 1:
            return self._operand(head)
        raise NotTranslatable(f"{{{{ {head} ... }}}}" if head[:1].isalpha() else f"{{{{ {' '.join(words)} }}}}")

    def _operand(self, word: str) -> str:
        if word.startswith("(") or word[:1] in "\"'`" or re.fullmatch(r"-?\d+(?:\.\d+)?", word):
            return _literal(word)
        if word in ("true", "false"):
            return word
        if word == "nil":
            return "none"
        if word.startswith("$"):
            name, dot, fields = word.partition(".")
            if name == "$":
                return self._fields(None, fields) if dot else _refuse("{{ $ }}")
            if name not in self.variables:
                raise NotTranslatable(f"the variable {name}, never declared")
            return self._fields(self.variables[name], fields)
        if word == ".":
            current = self.scopes[-1].dot
            return current if current is not None else _refuse("{{ . }} at the top")
        if word.startswith("."):
            return self._fields(self.scopes[-1].dot, word[1:])
        raise NotTranslatable(f"the function {word}")

    def _fields(self, base: str | None, path: str) -> str:
        names = [n for n in path.split(".") if n]
        if base is None:
            if not names:
                raise NotTranslatable("{{ $ }}")
            first = names.pop(0)
            base = self._root_field(first)
        for name in names:
            if name not in _FIELDS:
                raise NotTranslatable(f"the field .{name}")
            base = f"{base}.{_FIELDS[name]}"
        return base

    def _root_field(self, name: str) -> str:
        fixed = {
            "Messages": "messages",
            "Tools": "tools",
            "Suffix": "''",
            "Think": "(enable_thinking | default(false))",
            "IsThinkSet": "(enable_thinking is defined)",
            "ThinkLevel": "(reasoning_effort | default(''))",
        }
        if name in self.root:
            return self.root[name]
        if name in fixed:
            return fixed[name]
        raise NotTranslatable(f"the field .{name}")


def _tokens(text: str) -> list[str]:
    tokens, at = [], 0
    text = text.strip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise NotTranslatable(f"{{{{ {text} }}}}")
        tokens.append(match.group().strip())
        at = match.end()
        while at < len(text) and text[at].isspace():
            at += 1
    return [t for t in tokens if t]


def _literal(word: str) -> str:
    if word.startswith("`"):
        return json.dumps(word[1:-1])
    if word.startswith('"'):
        return json.dumps(json.loads(word))
    return word


def _refuse(construct: str) -> str:
    raise NotTranslatable(construct)
