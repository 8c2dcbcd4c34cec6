"""The demo model's name and label, and the markers by which it recognises clawlet's own title and
summary requests and a client's background tasks: apart from :mod:`clawlet.llm.demo` (a LangChain
chat model), so the server can describe the model and word those requests without LangChain."""

from __future__ import annotations

DEMO_MODEL_NAME = "demo"
DEMO_MODEL_LABEL = "demo (offline demo model, no LLM)"
TITLE_REQUEST_MARKER = "Write a short title for this conversation"
SUMMARY_REQUEST_MARKER = "Summarise the conversation below"
TASK_PREFIX = "### Task:"  # a client's background task (Open WebUI's title, tags, ...)
