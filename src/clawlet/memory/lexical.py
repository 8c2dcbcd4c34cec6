"""Search terms for keyword retrieval that work for Chinese as well as English.

Latin text gives lower-cased words; each run of CJK characters gives its single characters and
its bigrams, so a Chinese query matches the paragraphs that share its words without a segmenter.
"""

from __future__ import annotations

import re

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+")
_WORD = re.compile(r"[0-9a-z_]+(?:['’][a-z]+)?")


def search_terms(text: str) -> list[str]:
    lowered = text.lower()
    terms: list[str] = []
    for run in _CJK_RUN.findall(lowered):
        terms += list(run)
        terms += [run[i : i + 2] for i in range(len(run) - 1)]
    terms += _WORD.findall(_CJK_RUN.sub(" ", lowered))
    return terms
