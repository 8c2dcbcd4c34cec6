"""RAG mode end to end (real provider path) and vector scores from an embeddings server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from clawlet.config import Settings
from clawlet.memory.stores import KnowledgeBase, build_embedder
from clawlet.testing.scripted_openai import ScriptedOpenAIServer, text_turn
from tests.conftest import LiveServer, parse_sse

FACT = "用户最喜欢的茶是碧螺春，每天早上喝一杯。"
FILLER = "\n\n".join(
    f"第{i}条笔记：项目会议安排在星期{i % 7 + 1}，讨论部署脚本和日志轮转的细节。" * 3 for i in range(12)
)


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


def test_rag_turn_streams_retrieval_first_and_keeps_it_out_of_the_session(
    settings: Settings, live_server: object, llm: ScriptedOpenAIServer
) -> None:
    settings.paths.memory_file.write_text(f"# 记忆\n\n{FILLER}\n\n{FACT}\n", encoding="utf-8")
    llm.set_script([text_turn("你最喜欢碧螺春。"), text_turn("喜欢的茶")])
    custom = Settings(provider="openai", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k")
    server: LiveServer = live_server(custom)  # type: ignore[operator]
    assert httpx.put(f"{server.url}/api/config/rag-mode", json={"enabled": True}).status_code == 200

    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "我最喜欢喝什么茶？", "session_id": "rag1"},
        timeout=60,
    )
    events = parse_sse(response.text)
    assert events[0][0] == "retrieval"
    retrieval = events[0][1]
    assert retrieval["query"] == "我最喜欢喝什么茶？"
    results = retrieval["results"]
    assert isinstance(results, list) and results
    assert FACT in results[0]["text"]
    assert results[0]["source"] == "memory/MEMORY.md"
    assert [name for name, _ in events[1:]][-2:] == ["done", "title"]

    sent = llm.requests[0]["messages"]
    system = sent[0]["content"]
    assert "<!-- Long-term Memory -->" in system and FACT not in system
    assert "retrieval" in system
    context = [m for m in sent[1:] if "[记忆检索结果]" in str(m.get("content"))]
    assert len(context) == 1 and FACT in context[0]["content"]
    assert sent[-1] == {"role": "user", "content": "我最喜欢喝什么茶？"}

    stored = json.loads((custom.paths.sessions / "rag1.json").read_text(encoding="utf-8"))
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    text = json.dumps(stored, ensure_ascii=False)
    assert "记忆检索结果" not in text and "每天早上喝一杯" not in text

    # With RAG off, no retrieval event and MEMORY.md is back in the system prompt.
    httpx.put(f"{server.url}/api/config/rag-mode", json={"enabled": False})
    llm.set_script([text_turn("好的。")])
    second = httpx.post(f"{server.url}/api/chat", json={"message": "谢谢", "session_id": "rag1"}, timeout=60)
    assert "retrieval" not in [name for name, _ in parse_sse(second.text)]
    assert FACT in llm.requests[-1]["messages"][0]["content"]


CONCEPTS = {"cat": ("猫", "feline", "kitten"), "tea": ("茶", "oolong"), "code": ("python", "代码")}


def concept_vector(text: str) -> list[float]:
    """A tiny deterministic 'embedding': how often each concept's words occur."""
    lowered = text.lower()
    return [float(sum(lowered.count(word) for word in words)) + 0.01 for words in CONCEPTS.values()]


def test_embeddings_endpoint_adds_vector_scores(settings: Settings) -> None:
    (settings.paths.knowledge / "pets.md").write_text("猫是独立的动物，猫每天睡很久。", encoding="utf-8")
    (settings.paths.knowledge / "tea.md").write_text("乌龙茶是半发酵的茶。", encoding="utf-8")
    with ScriptedOpenAIServer(embed=concept_vector) as embeddings:
        configured = Settings(openai_base_url=embeddings.base_url, embedding_model="concepts")
        embedder = build_embedder(configured)
        assert embedder is not None
        knowledge = KnowledgeBase(configured.paths, embedder)
        # "feline" shares no keyword with the Chinese text: only the vectors can find it.
        results = knowledge.search("feline")
        assert results and results[0]["source"] == "knowledge/pets.md"
        assert results[0]["vector_score"] > 0.9
        assert "keyword_score" not in results[0]
        both = knowledge.search("乌龙茶")
        assert both[0]["source"] == "knowledge/tea.md"
        assert "keyword_score" in both[0] and "vector_score" in both[0]
        assert embeddings.embedding_requests[0]["model"] == "concepts"
    # Without an endpoint the same index still answers by keyword.
    assert build_embedder(Settings()) is None
    offline = KnowledgeBase(settings.paths, None).search("猫")
    assert offline[0]["source"] == "knowledge/pets.md"
