"""``search_knowledge_base``: hybrid search over the documents under ``knowledge/``."""

from __future__ import annotations

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.memory.stores import KnowledgeBase

NO_RESULTS = "No passage in the knowledge base matches that query."


class SearchInput(BaseModel):
    query: str = Field(description="What to look for in the knowledge base.")


def make_knowledge_tool(knowledge: KnowledgeBase) -> BaseTool:
    def search_knowledge_base(query: str) -> str:
        results = knowledge.search(query, top_k=3)
        if not results:
            return NO_RESULTS
        return "\n\n".join(
            f"[{rank}] {item['source']} (score {item['score']:.4f})\n{item['text']}"
            for rank, item in enumerate(results, start=1)
        )

    return StructuredTool.from_function(
        func=search_knowledge_base,
        name="search_knowledge_base",
        description=(
            "Search the user's knowledge base (Markdown, text and PDF documents in knowledge/) and "
            "return the top 3 matching passages with their source files."
        ),
        args_schema=SearchInput,
    )
