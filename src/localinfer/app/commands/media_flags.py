"""The flags of ``serve`` for models that see or hear, as llama-server spells them: the projector (``--mmproj``,
``--no-mmproj``, ``--mmproj-offload``), how many tokens an image becomes, and whether image URLs are fetched."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from localinfer.errors import ConfigError


def add_media_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mmproj",
        "-mm",
        metavar="FILE",
        help="the projector (mmproj GGUF) of the model named here, which lets it see images (or hear sounds), in "
        "place of the one pulled or found with it",
    )
    p.add_argument(
        "--no-mmproj", action="store_true", default=None, help="load no projector, not even one paired with the model"
    )
    p.add_argument(
        "--mmproj-offload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the projector computes on the GPU where there is one (default: on)",
    )
    p.add_argument(
        "--image-min-tokens",
        type=int,
        metavar="N",
        help="fewest tokens an image becomes, for projectors of dynamic resolution (default: the projector's)",
    )
    p.add_argument(
        "--image-max-tokens",
        type=int,
        metavar="N",
        help="most tokens an image becomes, for projectors of dynamic resolution (default: the projector's)",
    )
    p.add_argument(
        "--allow-image-urls",
        action="store_true",
        default=None,
        help="image parts may name an http(s) URL, which the server fetches (off: data: URIs and base64 only; a "
        "server that fetches what any client names can be made to reach what the client cannot)",
    )


def media_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the media flags set (None where a flag was not given). Raises ConfigError for a projector file
    that is not there, or --mmproj with --no-mmproj."""
    mmproj = Path(args.mmproj).expanduser() if args.mmproj else None
    if mmproj is not None and args.no_mmproj:
        raise ConfigError("--mmproj and --no-mmproj both given", hint="give one of them")
    if mmproj is not None and not mmproj.is_file():
        raise ConfigError(f"projector file not found: {mmproj}", hint="check the --mmproj path")
    return {
        "mmproj": mmproj.resolve() if mmproj is not None else None,
        "no_mmproj": args.no_mmproj,
        "mmproj_offload": args.mmproj_offload,
        "image_min_tokens": args.image_min_tokens,
        "image_max_tokens": args.image_max_tokens,
        "allow_image_urls": args.allow_image_urls,
    }
