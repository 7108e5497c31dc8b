"""Where other apps keep their ``mcpServers`` (Claude Desktop, LM Studio, Cursor), and merging theirs into
localinfer's ``mcp.json``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from localinfer.app.tools.servers import ServerSpec, parse_servers, read_mcp_file


@dataclass(frozen=True)
class ForeignConfig:
    app: str
    path: Path


def known_configs(
    home: Path, cwd: Path, environ: Mapping[str, str], platform: str = sys.platform
) -> list[ForeignConfig]:
    """The config files of the apps localinfer imports from, on this platform, that exist."""
    if platform == "darwin":
        claude = home / "Library" / "Application Support" / "Claude"
    elif platform == "win32":
        claude = Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
    else:
        claude = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
    candidates = [
        ForeignConfig("Claude Desktop", claude / "claude_desktop_config.json"),
        ForeignConfig("LM Studio", home / ".lmstudio" / "mcp.json"),
        ForeignConfig("Cursor", home / ".cursor" / "mcp.json"),
        ForeignConfig("Cursor (this project)", cwd / ".cursor" / "mcp.json"),
    ]
    return [c for c in candidates if c.path.is_file()]


def default_configs() -> list[ForeignConfig]:
    return known_configs(Path.home(), Path.cwd(), os.environ)


@dataclass(frozen=True)
class Imported:
    """What an import did: the servers added (or replaced) and those skipped because the name was taken."""

    added: dict[str, ServerSpec]
    skipped: dict[str, str]  # name -> the app whose server kept it


def merge(
    current: Mapping[str, ServerSpec], sources: list[ForeignConfig], *, replace: bool = False
) -> tuple[dict[str, ServerSpec], Imported]:
    """``current`` with the servers of ``sources`` added (a name already there is kept unless ``replace``; the
    first source wins among sources). Raises ConfigError for a source that cannot be read."""
    merged = dict(current)
    added: dict[str, ServerSpec] = {}
    skipped: dict[str, str] = {}
    for source in sources:
        for name, spec in parse_servers(read_mcp_file(source.path), where=str(source.path)).items():
            if name in added or (name in merged and not replace):
                skipped[name] = source.app
                continue
            merged[name] = added[name] = spec
    return merged, Imported(added, skipped)
