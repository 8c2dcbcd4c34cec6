"""A small STDIO MCP server for the MCP tests: ``add`` and ``shout``, plus ``whoami`` that shows
which environment variables the server received."""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP

server = FastMCP("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text and add an exclamation mark."""
    return text.upper() + "!"


@server.tool()
def whoami() -> str:
    """The working directory and environment variable names this server sees."""
    return os.getcwd() + "\n" + ",".join(sorted(os.environ))


if __name__ == "__main__":
    server.run("stdio")
