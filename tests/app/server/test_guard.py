"""Who may use the server: the Host check (DNS rebinding), the CORS allow-list, browser origins that change state,
and the API key checked before any body is read. Policy rules in process; every case a client can see against a
real ``localinfer serve`` on SmolLM2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from localinfer.app.server.app import create_app
from localinfer.app.server.guard import AccessPolicy, host_name
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest, ModelStore
from tests.app.server.conftest import serving
from tests.app.server.management import API_KEY, SERVED, SMOL_REPO, ManagedServer, managed_server
from tests.idle_backend import IdleBackend

AUTH = {"Authorization": f"Bearer {API_KEY}"}
EVIL = "https://evil.example"


# -- the policy, in process ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8080", "localhost"),
        ("127.0.0.1:11434", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("evil.example.", "evil.example"),
        ("localhost:abc", None),
        ("[::1", None),
        ("[::1]x", None),
    ],
)
def test_host_headers_are_read_without_their_port(header: str, name: str | None) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8080", "app.localhost:1", "127.0.0.1:9", "127.3.4.5", "[::1]:8080", None]
)
def test_a_loopback_server_answers_loopback_names_on_any_port(host: str | None) -> None:
    assert AccessPolicy("127.0.0.1").host_allowed(host)


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8080", "192.168.1.5", "localhost.evil.example", "127.0.0.1.nip.io", "[::1"]
)
def test_a_loopback_server_refuses_other_hosts(host: str) -> None:
    assert not AccessPolicy("127.0.0.1").host_allowed(host)


def test_allowed_hosts_add_names_and_a_star_allows_any() -> None:
    policy = AccessPolicy("127.0.0.1", allow_hosts=("box.lan",))
    assert policy.host_allowed("box.lan:8080") and policy.host_allowed("BOX.LAN")
    assert not policy.host_allowed("other.lan")
    assert AccessPolicy("127.0.0.1", allow_hosts=("*",)).host_allowed("anything.example")


def test_a_server_bound_elsewhere_answers_its_address_and_ip_literals_but_not_other_names() -> None:
    specific = AccessPolicy("192.168.1.5")
    assert specific.host_allowed("192.168.1.5:8080") and specific.host_allowed("localhost")
    assert not specific.host_allowed("evil.example")
    everywhere = AccessPolicy("0.0.0.0", allow_hosts=("llm.example.com",))
    assert everywhere.host_allowed("10.0.0.7:8080") and everywhere.host_allowed("llm.example.com")
    assert not everywhere.host_allowed("evil.example")


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:3000",
        "https://127.0.0.1:8443",
        "http://[::1]:5173",
        "app://obsidian.md",
        "file://",
        "tauri://localhost",
        "vscode-webview://1abc",
    ],
)
def test_local_pages_and_app_origins_are_allowed_by_default(origin: str) -> None:
    assert AccessPolicy().origin_allowed(origin, "127.0.0.1:8080")


@pytest.mark.parametrize(
    "origin", [EVIL, "http://localhost.evil.example", "http://127.0.0.1.nip.io", "null", "http://localhost:3000/x"]
)
def test_other_origins_are_not(origin: str) -> None:
    assert not AccessPolicy().origin_allowed(origin, "127.0.0.1:8080")


def test_configured_origins_add_to_the_defaults_with_star_as_a_wildcard() -> None:
    policy = AccessPolicy(cors_origins=("https://*.example.com", "http://chat.lan:8000"))
    assert policy.origin_allowed("https://chat.example.com", None)
    assert policy.origin_allowed("http://chat.lan:8000", None)
    assert not policy.origin_allowed("http://chat.lan:8001", None)
    assert not policy.origin_allowed("https://example.org", None)
    assert AccessPolicy(cors_origins=("*",)).origin_allowed(EVIL, None)


def test_the_servers_own_origin_is_allowed_so_its_docs_page_works() -> None:
    assert AccessPolicy("0.0.0.0").origin_allowed("http://10.0.0.7:8080", "10.0.0.7:8080")


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    """The app in process on an idle stand-in backend, with a key, reached as http://127.0.0.1:8080."""
    settings = Settings(home=tmp_path, discover=False)
    engine = Engine(settings, ServedModels(ModelLibrary(ModelStore(settings.models_dir), None)), IdleBackend)
    app = create_app(engine, access=AccessPolicy(api_key=API_KEY))
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        yield client


def test_a_refused_host_is_403_in_the_routes_dialect(app_client: TestClient) -> None:
    openai_shaped = app_client.get("/v1/models", headers={**AUTH, "Host": "evil.example"})
    assert openai_shaped.status_code == 403
    assert openai_shaped.json()["error"]["type"] == "permission_error"
    assert "evil.example" in openai_shaped.json()["error"]["message"]
    ollama_shaped = app_client.get("/api/tags", headers={**AUTH, "Host": "evil.example"})
    assert ollama_shaped.status_code == 403
    assert set(ollama_shaped.json()) == {"error"}


def test_a_preflight_needs_no_key_and_a_key_refusal_carries_cors_headers(app_client: TestClient) -> None:
    origin = {"Origin": "http://localhost:3000"}
    preflight = app_client.options(
        "/v1/chat/completions",
        headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-stainless-os"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-headers"] == "x-stainless-os"
    refused = app_client.post("/v1/chat/completions", content=b"{", headers=origin)
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "http://localhost:3000"  # the page can read why


# -- against a real server ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_server(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    """SmolLM2 served without a key, in its own home, pulling from a Hub stand-in."""
    root = tmp_path_factory.mktemp("guard-open")
    with managed_server(smollm2, root, "--ctx-size", "512", "--threads", "1", api_key=None) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_server(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    with managed_server(smollm2, tmp_path_factory.mktemp("guard-keyed"), "--ctx-size", "512", "--threads", "1") as s:
        yield s


def chat_body(model: str = SERVED) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.mark.model
def test_a_foreign_host_is_refused_for_gets_and_posts(open_server: ManagedServer) -> None:
    evil = {"Host": "evil.example"}
    listed = httpx.get(f"{open_server.url}/v1/models", headers=evil)
    assert listed.status_code == 403
    assert listed.json()["error"]["code"] == "forbidden"
    chat = httpx.post(f"{open_server.url}/v1/chat/completions", json=chat_body(), headers=evil, timeout=60)
    assert chat.status_code == 403
    tags = httpx.get(f"{open_server.url}/api/tags", headers=evil)
    assert tags.status_code == 403
    assert tags.json()["error"].startswith("this server does not answer to the host 'evil.example'")


@pytest.mark.model
def test_loopback_names_with_the_port_are_answered(open_server: ManagedServer) -> None:
    port = open_server.url.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        listed = httpx.get(f"{open_server.url}/v1/models", headers={"Host": host})
        assert listed.status_code == 200, host
        chat = httpx.post(
            f"{open_server.url}/v1/chat/completions", json=chat_body(), headers={"Host": host}, timeout=60
        )
        assert chat.status_code == 200, host


@pytest.mark.model
def test_a_cross_origin_text_plain_post_cannot_start_a_pull(open_server: ManagedServer) -> None:
    body = json.dumps({"model": SMOL_REPO, "stream": False}).encode()
    simple = {"Origin": EVIL, "Content-Type": "text/plain"}  # what a page's fetch() sends without a preflight
    refused = httpx.post(f"{open_server.url}/api/pull", content=body, headers=simple, timeout=60)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert refused.json()["error"].startswith(f"requests from web pages of {EVIL} are not allowed")
    assert open_server.store.get(SMOL_REPO) is None
    assert not [r for r in open_server.hub.requests if SMOL_REPO in r.path]  # the Hub was never asked
    deleted = httpx.request(
        "DELETE", f"{open_server.url}/api/delete", json={"model": SERVED}, headers={"Origin": EVIL}, timeout=60
    )
    assert deleted.status_code == 403
    assert open_server.store.get(SERVED) is not None


@pytest.mark.model
def test_a_preflight_from_a_local_page_is_answered_with_the_allowed_headers(open_server: ManagedServer) -> None:
    preflight = httpx.options(
        f"{open_server.url}/v1/chat/completions",
        headers={
            "Origin": "http://localhost:3000",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "authorization,content-type"
    chat = httpx.post(
        f"{open_server.url}/v1/chat/completions",
        json=chat_body(),
        headers={"Origin": "http://localhost:3000"},
        timeout=60,
    )
    assert chat.status_code == 200
    assert chat.headers["access-control-allow-origin"] == "http://localhost:3000"


@pytest.mark.model
def test_a_foreign_origin_gets_no_cors_header(open_server: ManagedServer) -> None:
    preflight = httpx.options(
        f"{open_server.url}/v1/chat/completions",
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 403
    assert not [h for h in preflight.headers if h.startswith("access-control-")]
    listed = httpx.get(f"{open_server.url}/v1/models", headers={"Origin": EVIL})
    assert listed.status_code == 200  # a GET changes nothing; without the header the page cannot read it
    assert not [h for h in listed.headers if h.startswith("access-control-")]


@pytest.mark.model
def test_with_a_key_a_malformed_body_without_it_is_401_not_400(keyed_server: ManagedServer) -> None:
    json_type = {"Content-Type": "application/json"}
    for path in ("/v1/chat/completions", "/v1/completions", "/api/pull"):
        reply = httpx.post(f"{keyed_server.url}{path}", content=b'{"model": [', headers=json_type)
        assert reply.status_code == 401, path
        assert reply.headers["www-authenticate"] == "Bearer"
    with_key = httpx.post(f"{keyed_server.url}/v1/chat/completions", content=b"{", headers={**json_type, **AUTH})
    assert with_key.status_code == 400


@pytest.mark.model
def test_with_a_key_the_docs_need_it_and_health_does_not(keyed_server: ManagedServer) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{keyed_server.url}{path}").status_code == 401, path
        assert httpx.get(f"{keyed_server.url}{path}", headers=AUTH).status_code == 200, path
    assert httpx.get(f"{keyed_server.url}/health").status_code == 200


@pytest.mark.model
def test_allow_host_flags_and_cors_origins_from_the_environment_reach_the_server(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    env = {
        "LOCALINFER_ALLOW_HOSTS": "env-only.lan",
        "LOCALINFER_CORS_ORIGINS": "http://tool.lan:8000, https://*.example.com",
    }
    flags = ("--ctx-size", "512", "--threads", "1", "--allow-host", "box.lan", "--allow-host", "llm.box.lan")
    with serving(smollm2.name, test_home, tmp_path, *flags, env=env) as server:
        for host in ("box.lan", "llm.box.lan:8080"):
            assert httpx.get(f"{server.url}/v1/models", headers={"Host": host}).status_code == 200, host
        assert httpx.get(f"{server.url}/v1/models", headers={"Host": "env-only.lan"}).status_code == 403  # flags win
        for origin in ("http://tool.lan:8000", "https://chat.example.com"):
            body = {"model": smollm2.name, "prompt": "Hi", "max_tokens": 1}
            reply = httpx.post(f"{server.url}/v1/completions", json=body, headers={"Origin": origin}, timeout=60)
            assert reply.status_code == 200, origin
            assert reply.headers["access-control-allow-origin"] == origin
        refused = httpx.post(f"{server.url}/v1/completions", json={}, headers={"Origin": "http://tool.lan:8001"})
        assert refused.status_code == 403
