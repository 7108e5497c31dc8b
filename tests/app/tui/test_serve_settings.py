"""``localinfer --serve`` serves the API as ``localinfer serve`` does with the same settings: the API key
(``LOCALINFER_API_KEY``), the request defaults and the pinned models (the two used to be built apart and drifted).

The app's own run is swapped for one that runs only what the app would run beside it (the API server, on a real
uvicorn on 127.0.0.1) while the test asks it with an HTTP client: everything else is ``localinfer``'s own wiring."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from localinfer.app.cli import build_parser
from localinfer.app.commands import tui
from localinfer.app.tui.app import LocalInferApp
from localinfer.config import Settings
from tests.app.server.conftest import free_port
from tests.app.tui.conftest import wait_for

KEY = "sesame"


def serve_beside_the_app(settings: Settings, monkeypatch: pytest.MonkeyPatch, ask: Any, *argv: str) -> None:
    """Run ``localinfer --serve ARGV`` with ``settings``; while its API serves, ``await ask(url)``."""
    url = f"http://127.0.0.1:{settings.port}"

    def run_the_api_only(app: LocalInferApp) -> None:
        assert app.background is not None, "--serve gave the app no API server to run"
        serve = app.background

        async def main() -> None:
            server = asyncio.ensure_future(serve())
            try:
                await ask(url)
            finally:
                server.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await server

        asyncio.run(main())

    monkeypatch.setattr(LocalInferApp, "run", run_the_api_only)
    args = build_parser().parse_args(["--serve", "--port", str(settings.port), *argv])
    assert tui.run(args, settings) == 0


async def _healthy(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{url}/health")).status_code == 200  # pins are loaded by then
    except httpx.HTTPError:
        return False


def test_the_apps_api_asks_for_the_key_the_environment_sets(
    with_smollm2: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALINFER_API_KEY", KEY)
    settings = Settings().with_overrides(**with_smollm2.model_dump(exclude={"api_key", "port"}), port=free_port())
    answers: dict[str, int] = {}

    async def ask(url: str) -> None:
        await wait_for(lambda: _healthy(url), what="the API to answer")  # /health needs no key
        async with httpx.AsyncClient() as http:
            answers["none"] = (await http.get(f"{url}/v1/models")).status_code
            answers["wrong"] = (await http.get(f"{url}/v1/models", headers={"Authorization": "Bearer no"})).status_code
            answers["key"] = (
                await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
            ).status_code

    serve_beside_the_app(settings, monkeypatch, ask)
    assert answers == {"none": 401, "wrong": 401, "key": 200}


@pytest.mark.model
def test_the_apps_api_loads_the_pinned_models_and_serves_with_the_request_defaults(
    with_smollm2: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = with_smollm2.with_overrides(port=free_port(), pin=["smollm2"], n_predict=3)
    seen: dict[str, Any] = {}

    async def ask(url: str) -> None:
        await wait_for(lambda: _healthy(url), timeout=300, what="the pinned model to load")
        async with httpx.AsyncClient(timeout=300) as http:
            seen["loaded"] = [m["name"] for m in (await http.get(f"{url}/api/ps")).json()["models"]]
            body = {"model": "smollm2", "prompt": "Once upon a time", "ignore_eos": True}  # no max_tokens
            seen["completion"] = (await http.post(f"{url}/v1/completions", json=body)).json()

    serve_beside_the_app(settings, monkeypatch, ask)
    assert seen["loaded"] == ["smollm2:latest"]  # loaded at start, before any request named it
    assert seen["completion"]["usage"]["completion_tokens"] == 3  # --n-predict's default, as `serve` gives it
    assert seen["completion"]["choices"][0]["finish_reason"] == "length"
