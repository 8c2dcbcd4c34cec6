"""Every tool the agent can use, built in one place for one clawlet home."""

from __future__ import annotations

from langchain_core.tools import BaseTool

from clawlet.config import RuntimeConfig, Settings
from clawlet.memory.stores import KnowledgeBase
from clawlet.tools.ask_user import ASK_USER_TOOL, make_ask_user_tool
from clawlet.tools.fetch_url import make_fetch_tool
from clawlet.tools.knowledge import make_knowledge_tool
from clawlet.tools.memory import make_memory_tool
from clawlet.tools.python_repl import make_python_tool
from clawlet.tools.read_file import make_read_file_tool
from clawlet.tools.sandbox import ToolSandbox
from clawlet.tools.terminal import make_terminal_tool

CORE_TOOL_NAMES = ("terminal", "python_repl", "fetch_url", "read_file", "search_knowledge_base")
TOOL_NAMES = (*CORE_TOOL_NAMES, "save_memory", ASK_USER_TOOL)


def tool_sandbox(settings: Settings, runtime_config: RuntimeConfig | None = None) -> ToolSandbox:
    """The sandbox of the home's subprocess tools (terminal, python_repl, MCP servers)."""
    return ToolSandbox(settings.paths.root, settings.sandbox, runtime_config)


def build_tools(
    settings: Settings, knowledge: KnowledgeBase, runtime_config: RuntimeConfig | None = None
) -> list[BaseTool]:
    home = settings.paths.root
    sandbox = tool_sandbox(settings, runtime_config)
    return [
        make_terminal_tool(home, settings.terminal_timeout, sandbox),
        make_python_tool(home, settings.python_timeout, sandbox),
        make_fetch_tool(settings.fetch_timeout),
        make_read_file_tool(home),
        make_knowledge_tool(knowledge),
        make_memory_tool(settings.paths.memory_file, home),
        make_ask_user_tool(),
    ]
