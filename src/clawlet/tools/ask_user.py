"""``ask_user``: the agent asks the user a question and the run waits for the answer.

The tool never runs by itself: the engine's approval middleware pauses the run before it (a
``QuestionAsked`` event) and the user's answer becomes the tool's result. In a turn that cannot ask
(the OpenAI-compatible endpoint, ``/api/agent``) it is not offered; a call to it is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from clawlet.tools.base import ToolError

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

ASK_USER_TOOL = "ask_user"
MAX_QUESTION_CHARS = 2_000


class AskUserInput(BaseModel):
    question: str = Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="The question for the user: one clear question, with the options if there are any.",
    )


def make_ask_user_tool() -> BaseTool:
    from langchain_core.tools import StructuredTool  # not when the server starts (see clawlet.cli)

    def ask_user(question: str) -> str:
        # Reached only when no one could answer (the approval middleware answers it otherwise).
        raise ToolError("no user can answer questions in this conversation; decide yourself and say so")

    return StructuredTool.from_function(
        func=ask_user,
        name=ASK_USER_TOOL,
        description=(
            "Ask the user a question and wait for the answer. Use it when you cannot go on without "
            "the user's decision or information only they have (not for confirmation of routine steps)."
        ),
        args_schema=AskUserInput,
    )
