"""The screens see the app as a TuiHost (they never import LocalInferApp): mypy checks that it is one."""

from __future__ import annotations

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.host import TuiHost


def as_host(app: LocalInferApp) -> TuiHost:
    return app  # a type error here means the screens expect something of the app it does not have


def test_the_app_is_what_its_screens_take_it_for() -> None:
    assert as_host.__annotations__["return"] == "TuiHost"
