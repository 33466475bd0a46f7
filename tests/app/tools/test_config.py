"""mcp.json: the mcpServers shape read into servers, and every refusal naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.tools.config import MAX_CONFIG_BYTES, HttpServer, McpConfigError, StdioServer, load_servers


def write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(document))
    return path


def test_both_kinds_of_server_in_the_files_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server-fs", "/tmp"], "env": {"A": "1"}},
                "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            }
        },
    )
    assert load_servers(path) == [
        StdioServer("files", "npx", ("-y", "server-fs", "/tmp"), {"A": "1"}),
        HttpServer("search", "https://example.com/mcp", {"Authorization": "Bearer x"}),
    ]


def test_the_data_dirs_file_is_optional_a_named_one_is_not(tmp_path: Path) -> None:
    assert load_servers(tmp_path / "mcp.json", missing_ok=True) == []
    with pytest.raises(McpConfigError, match="no such file"):
        load_servers(tmp_path / "mcp.json")


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ({"servers": {}}, '"mcpServers"'),
        ({"mcpServers": {"a": {"args": []}}}, "mcpServers.a needs exactly one"),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "mcpServers.a needs exactly one"),
        ({"mcpServers": {"a": {"command": ""}}}, "mcpServers.a.command"),
        ({"mcpServers": {"a": {"command": "x", "args": "-v"}}}, "mcpServers.a.args must be a list"),
        ({"mcpServers": {"a": {"command": "x", "args": ["ok", 3]}}}, r"mcpServers.a.args\[1\]"),
        ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "mcpServers.a.env.K"),
        ({"mcpServers": {"a": {"url": "file:///etc/passwd"}}}, "mcpServers.a.url must be an http"),
        ({"mcpServers": {"a\x1b[2J": {"command": "x"}}}, r"mcpServers.a\\u001b\[2J: a server name"),
    ],
)
def test_a_bad_field_is_named(tmp_path: Path, document: object, names: str) -> None:
    path = write(tmp_path, document)
    with pytest.raises(McpConfigError, match=names) as refused:
        load_servers(path)
    assert str(path) in str(refused.value)
    assert "\x1b" not in str(refused.value)


def test_a_huge_or_broken_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(McpConfigError, match="larger than"):
        load_servers(huge)
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": ')
    with pytest.raises(McpConfigError, match="not valid JSON"):
        load_servers(broken)
