"""`mcp.json`: the MCP servers lfm-chat may start, in the `mcpServers` shape Claude Desktop, oterm and
most MCP docs use:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A server is a command (with args, env, cwd) run over stdio, or a streamable-HTTP url (with headers).
The file is the user's, but it may come from anywhere (a copied snippet, a shared dotfile), so it is
bounded and checked field by field; every refusal is one sentence naming the file and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_NAME = "mcp.json"
MAX_CONFIG_BYTES = 256 * 2**10
MAX_SERVERS = 32
MAX_FIELD_CHARS = 4096  # one command, argument, env value, url or header
SERVER_NAME = re.compile(r"[A-Za-z0-9_\-]{1,32}")  # shown in the screen and used as a tool-name prefix


class McpConfigError(Exception):
    """mcp.json cannot be used: one sentence naming the file and the field."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A server lfm-chat starts as a subprocess and talks to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @property
    def source(self) -> str:
        return " ".join([self.command, *self.args])


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A server already running somewhere, reached over streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.url


ServerConfig = StdioServer | HttpServer


def default_config_path(data_dir: Path) -> Path:
    return data_dir / CONFIG_NAME


def app_servers(data_dir: Path, extra: Path | None) -> tuple[list[ServerConfig], str]:
    """The chat's servers: the data directory's mcp.json, then --mcp FILE's (a name in both is
    FILE's); and a line for the servers screen saying where they come from, or why a file was not
    read (the other file's servers still count)."""
    servers: dict[str, ServerConfig] = {}
    problems = []
    paths = [default_config_path(data_dir), *([extra] if extra is not None else [])]
    for path in paths:
        try:
            servers |= {s.name: s for s in load_servers(path, missing_ok=path != extra)}
        except McpConfigError as exc:
            problems.append(str(exc))
    note = " ".join(problems) or "From " + " and ".join(str(p) for p in paths) + "."
    return list(servers.values()), note


def load_servers(path: Path, *, missing_ok: bool = False) -> list[ServerConfig]:
    """The servers in `path`, in the file's order; [] when it is absent and `missing_ok` (the data
    directory's mcp.json is optional, a --mcp FILE is not)."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        if missing_ok:
            return []
        raise McpConfigError(f"{path}: no such file.") from None
    except OSError as exc:
        raise McpConfigError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise McpConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KB, too big for a server list.")
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise McpConfigError(f"{path}: not valid JSON ({_one_line(str(exc))}).") from None
    return parse_servers(document, path)


def parse_servers(document: Any, path: Path | str) -> list[ServerConfig]:
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'{path}: expected an object with "mcpServers": {{"name": {{...}}}}.')
    if len(servers) > MAX_SERVERS:
        raise McpConfigError(f"{path}: mcpServers lists {len(servers)} servers; the limit is {MAX_SERVERS}.")
    return [_server(name, entry, f"{path}: mcpServers.{_shown(name)}") for name, entry in servers.items()]


def _server(name: str, entry: Any, where: str) -> ServerConfig:
    if not SERVER_NAME.fullmatch(name):
        raise McpConfigError(f"{where}: a server name is 1 to 32 letters, digits, '_' or '-'.")
    if not isinstance(entry, dict):
        raise McpConfigError(f'{where} must be an object with "command" or "url".')
    if ("command" in entry) == ("url" in entry):
        raise McpConfigError(f'{where} needs exactly one of "command" (stdio) or "url" (streamable HTTP).')
    if "url" in entry:
        url = _text(entry["url"], f"{where}.url")
        if not re.match(r"https?://[^/\s]+", url):
            raise McpConfigError(f"{where}.url must be an http:// or https:// URL.")
        return HttpServer(name, url, _strings(entry.get("headers"), f"{where}.headers"))
    args = entry.get("args", [])
    if not isinstance(args, list):
        raise McpConfigError(f"{where}.args must be a list of strings.")
    cwd = entry.get("cwd")
    return StdioServer(
        name,
        _text(entry["command"], f"{where}.command"),
        tuple(_text(arg, f"{where}.args[{i}]") for i, arg in enumerate(args)),
        _strings(entry.get("env"), f"{where}.env"),
        None if cwd is None else _text(cwd, f"{where}.cwd"),
    )


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise McpConfigError(f"{where} must be a non-empty string.")
    if len(value) > MAX_FIELD_CHARS:
        raise McpConfigError(f"{where} is longer than {MAX_FIELD_CHARS} characters.")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 256:
        raise McpConfigError(f"{where} must be an object of at most 256 string values.")
    return {_text(k, f"{where} key"): _text(v, f"{where}.{_shown(k)}") for k, v in value.items()}


def _shown(name: Any) -> str:
    """A name from the file, safe to put in a sentence."""
    text = name if isinstance(name, str) else repr(name)
    return json.dumps(text[:40])[1:-1] if not SERVER_NAME.fullmatch(text) else text


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
