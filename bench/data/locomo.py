"""Reads LoCoMo (locomo10.json) from the shared datasets folder; the data is never copied into the repo."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# CI clones main into another folder with shared/ beside it: <root>/main/bench/data/ -> <root>/shared/datasets.
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "locomo10.json"
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION = re.compile(r"^session_(\d+)$")
# A few evidence ids in the release are malformed ('D8:6; D9:17', 'D:11:26'): read every id in the string.
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    date: str
    timestamp_ms: int

    @property
    def memory_text(self) -> str:
        """What is remembered: speaker and session date first, so both are searchable."""
        return f"[{self.date}] {self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    question: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


def dataset_path() -> Path:
    return Path(os.environ.get("MEMORY_MCP_LOCOMO", str(DEFAULT_PATH)))


def _parse_date(text: str) -> int:
    """'1:56 pm on 8 May, 2023' -> epoch milliseconds (0 when the format is unexpected)."""
    try:
        return int(datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").timestamp() * 1000)
    except ValueError:
        return 0


def _turns(conversation: dict[str, object]) -> list[Turn]:
    turns: list[Turn] = []
    sessions = sorted(int(m.group(1)) for key in conversation if (m := _SESSION.match(key)))
    for number in sessions:
        date = str(conversation.get(f"session_{number}_date_time", ""))
        for raw in conversation[f"session_{number}"]:  # type: ignore[union-attr]
            text = str(raw.get("text", "")).strip()
            if raw.get("blip_caption"):  # shared photos: the caption is what the turn says
                text = f"{text} [shares a photo: {raw['blip_caption']}]".strip()
            turns.append(Turn(raw["dia_id"], number, raw["speaker"], text, date, _parse_date(date)))
    return turns


def _questions(qa: list[dict[str, object]], known: set[str]) -> list[Question]:
    questions: list[Question] = []
    for item in qa:
        category = int(item["category"])  # type: ignore[arg-type]
        if category == 5:  # adversarial: no evidence by design
            continue
        ids = {f"D{s}:{t}" for s, t in _EVIDENCE.findall(" ".join(map(str, item.get("evidence", []))))}  # type: ignore[arg-type]
        ids &= known
        if ids:
            questions.append(Question(str(item["question"]), category, frozenset(ids)))
    return questions


def load(path: Path | None = None, limit: int | None = None, max_turns: int | None = None) -> list[Conversation]:
    """Conversations with their turns and the answerable questions (category 5 and evidence-less dropped).

    ``max_turns`` keeps only each conversation's first turns (and the questions answerable from them):
    a small slice for smoke tests.
    """
    raw = json.loads((path or dataset_path()).read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    for item in raw[:limit]:
        turns = _turns(item["conversation"])[:max_turns]
        questions = _questions(item["qa"], {t.dia_id for t in turns})
        conversations.append(Conversation(str(item.get("sample_id", len(conversations))), turns, questions))
    return conversations
