"""Which recalled notes the ``UserPromptSubmit`` hook shows: the floor on ``score``, and rare shared terms.

Standard library only, like :mod:`app.cli.hooks`. A note is shown when its ``score`` (cosine and keyword
evidence fused by the server, 0..1) reaches the floor. The server's keyword evidence is relative to the
candidates it found, so in a small store a note sharing the prompt's one telling word ("staging") can
score under the floor; the first note is therefore also shown when it shares a rare term with the prompt:
a word of five letters or more that is not among the common ones below, an identifier, or a Chinese
character pair without a function character. ``python -m bench.hooks --floor`` measures both rules on the
bilingual set (docs/performance.md, Hooks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: Calibrated on the bilingual set with the local model: keeps the right first note for >= 90 % of its
#: queries and stays silent for >= 90 % of prompts that share no meaning with any note.
DEFAULT_MIN_SCORE = 0.17

_WORD = re.compile(r"[A-Za-z0-9]+(?:[_.:/-][A-Za-z0-9]+)+|[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_IDENTIFIER = re.compile(r".*(?:\d|[_.:/-]).*")
# Frequent English words of five letters or more: sharing one says nothing about a topic.
_COMMON_TEXT = """
about above after again against almost along already although always among another anyone anything around asked
asking because become before began being below between both bring build built called came cannot change could
doing during early either enough every everyone everything example first found further getting given going great
happen having however last later looking making maybe might never nothing often other others place please point
quite rather really right saying second seems several shall should since small someone something still such
taken taking their there these thing things think those though three through today trying under until using
usually various where whether which while whole whose within without would write wrong years
"""
_COMMON = frozenset(_COMMON_TEXT.split())
# Characters of question words, particles and auxiliaries (both scripts): a pair holding one is not a topic.
_FUNCTION_CHARS = frozenset(
    "什麼么怎為为哪些可以是的了在有嗎吗呢個个要會会如何一不我你他她它們们這这那就都也還还最多少誰谁呀吧啊得地着著前後后"
)


def rare_terms(text: str) -> set[str]:
    """The terms of ``text`` that could name a topic: long uncommon words, identifiers, content pairs of Chinese."""
    terms: set[str] = set()
    for token in _WORD.findall(text.lower()):
        for run in _CJK_RUN.findall(token):
            terms |= {run[i:i + 2] for i in range(len(run) - 1) if not set(run[i:i + 2]) & _FUNCTION_CHARS}
        if _CJK_RUN.search(token):
            continue
        if _IDENTIFIER.fullmatch(token) and len(token) >= 3 or len(token) >= 5 and token not in _COMMON:
            terms.add(token)
    return terms


def shown(prompt: str, hits: Iterable[dict[str, Any]], min_score: float) -> list[dict[str, Any]]:
    """The hits the hook prints, in the server's order."""
    kept = []
    prompt_terms: set[str] | None = None
    for position, hit in enumerate(hits):
        if float(hit.get("score", 0.0)) >= min_score:
            kept.append(hit)
        elif position == 0:
            prompt_terms = rare_terms(prompt) if prompt_terms is None else prompt_terms
            if prompt_terms & rare_terms(str(hit.get("text", ""))):
                kept.append(hit)
    return kept
