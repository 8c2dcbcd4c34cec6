"""``search_knowledge_base``: search the documents under ``knowledge/``.

The retrieval index arrives with the knowledge-base feature; until then the tool answers with a
clear message so the model can tell the user, instead of failing the run.
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

INDEX_NOT_BUILT = (
    "The knowledge base index is not built yet: knowledge search is not available in this "
    "version of clawlet. Documents are in the knowledge/ folder; use read_file to read them."
)


class SearchInput(BaseModel):
    query: str = Field(description="What to look for in the knowledge base.")


def make_knowledge_tool(root: Path) -> BaseTool:
    def search_knowledge_base(query: str) -> str:
        return INDEX_NOT_BUILT

    return StructuredTool.from_function(
        func=search_knowledge_base,
        name="search_knowledge_base",
        description=(
            "Search the user's knowledge base (documents in knowledge/) and return the top 3 "
            "matching passages with their source files."
        ),
        args_schema=SearchInput,
    )
