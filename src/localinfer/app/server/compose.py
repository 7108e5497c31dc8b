"""The server app as the settings describe it, built in one place for ``localinfer serve`` and the app's
``--serve``: who may use it (the hosts it is bound to, the allowed hosts and origins, the API key), the pinned
models, what requests that leave a field unset are served with, the /slots switch and the body limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from localinfer.app.server.app import create_app
from localinfer.app.server.core.defaults import RequestDefaults
from localinfer.app.server.core.media import MediaLimits
from localinfer.app.server.guard import is_loopback_name, policy_for
from localinfer.config import Settings
from localinfer.errors import ConfigError, LocalInferError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from localinfer.bootstrap import LocalStack
    from localinfer.models.store import Manifest, ModelSource


def api_key_of(settings: Settings) -> str | None:
    return settings.api_key.get_secret_value() if settings.api_key else None


def check_exposure(hosts: Sequence[str], settings: Settings) -> None:
    """Refuse to listen beyond loopback without an API key. Raises ConfigError naming the address."""
    for host in hosts:
        if not is_loopback_name(host.strip("[]")) and not api_key_of(settings):
            raise ConfigError(
                f"refusing to listen on {host} without an API key: anyone on the network could use it",
                hint="set one with --api-key KEY or LOCALINFER_API_KEY=KEY, or bind 127.0.0.1",
            )


def request_defaults(settings: Settings) -> RequestDefaults:
    """What a request that leaves a field unset is served with (``--temp``, ``--seed``, ``--n-predict``, the
    reasoning flags, ``--chat-template-kwargs``)."""
    return RequestDefaults(
        settings.temperature,
        settings.seed,
        settings.n_predict,
        reasoning_format=settings.reasoning_format,
        reasoning=settings.reasoning,
        reasoning_budget=settings.reasoning_budget,
        template_kwargs=settings.chat_template_kwargs,
    )


def media_limits(settings: Settings) -> MediaLimits:
    """The server's limits on images and sounds in requests (URLs fetched or not, sizes, how many)."""
    return MediaLimits(
        allow_urls=settings.allow_image_urls,
        url_max_bytes=settings.media_url_max_bytes,
        url_timeout=settings.media_url_timeout,
        max_parts=settings.max_media,
        max_pixels=settings.max_image_pixels,
    )


def server_app(
    stack: LocalStack,
    hosts: Sequence[str],
    *,
    preload: Manifest | None = None,
    aliases: Sequence[str] = (),
    tags: Sequence[str] = (),
    named_by_alias: bool = False,
) -> FastAPI:
    """The app serving ``stack``'s engine on ``hosts`` (the first is the one it is bound to, the others are
    allowed as host names) as ``stack.settings`` say. ``preload``: the model loaded at start, which a request
    naming none gets (without one, the ``model`` setting's when it is here), and, as llama-server serves the one
    model it is started with, any name nobody serves gets too (unless models are pinned or the
    ``strict_model_names`` setting is on); ``aliases``: more names of it; ``named_by_alias``: whether ``--alias``
    named it (llama-server then lists the aliases in ``/v1/models``); ``tags``: its labels (``--tags``). Raises
    ModelNotFound for a pinned model that is not here."""
    settings = stack.settings
    default_model = preload.name if preload is not None else _known(stack.models, settings.model)
    one_model = preload.name if preload is not None and not settings.pin and not settings.strict_model_names else None
    access = policy_for(
        hosts[0],
        allow_hosts=[*settings.allow_hosts, *hosts[1:]],
        cors_origins=settings.cors_origins,
        api_key=api_key_of(settings),
    )
    return create_app(
        stack.engine,
        preload=preload,
        pins=[stack.models.resolve(name) for name in settings.pin],
        default_model=default_model,
        one_model=one_model,
        aliases=aliases,
        tags=tags,
        named_by_alias=named_by_alias,
        request_defaults=request_defaults(settings),
        slots_endpoint=settings.slots_endpoint,
        verbose_answers=settings.verbose_answers,
        media_limits=media_limits(settings),
        client=stack.client,
        access=access,
        max_body=settings.max_body,
    )


def _known(models: ModelSource, name: str) -> str | None:
    """``name`` as ``models`` list it, or None when it is not here."""
    try:
        return models.resolve(name).name
    except LocalInferError:
        return None
