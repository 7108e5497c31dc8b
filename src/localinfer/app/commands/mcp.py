"""``localinfer mcp ls | import | tools``: the MCP servers the app's chat and ``run --mcp`` may use."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.errors import ConfigError

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "mcp",
        help="list, import and try the MCP servers the app may use",
        description="The MCP servers (Model Context Protocol) whose tools the app's chat and 'run --mcp' offer the "
        "model, declared in the settings' mcpServers or in mcp.json beside the config file. VERB is 'ls' (the servers "
        "declared, secrets left out), 'import [FILE ...] [--replace]' (copy the mcpServers of Claude Desktop, LM "
        "Studio and Cursor where found, or of the FILEs, into mcp.json) or 'tools NAME' (start the server NAME and "
        "list its tools, prompts and resources).",
    )
    verbs = p.add_subparsers(dest="mcp_command", metavar="VERB", required=True)
    ls = verbs.add_parser("ls", help="list the servers declared", description="List the MCP servers declared.")
    ls.set_defaults(run=run_ls)
    imp = verbs.add_parser(
        "import",
        help="copy the servers of Claude Desktop, LM Studio or Cursor",
        description="Copy the mcpServers of Claude Desktop, LM Studio and Cursor (where their config files are "
        "found), or of the FILEs named, into localinfer's mcp.json. A name already there is kept unless --replace.",
    )
    imp.add_argument("files", nargs="*", metavar="FILE", help="a JSON file with an mcpServers table")
    imp.add_argument("--replace", action="store_true", help="replace servers of the same name")
    imp.set_defaults(run=run_import)
    tools = verbs.add_parser(
        "tools",
        help="connect a server and list its tools",
        description="Start or reach the server NAME, list its tools, prompts and resources, and stop it.",
    )
    tools.add_argument("name", metavar="NAME")
    tools.set_defaults(run=run_tools)
    p.set_defaults(run=run_ls)


def run_ls(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.app.tools.servers import configured_servers, mcp_file

    servers = configured_servers(settings)
    if not servers:
        print(f"no MCP servers declared (add them to {mcp_file()}, or 'localinfer mcp import')")
        return 0
    width = max(len(n) for n in servers)
    for name, spec in servers.items():
        state = " (disabled)" if spec.disabled else ""
        print(f"{name:<{width}}  {spec.transport:<5}  {spec.shown()}{state}")
    return 0


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.app.tools.imports import ForeignConfig, default_configs, merge
    from localinfer.app.tools.servers import mcp_file, parse_servers, read_mcp_file, write_mcp_file

    if args.files:
        missing = [f for f in args.files if not Path(f).is_file()]
        if missing:
            raise ConfigError(f"no such file: {missing[0]}", hint="name a JSON file with an mcpServers table")
        sources = [ForeignConfig(str(f), Path(f)) for f in args.files]
    else:
        sources = default_configs()
        if not sources:
            raise ConfigError(
                "no Claude Desktop, LM Studio or Cursor MCP config was found",
                hint="name the file: localinfer mcp import PATH/mcp.json",
            )
    target = mcp_file()
    current = parse_servers(read_mcp_file(target), where=str(target))
    merged, imported = merge(current, sources, replace=args.replace)
    if imported.added:
        write_mcp_file(target, merged)
    for name, spec in imported.added.items():
        print(f"imported {name}: {spec.shown()}")
    for name, app in imported.skipped.items():
        print(f"kept {name} (already declared; {app}'s not imported: --replace to take it)")
    print(f"{len(imported.added)} server(s) imported into {target}")
    return 0


def run_tools(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.app.tools.hub import McpHub
    from localinfer.app.tools.servers import configured_servers

    async def show() -> None:
        hub = McpHub(configured_servers(settings), log_dir=settings.home / "mcp-logs")
        try:
            session = await hub.connect(args.name)
            for tool in session.tools:
                mark = " (read-only)" if tool.read_only else ""
                print(f"tool {tool.name}{mark}: {tool.description.strip().splitlines()[0] if tool.description else ''}")
            for prompt in session.prompts:
                print(f"prompt {prompt.name}({', '.join(prompt.arguments)}): {prompt.description}")
            for resource in session.resources:
                print(f"resource {resource.uri}: {resource.name}")
        finally:
            await hub.close()

    asyncio.run(show())
    return 0
