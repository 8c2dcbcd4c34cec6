"""Retrieval benchmark: a knowledge base of at least 10,000 chunks generated locally.

Measures, in one run:
- index build time, against a baseline of only reading and chunking the same files;
- incremental update time after one file changes, against a full rebuild;
- query latency p50/p99, against a brute-force scan that scores every chunk in Python.

Run from the repository root: ``.venv/bin/python bench/retrieval.py [--files 420]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from clawlet.config import HomePaths
from clawlet.memory.chunking import split_text
from clawlet.memory.lexical import search_terms
from clawlet.memory.stores import KnowledgeBase, read_document

CHINESE = (  # noqa: SIM905
    "系统 记忆 检索 知识 文件 会话 工具 模型 用户 任务 数据 网络 安全 配置 服务 代理 "
    "技能 天气 城市 茶叶 历史 文化 计算 存储 索引 向量 关键词 段落 问题 答案"
).split()
ENGLISH = (  # noqa: SIM905
    "agent memory retrieval knowledge file session tool model user task data network security "
    "config service proxy skill weather city tea history culture compute storage index vector"
).split()


def paragraph(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(3, 6)):
        if rng.random() < 0.5:
            sentences.append("".join(rng.choice(CHINESE) for _ in range(rng.randint(8, 16))) + "。")
        else:
            words = " ".join(rng.choice(ENGLISH) for _ in range(rng.randint(10, 20)))
            sentences.append(words.capitalize() + ". ")
    return "".join(sentences)


def generate(directory: Path, files: int, paragraphs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(files):
        body = "\n\n".join(paragraph(rng) for _ in range(paragraphs))
        (directory / f"doc_{number:04d}.md").write_text(f"# 文档 {number}\n\n{body}\n", encoding="utf-8")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def brute_force(chunks: list[str], query: str, top_k: int = 3) -> list[int]:
    terms = set(search_terms(query))
    scores = [(sum(1 for t in search_terms(text) if t in terms), i) for i, text in enumerate(chunks)]
    return [i for _, i in sorted(scores, reverse=True)[:top_k]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=420)
    parser.add_argument("--paragraphs", type=int, default=60)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        paths = HomePaths(Path(tmp))
        generate(paths.knowledge, args.files, args.paragraphs)

        started = time.perf_counter()
        all_chunks = [c for p in sorted(paths.knowledge.glob("*.md")) for c in split_text(read_document(p))]
        chunk_only = time.perf_counter() - started

        knowledge = KnowledgeBase(paths, None)
        started = time.perf_counter()
        knowledge.refresh()
        build = time.perf_counter() - started
        count = knowledge.index.chunk_count()

        changed = paths.knowledge / "doc_0007.md"
        changed.write_text(
            changed.read_text(encoding="utf-8") + "\n\n新增的段落：增量更新测试。\n", encoding="utf-8"
        )
        started = time.perf_counter()
        reindexed = knowledge.refresh()
        incremental = time.perf_counter() - started

        rng = random.Random(11)
        queries = [
            rng.choice(CHINESE) + rng.choice(CHINESE)
            if i % 2
            else f"{rng.choice(ENGLISH)} {rng.choice(ENGLISH)}"
            for i in range(args.queries)
        ]
        latencies = []
        for query in queries:
            started = time.perf_counter()
            knowledge.search(query)
            latencies.append(time.perf_counter() - started)
        scan = []
        for query in queries[:10]:
            started = time.perf_counter()
            brute_force(all_chunks, query)
            scan.append(time.perf_counter() - started)

    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    scan_p50 = statistics.median(scan)
    print(f"knowledge base: {args.files} files, {count} chunks")
    print(
        f"index build:        {build:8.2f} s   "
        f"(read+chunk only {chunk_only:.2f} s; ratio {build / chunk_only:.2f}x)"
    )
    print(
        f"incremental update: {incremental * 1000:8.1f} ms  ({reindexed} file re-indexed; "
        f"full build / incremental = {build / incremental:.0f}x)"
    )
    print(
        f"query latency:      p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms over {len(latencies)} queries "
        f"(brute-force scan p50 {scan_p50 * 1000:.1f} ms; speed-up {scan_p50 / p50:.0f}x)"
    )
    if count < 10_000:
        print(f"warning: only {count} chunks; raise --files or --paragraphs for a 10,000-chunk run")


if __name__ == "__main__":
    main()
