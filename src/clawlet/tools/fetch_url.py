"""``fetch_url``: fetch a URL; JSON is pretty-printed, HTML converted to Markdown."""

from __future__ import annotations

import json

import html2text
import httpx
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from clawlet.tools.base import ToolError, cap_output

MAX_OUTPUT_CHARS = 5_000


class FetchInput(BaseModel):
    url: str = Field(description="The http(s) URL to fetch.")


def html_to_markdown(html: str) -> str:
    converter = html2text.HTML2Text()
    converter.ignore_images = True
    converter.body_width = 0
    return str(converter.handle(html))


def render_body(content_type: str, text: str) -> str:
    """Turn a response body into readable text according to its content type."""
    if "json" in content_type:
        try:
            return json.dumps(json.loads(text), ensure_ascii=False, indent=2)
        except json.JSONDecodeError:
            return text
    if "html" in content_type or text.lstrip().lower().startswith(("<!doctype html", "<html")):
        return html_to_markdown(text)
    return text


def make_fetch_tool(timeout: float = 15.0) -> BaseTool:
    async def fetch_url(url: str) -> str:
        url = url.strip()
        if not url.startswith(("http://", "https://")):
            raise ToolError("only http:// and https:// URLs can be fetched")
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=True, trust_env=False) as client:
                response = await client.get(url, headers={"User-Agent": "clawlet/0.1"})
        except httpx.TimeoutException as exc:
            raise ToolError(f"timed out after {timeout:g} s fetching {url}") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"could not fetch {url}: {exc}") from exc
        body = render_body(response.headers.get("content-type", ""), response.text)
        if response.status_code >= 400:
            body = f"[HTTP {response.status_code}]\n{body}"
        return cap_output(body.strip() or "(empty response)", MAX_OUTPUT_CHARS)

    return StructuredTool.from_function(
        coroutine=fetch_url,
        name="fetch_url",
        description=(
            "Fetch a web page or API. JSON is returned pretty-printed and HTML converted to "
            f"Markdown (timeout {timeout:g} s, capped at {MAX_OUTPUT_CHARS} characters)."
        ),
        args_schema=FetchInput,
    )
