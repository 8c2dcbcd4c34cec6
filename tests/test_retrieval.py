"""Chunking, Chinese keyword retrieval, incremental knowledge updates, PDF, and the memory tool."""

from __future__ import annotations

import io
import itertools

import httpx
import pytest

from clawlet.api.process import extract_pdf
from clawlet.config import Settings
from clawlet.memory.chunking import split_text
from clawlet.memory.lexical import search_terms
from clawlet.memory.stores import KnowledgeBase, MemoryIndex, read_document
from clawlet.tokens import count_tokens
from clawlet.tools.base import ToolError
from clawlet.tools.memory import append_fact
from tests.conftest import LiveServer

TEA = """# 茶的种类

绿茶是不发酵的茶，西湖龙井产自浙江杭州，碧螺春产自江苏苏州。

红茶是全发酵的茶，祁门红茶产自安徽祁门，正山小种产自福建武夷山。

乌龙茶是半发酵的茶，铁观音产自福建安溪。
"""
PETS = """# 宠物

猫是独立的动物，每天要睡十几个小时。狗需要每天散步，金毛寻回犬性格温顺。
"""
CODE = """# Python notes

Use a virtual environment for every project. The standard library module pathlib handles paths.
"""


def write_knowledge(settings: Settings) -> None:
    (settings.paths.knowledge / "tea.md").write_text(TEA, encoding="utf-8")
    (settings.paths.knowledge / "pets.md").write_text(PETS, encoding="utf-8")
    (settings.paths.knowledge / "notes").mkdir()
    (settings.paths.knowledge / "notes" / "python.txt").write_text(CODE, encoding="utf-8")


def test_chunks_respect_size_and_overlap() -> None:
    sentences = [f"第{i}句话讲的是编号为{i}的事情。" for i in range(400)]
    chunks = split_text("".join(sentences))
    assert len(chunks) > 5
    assert all(count_tokens(chunk) <= 256 for chunk in chunks)
    for previous, current in itertools.pairwise(chunks):
        last_sentence = previous.split("。")[-2] + "。"
        first_sentence = current.split("。")[0] + "。"
        # The overlap repeats the tail of the previous chunk (at most 32 tokens).
        assert previous.endswith(current[: current.index(last_sentence) + len(last_sentence)])
        assert first_sentence in previous and count_tokens(first_sentence) <= 32
    joined = "".join(chunks)
    assert all(sentence in joined for sentence in sentences)
    assert split_text("") == []


def test_search_terms_split_chinese_into_characters_and_bigrams() -> None:
    terms = search_terms("龙井茶 from Hangzhou")
    assert {"龙", "井", "茶", "龙井", "井茶", "from", "hangzhou"} <= set(terms)


def test_chinese_question_finds_the_matching_chinese_chunk(settings: Settings) -> None:
    write_knowledge(settings)
    knowledge = KnowledgeBase(settings.paths, None)
    results = knowledge.search("祁门红茶产自哪里？")
    assert results, "no results"
    assert results[0]["source"] == "knowledge/tea.md"
    assert "祁门红茶产自安徽祁门" in results[0]["text"]
    assert "vector_score" not in results[0]

    pets = knowledge.search("猫每天睡多久")
    assert pets[0]["source"] == "knowledge/pets.md"
    english = knowledge.search("virtual environment pathlib")
    assert english[0]["source"] == "knowledge/notes/python.txt"
    assert knowledge.search("   ") == []
    assert (settings.paths.storage / "knowledge_index" / "index.sqlite3").is_file()


def test_knowledge_updates_incrementally(settings: Settings) -> None:
    write_knowledge(settings)
    knowledge = KnowledgeBase(settings.paths, None)
    assert knowledge.refresh() == 4  # three documents plus the template README.md
    assert knowledge.refresh() == 0  # nothing changed: nothing re-read
    (settings.paths.knowledge / "pets.md").write_text(PETS + "\n仓鼠喜欢在夜里跑轮子。\n", encoding="utf-8")
    assert knowledge.refresh() == 1
    assert knowledge.search("仓鼠")[0]["source"] == "knowledge/pets.md"
    (settings.paths.knowledge / "tea.md").unlink()
    knowledge.refresh()
    assert all(r["source"] != "knowledge/tea.md" for r in knowledge.search("祁门红茶"))
    # A new instance reuses the persisted index.
    assert KnowledgeBase(settings.paths, None).refresh() == 0


def _minimal_pdf(text: str) -> bytes:
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def test_pdf_documents_are_indexed(settings: Settings) -> None:
    (settings.paths.knowledge / "manual.pdf").write_bytes(_minimal_pdf("Clawlet flux capacitor manual"))
    results = KnowledgeBase(settings.paths, None).search("flux capacitor")
    assert results and results[0]["source"] == "knowledge/manual.pdf"
    assert "flux capacitor" in results[0]["text"]


def test_uploads_and_the_knowledge_base_read_a_pdf_alike(settings: Settings) -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(_minimal_pdf("Page one of the manual"))))
    writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    path = settings.paths.knowledge / "two-pages.pdf"
    path.write_bytes(buffer.getvalue())
    uploaded = extract_pdf(buffer.getvalue())
    assert uploaded.details == {"pages": 2}
    assert read_document(settings.paths.root, path) == uploaded.text == "Page one of the manual"


def test_memory_index_follows_the_file_hash(settings: Settings) -> None:
    memory = MemoryIndex(settings.paths, None)
    settings.paths.memory_file.write_text("# 记忆\n\n用户最喜欢的城市是成都。\n", encoding="utf-8")
    assert "成都" in memory.retrieve("最喜欢哪个城市")[0]["text"]
    settings.paths.memory_file.write_text("# 记忆\n\n用户最喜欢的城市是西安。\n", encoding="utf-8")
    top = memory.retrieve("最喜欢哪个城市")[0]
    assert "西安" in top["text"] and "成都" not in top["text"]
    assert top["source"] == "memory/MEMORY.md"


def test_save_memory_appends_atomically_within_the_cap(settings: Settings) -> None:
    path = settings.paths.memory_file
    assert append_fact(path, "用户住在杭州").startswith("Saved")
    assert path.read_text(encoding="utf-8").endswith("\n- 用户住在杭州\n")
    assert append_fact(path, "用户住在杭州") == "Already in memory."
    assert path.read_text(encoding="utf-8").count("用户住在杭州") == 1
    with pytest.raises(ToolError):
        append_fact(path, "   ")
    path.write_text("x" * 19_990, encoding="utf-8")
    with pytest.raises(ToolError, match="exceed"):
        append_fact(path, "a fact that does not fit any more")
    assert path.read_text(encoding="utf-8") == "x" * 19_990


def test_search_tool_through_chat(server: LiveServer) -> None:
    write_knowledge(server.settings)
    response = httpx.post(
        f"{server.url}/api/chat",
        json={"message": "search 碧螺春产自哪里", "session_id": "kb1", "stream": False},
        timeout=60,
    )
    assert response.status_code == 200
    history = httpx.get(f"{server.url}/api/sessions/kb1/history").json()["messages"]
    output = history[1]["tool_calls"][0]["output"]
    assert output.startswith("[1] knowledge/tea.md")
    assert "碧螺春产自江苏苏州" in output
