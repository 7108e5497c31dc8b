"""docs/cli.md, written from the ``localinfer`` argparse parser (``app/cli.py``), so the page cannot drift from
``localinfer VERB --help``: every verb, argument and flag with its help, default and choices.

argparse has no public way to walk a parser; its ``_actions``, ``_action_groups`` and ``_choices_actions`` have
been stable since Python 3.2, and only this module reads them.
"""

from __future__ import annotations

import argparse
from typing import Any

from tests.docs.markdown import escape, github_slug

# Python 3.10-3.12 add this to a BooleanOptionalAction's help; 3.13 no longer does. The page shows defaults apart.
_BOOLEAN_DEFAULT_SUFFIX = " (default: %(default)s)"
_GROUP_TITLES = {"positional arguments": "Arguments", "options": "Options", "optional arguments": "Options"}

INTRO = """\
# Command line

`localinfer` does one task per verb: `run` answers a prompt, `serve` speaks the OpenAI, Ollama, Anthropic and
llama.cpp APIs on one port, `pull`, `ls`, `show` and `rm` manage models. With no verb it opens the app.
Every verb and flag is listed here, written from the parser itself, so it says what `localinfer VERB --help` says.

```bash
localinfer run smollm2 "Name the capital of France."
```

<!-- Written by scripts/gen-docs from the parser in src/localinfer/app/cli.py: edit the help there, not here. -->
"""


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page for ``parser`` (the top-level ``localinfer`` parser)."""
    verbs = _verbs(parser)
    out = [INTRO, "| command | what it does |", "|---|---|"]
    out.append(f"| [`{parser.prog}`](#{github_slug(parser.prog)}) | {escape(_first_sentence(parser.description))} |")
    for name, sub in verbs:
        out.append(f"| [`{parser.prog} {name}`](#{github_slug(name)}) | {escape(_summary(parser, name, sub))} |")
    out.append("")
    out.extend(_section(parser.prog, parser, synopsis=f"{parser.prog} [options] [COMMAND]"))
    for name, sub in verbs:
        out.extend(_section(name, sub, synopsis=_synopsis(f"{parser.prog} {name}", sub)))
    return "\n".join(out).rstrip("\n") + "\n"


def _verbs(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _summary(parser: argparse.ArgumentParser, name: str, sub: argparse.ArgumentParser) -> str:
    """The one line ``localinfer --help`` lists beside the verb, else its description."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name and choice.help:
                    return choice.help
    return _first_sentence(sub.description)


def _first_sentence(text: str | None) -> str:
    first = (text or "").split(". ")[0].strip()
    return first if first.endswith(".") else first + "." if first else ""


def _section(title: str, parser: argparse.ArgumentParser, *, synopsis: str) -> list[str]:
    out = [f"## {title}", ""]
    if parser.description:
        out += [" ".join(parser.description.split()), ""]
    out += ["```text", synopsis, "```", ""]
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))
        ]
        if not actions:
            continue
        positional = all(not a.option_strings for a in actions)
        title = group.title or ""
        title = _GROUP_TITLES.get(title, title[:1].upper() + title[1:])
        out += [f"**{escape(title)}**", ""]
        out += [f"| {'argument' if positional else 'option'} | what it does |", "|---|---|"]
        out += [_row(action) for action in actions]
        out.append("")
    return out


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    """``localinfer VERB [options] ARG [ARG]``: positionals as argparse's usage shows them, options summed up."""
    parts = [prog]
    if any(a.option_strings and a.help != argparse.SUPPRESS for a in parser._actions if not _is_help(a)):
        parts.append("[options]")
    parts += [_positional_usage(a) for a in parser._actions if not a.option_strings]
    return " ".join(parts)


def _is_help(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction)


def _positional_usage(action: argparse.Action) -> str:
    name = _metavar(action)
    return {
        "?": f"[{name}]",
        "*": f"[{name} ...]",
        "+": f"{name} [{name} ...]",
        argparse.REMAINDER: f"[{name} ...]",
    }.get(action.nargs if isinstance(action.nargs, str) else "", name)


def _metavar(action: argparse.Action) -> str:
    """The value's name as ``--help`` shows it: the metavar, else the choices in braces, else the name in capitals."""
    if isinstance(action.metavar, str):
        return action.metavar
    if isinstance(action.metavar, tuple):
        return " ".join(action.metavar)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper()


def _row(action: argparse.Action) -> str:
    text, default = _help(action), _default(action)
    if default and "default" not in text:
        text += f" Default: {default}."
    return f"| {_names(action)} | {text} |"


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{_positional_usage(action)}`"
    if action.nargs == 0:
        return ", ".join(f"`{option}`" for option in action.option_strings)
    value = _metavar(action)
    if action.nargs == "?":
        value = f"[{value}]"
    elif action.nargs in ("*", "+"):
        value = f"{value} ..."
    elif isinstance(action.nargs, int) and action.nargs > 1:
        value = " ".join([value] * action.nargs)
    return ", ".join(f"`{option} {value}`" for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    value: Any = action.default
    if value is None or value is argparse.SUPPRESS or value == [] or isinstance(action, argparse._VersionAction):
        return ""
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction) and value is False:
        return ""  # a switch: off unless given
    if isinstance(value, bool):
        return f"`{_boolean_option(action, value)}`"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{item}`" for item in value)
    return f"`{value}`"


def _boolean_option(action: argparse.Action, value: bool) -> str:
    """The spelling of a BooleanOptionalAction that gives ``value``: ``--x`` or ``--no-x``."""
    positive = [o for o in action.option_strings if not o.startswith("--no-")]
    negative = [o for o in action.option_strings if o.startswith("--no-")]
    return (positive if value else negative or positive)[0]


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    text = text.removesuffix(_BOOLEAN_DEFAULT_SUFFIX)
    if "%(" in text:
        params = {**vars(action), "prog": "localinfer"}
        text = text % {key: value for key, value in params.items() if value is not argparse.SUPPRESS}
    if action.choices is not None and action.metavar is not None:
        choices = ", ".join(f"`{choice}`" for choice in action.choices)
        return f"{escape(text)} (one of {choices})" if text else f"one of {choices}"
    return escape(text)
