"""A small LoCoMo-shaped file, made on the spot: the real release lives outside the repository."""

from __future__ import annotations

import json
import random
from pathlib import Path

PEOPLE = ["Caroline", "Melanie"]
PETS = ["cat", "dog", "parrot", "hamster", "turtle", "rabbit"]
NAMES = ["Oscar", "Luna", "Pepper", "Milo", "Biscuit", "Nova", "Juniper", "Rocket", "Maple", "Ziggy"]
CITIES = ["Lisbon", "Osaka", "Denver", "Nairobi", "Tallinn", "Hobart", "Quito", "Bergen"]
HOBBIES = ["pottery", "climbing", "chess", "sailing", "baking", "archery", "birdwatching", "fencing"]
CHATTER = ["Hey, how have you been?", "That sounds great!", "I know what you mean.", "Let's talk soon.",
           "Thanks for listening.", "Wow, really?", "Same here, honestly.", "Good luck with that!"]


def write_locomo(path: Path, *, sessions: int = 8, facts_per_session: int = 12, seed: int = 7) -> Path:
    """Two conversations of dated sessions; every fact turn is the evidence of one question."""
    rng = random.Random(seed)
    samples = []
    for sample in range(2):
        conversation: dict[str, object] = {"speaker_a": PEOPLE[0], "speaker_b": PEOPLE[1]}
        qa: list[dict[str, object]] = []
        for number in range(1, sessions + 1):
            conversation[f"session_{number}_date_time"] = f"1:{10 + number:02d} pm on {number} May, 2023"
            turns = []
            for turn in range(1, facts_per_session + 1):
                speaker = PEOPLE[turn % 2]
                dia_id = f"D{number}:{turn}"
                # Every text is unique: search results show one entry per text, exact search every copy.
                if turn % 3 == 0:
                    text = f"{rng.choice(CHATTER)} (talk {sample}.{number}.{turn})"
                    turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
                    continue
                fact, question = _fact(rng, speaker)
                fact = f"{fact} (note {sample}.{number}.{turn})"
                turns.append({"speaker": speaker, "dia_id": dia_id, "text": fact})
                qa.append({"question": question, "answer": "-", "evidence": [dia_id], "category": 1 + turn % 4})
            conversation[f"session_{number}"] = turns
        qa.append({"question": "Adversarial, no evidence", "category": 5, "adversarial_answer": "-"})
        samples.append({"sample_id": f"fixture-{sample}", "conversation": conversation, "qa": qa})
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def _fact(rng: random.Random, speaker: str) -> tuple[str, str]:
    kind = rng.randrange(3)
    if kind == 0:
        pet, name = rng.choice(PETS), rng.choice(NAMES)
        return f"I adopted a {pet} and named it {name}.", f"What did {speaker} name the {pet}?"
    if kind == 1:
        city = rng.choice(CITIES)
        return f"Next month I am flying to {city} for a conference.", f"Where is {speaker} flying to for a conference?"
    hobby = rng.choice(HOBBIES)
    return f"I started taking {hobby} lessons on weekends.", f"Which lessons did {speaker} start on weekends?"
