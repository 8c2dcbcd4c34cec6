"""A small STDIO MCP server for the MCP tests: ``add`` and ``shout``, plus ``whoami`` that shows
which environment variables the server received and ``read_text`` that reads a file."""

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


@server.tool()
def read_text(path: str) -> str:
    """The text of a file as this server sees it, or why it cannot be read (for the sandbox tests)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}: {exc.strerror}"


if __name__ == "__main__":
    server.run("stdio")
