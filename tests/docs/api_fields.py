"""docs/api-fields.md, written from the server itself: every route ``create_app`` registers, grouped by the dialect
whose package serves it, with the fields its body model accepts (the name on the wire, the JSON type with its
bounds, the default, and what the model says of it: the field's description or the comment beside it), the query
parameters it reads, and each nested object once.

``served_routes`` is also what tests/docs/test_routes.py checks docs/api.md against.
"""

from __future__ import annotations

import ast
import enum
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import annotated_types
from fastapi import FastAPI, Request
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tests.docs.markdown import escape, github_slug, prose

DIALECTS = {
    "openai": "OpenAI",
    "ollama": "Ollama",
    "anthropic": "Anthropic",
    "llamacpp": "llama.cpp (llama-server)",
    "app": "Server",
}

INTRO = """\
# API fields

The request fields each route accepts, written from the server's own request models, so this page is what the code
takes today; [api.md](api.md) says what each route does, with examples. A field sent as `null` is read as not
sent, and fields a route does not know are ignored, except on llama.cpp's native routes, which refuse a field that
would change the answer and that localinfer cannot honour.

```bash
curl -s localhost:8080/v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}'
```

<!-- Written by scripts/gen-docs from src/localinfer/app/server: edit the models' comments there, not here. -->
"""


@dataclass(frozen=True)
class Route:
    """One path the server answers, with the methods and the function behind it."""

    path: str
    methods: tuple[str, ...]
    endpoint: Callable[..., Any]

    @property
    def dialect(self) -> str:
        """The dialect package serving it (``openai``, ``ollama``...), or ``app`` for the app's own routes."""
        parts = self.endpoint.__module__.split(".")
        return parts[3] if parts[:3] == ["localinfer", "app", "server"] and len(parts) > 4 else "app"


def build_app(home: Path) -> FastAPI:
    """The server's app as ``localinfer serve`` builds it, over an engine with an empty store in ``home``: no
    model is loaded, so it only tells what is routed."""
    from localinfer.app.server.app import create_app
    from localinfer.config import Settings
    from localinfer.engine.engine import Engine
    from localinfer.models.store import ModelStore

    settings = Settings(home=home)
    return create_app(Engine(settings, ModelStore(settings.models_dir)))


def served_routes(app: FastAPI) -> list[Route]:
    """Every route of ``app`` that localinfer serves (FastAPI's own /docs, /redoc and /openapi.json left out)."""
    routes = []
    for context in iter_route_contexts(app.routes):
        endpoint = context.endpoint
        if endpoint is None or not endpoint.__module__.startswith("localinfer."):
            continue
        routes.append(Route(str(context.path), tuple(sorted(context.methods or ())), endpoint))
    return routes


@dataclass
class _Page:
    nested: dict[type[BaseModel], None] = field(default_factory=dict)  # the objects fields hold, in order met


def render(app: FastAPI) -> str:
    """The whole page for ``app``."""
    page = _Page()
    by_endpoint: dict[tuple[str, Callable[..., Any]], list[Route]] = {}
    for route in served_routes(app):
        by_endpoint.setdefault((route.dialect, route.endpoint), []).append(route)
    out = [INTRO]
    for dialect, title in DIALECTS.items():
        groups = [routes for (d, _), routes in by_endpoint.items() if d == dialect]
        if not groups:
            continue
        out += [f"## {title}", ""]
        for routes in groups:
            out += _route_section(routes, page)
    out += ["## Objects", "", "The objects the fields above hold, each once.", ""]
    out += _nested_sections(page)
    return "\n".join(out).rstrip("\n") + "\n"


def _route_section(routes: list[Route], page: _Page) -> list[str]:
    first = routes[0]
    methods = "/".join(m for m in first.methods if m != "HEAD")
    out = [f"### {methods} {_shown(first.path)}", ""]
    if len(routes) > 1:
        out += ["Also served at " + ", ".join(f"`{_shown(r.path)}`" for r in routes[1:]) + ".", ""]
    body = _body_model(first.endpoint)
    query = _query_parameters(first)
    if body is None and not query:
        return [*out, "No body and no parameters.", ""]
    if body is not None:
        doc = _docstring(body)
        if doc:
            out += [prose(doc), ""]
        out += _field_table(body, page)
    if query:
        out += ["Query parameters:", "", "| parameter | type | default |", "|---|---|---|"]
        for name, annotation, default in query:
            shown = "" if default is None else f"`{json.dumps(default)}`"
            out.append(f"| `{name}` | {_type(annotation, page)} | {shown} |")
        out.append("")
    return out


def _shown(path: str) -> str:
    """``path`` as a client writes it: ``/v1/models/{model_id}``, without Starlette's ``:path`` convertor."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def _nested_sections(page: _Page) -> list[str]:
    out: list[str] = []
    done: set[type[BaseModel]] = set()
    while len(done) < len(page.nested):
        for model in list(page.nested):
            if model in done:
                continue
            done.add(model)
            out += [f"### {_nested_title(model)}", ""]
            doc = _docstring(model)
            if doc:
                out += [prose(doc), ""]
            out += _field_table(model, page)
    return out


def _nested_title(model: type[BaseModel]) -> str:
    """``Name (dialect/module)``: where the model is defined under app/server, which also tells apart two of a name."""
    where = model.__module__.removeprefix("localinfer.app.server.").replace(".", "/")
    return f"{model.__name__} ({where})"


def _field_table(model: type[BaseModel], page: _Page) -> list[str]:
    if not model.model_fields:
        return ["No fields.", ""]
    out = ["| field | type | default | notes |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        wire_name = info.alias or name
        out.append(
            f"| `{wire_name}` | {_type(info.annotation, page, info.metadata)} | {_default(info)} "
            f"| {prose(info.description or _comment(model, name))} |"
        )
    return [*out, ""]


def _body_model(endpoint: Callable[..., Any]) -> type[BaseModel] | None:
    """The model a route parses its body into: a parameter typed with it, or ``Annotated[Model, Depends(...)]``."""
    for annotation in typing.get_type_hints(endpoint, include_extras=True).values():
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            return annotation
    return None


def _query_parameters(route: Route) -> list[tuple[str, Any, Any]]:
    """A route's plain parameters that are not in its path: FastAPI reads them from the query string."""
    hints = typing.get_type_hints(route.endpoint)
    found = []
    for name, parameter in inspect.signature(route.endpoint).parameters.items():
        annotation = hints.get(name)
        if annotation is None or annotation is Request or f"{{{name}" in route.path:
            continue
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            continue
        if typing.get_origin(hints.get(name, None)) is typing.Annotated:
            continue
        default = None if parameter.default is inspect.Parameter.empty else parameter.default
        found.append((name, annotation, default))
    return found


_JSON_NAMES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    Any: "any",
}


def _type(annotation: Any, page: _Page, metadata: list[Any] | None = None) -> str:
    """``annotation`` as JSON types in Markdown: ``null`` left out (a null is read as absent), a nested model a
    link to its table, and the field's bounds after it."""
    text = _json_type(annotation, page)
    bounds = [_bound(m, text_type=annotation is str) for m in metadata or ()]
    return ", ".join([text, *(b for b in bounds if b)])


def _json_type(annotation: Any, page: _Page) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _json_type(args[0], page)
    if origin in (typing.Union, types.UnionType):
        parts = [_json_type(a, page) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        return " or ".join(f"`{json.dumps(a.value if isinstance(a, enum.Enum) else a)}`" for a in args)
    if origin in (list, tuple, typing.Sequence):
        return f"array of {_json_type(args[0], page)}" if args else "array"
    if origin is dict:
        return f"object of {_json_type(args[1], page)}" if len(args) == 2 and args[1] is not Any else "object"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        page.nested.setdefault(annotation, None)
        title = _nested_title(annotation)
        return f"[{annotation.__name__}](#{github_slug(title)})"
    if isinstance(annotation, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
        return _json_type(annotation.__value__, page)
    return _JSON_NAMES.get(annotation, escape(getattr(annotation, "__name__", str(annotation))))


def _bound(metadata: Any, *, text_type: bool) -> str:
    """A pydantic bound (``ge``, ``max_length``...) in words; a length counts characters of a string."""
    symbols = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "max_length": "at most", "min_length": "at least"}
    for attribute, symbol in symbols.items():
        value = getattr(metadata, attribute, None)
        if value is not None and isinstance(
            metadata, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt)
        ):
            return f"{symbol} {_number(value)}"
        if value is not None and isinstance(metadata, (annotated_types.MaxLen, annotated_types.MinLen)):
            unit = "character" if text_type else "item"
            return f"{symbol} {value} {unit}{'s' if value != 1 else ''}"
    return ""


def _number(value: Any) -> str:
    """A bound as a reader takes it in: 2^63 rather than its 19 digits."""
    if isinstance(value, int) and abs(value) >= 2**32 and abs(value) & (abs(value) - 1) == 0:
        return f"{'-' if value < 0 else ''}2^{abs(value).bit_length() - 1}"
    return str(value)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return ""
    else:
        value = info.default
    if value is None:
        return ""
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{json.dumps(value)}`"


def _docstring(model: type[BaseModel]) -> str:
    """The first paragraph of the model's own docstring (not one it inherits)."""
    doc = model.__dict__.get("__doc__")
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n")[0]


def _comment(model: type[BaseModel], name: str) -> str:
    """The comment beside field ``name`` where the class that declares it declares it; "" without one."""
    for owner in model.__mro__:
        if name in inspect.get_annotations(owner):
            return _field_comments(owner).get(name, "")
    return ""


@cache
def _field_comments(owner: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(owner))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments = {}
    for node in _class_body(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.end_lineno is not None:
            tail = lines[node.end_lineno - 1][node.end_col_offset or 0 :]
            if "#" in tail:
                comments[node.target.id] = tail.split("#", 1)[1].strip()
    return comments


def _class_body(tree: ast.Module) -> Iterator[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield from node.body
