"""The kiosk benchmark's traffic: seeded sessions of FAQ repeats, simple, complex and multi-turn turns.

A "session" is one customer at one kiosk: either one to three unrelated questions (each a fresh
conversation, as a kiosk resets after every answer) or one multi-turn conversation whose follow-ups
must carry the earlier answers. The traffic is generated once from a seed and replayed identically
for every strategy, so the strategies are compared on the same questions in the same order.

Labels: a dataset row labelled ``cloud`` (or ``complex``) is ``complex``, ``edge`` (or ``simple``) is
``simple``, an FAQ question is ``simple``, and every follow-up turn is ``complex`` (it needs the
history). The one judgement call: the *opening* turn of a task dialogue (``sgd``, ``crosswoz``) is a
single-turn request such as "I need help finding a rental car.", which the dataset labels ``cloud``
only because the conversation goes on (see the dataset README's caveats). It is labelled ``simple``
here, and so is the opener of a conversation from the intent sets (``models/intent/data``: labelled
``complex`` because it is multi-turn; every opener of the held-out set is a venue question such as
"Where's the food court?"); ``dataset_label`` keeps the raw label so the report can give the strict
count too.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from models.faq import load_faq_pack

REPO_ROOT = Path(__file__).resolve().parent.parent
# The traffic that ships with the code (curated from public routing data; sources and licences in its
# README). More data: ``TrafficConfig.dataset_dirs`` / ``edgecloud bench kiosk --dataset-dir``.
DEFAULT_DATASET_DIR = REPO_ROOT / "bench" / "data" / "routing"
DEFAULT_FAQ_PACK = REPO_ROOT / "edge" / "cache" / "sample_faq.json"
DIALOGUE_SOURCES = frozenset({"sgd", "crosswoz"})
INTENT_LABELS = frozenset({"simple", "complex"})  # models/intent/data's labels (the routing data's: edge/cloud)


@dataclass(frozen=True)
class Turn:
    """One user message the kiosk sends; ``followup`` turns carry the session's earlier turns."""

    text: str
    label: str  # "simple" | "complex" (what the benchmark judges the router by)
    dataset_label: str  # "simple" | "complex" straight from the row (FAQ: "simple")
    kind: str  # "faq" | "repeat" | "simple" | "complex" | "opener" | "followup"
    lang: str
    source: str
    think_s: float  # pause before this turn is sent
    followup: bool = False


@dataclass(frozen=True)
class Session:
    index: int
    kiosk: int
    turns: tuple[Turn, ...]


@dataclass
class TrafficConfig:
    """The mix. Shares are of requests (``faq_share``) or of sessions (``multi_turn_share``)."""

    seed: int = 7
    sessions: int = 64
    concurrency: int = 8
    faq_share: float = 0.30  # of single-turn questions: an FAQ-pack question or paraphrase
    repeat_share: float = 0.10  # of the rest: an earlier simple question of this traffic asked again
    complex_share: float = 0.40  # of fresh dataset questions: a "cloud"-labelled row
    multi_turn_share: float = 0.12  # of sessions: a multi-turn conversation
    zh_share: float = 0.35
    max_turns: int = 3  # user turns of a multi-turn conversation that are sent
    max_questions: int = 3  # unrelated questions of one single-turn session (1..max)
    think_mean_s: float = 2.0  # exponential think time, capped at 4x the mean
    max_chars: int = 1200  # longer dataset prompts are left out (kiosk users do not paste essays)
    dataset_dirs: tuple[Path, ...] = (DEFAULT_DATASET_DIR,)
    faq_pack: Path = DEFAULT_FAQ_PACK

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["dataset_dirs"] = [str(p) for p in self.dataset_dirs]
        data["faq_pack"] = str(self.faq_pack)
        return data


@dataclass
class Pools:
    """The rows to draw from, split by kind and language."""

    simple: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    complex: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    multi: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    faq: dict[str, list[str]] = field(default_factory=dict)


def dataset_files(dirs: tuple[Path, ...] | list[Path]) -> list[Path]:
    """Every ``*.jsonl`` of the given folders, sorted per folder for a stable order."""
    files: list[Path] = []
    for folder in dirs:
        found = sorted(Path(folder).glob("*.jsonl"))
        if not found:
            raise FileNotFoundError(f"no *.jsonl routing data under {folder}")
        files += found
    return files


def load_pools(config: TrafficConfig) -> Pools:
    """Read every ``*.jsonl`` of the routing data folders and the FAQ pack.

    A text found in two folders (the shipped rows are a sample of the public data) is kept once."""
    pools = Pools()
    seen: set[str] = set()
    for path in dataset_files(config.dataset_dirs):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row = json.loads(line)
                key = f"{row.get('source')}\x00{row.get('text', '')}"
                if key in seen:
                    continue
                seen.add(key)
                lang = row.get("lang", "en")
                if row.get("messages"):
                    users = [m for m in row["messages"] if m.get("role") == "user" and m.get("content")]
                    sent = users[: config.max_turns]
                    if sent and all(len(m["content"]) <= config.max_chars for m in sent):
                        pools.multi.setdefault(lang, []).append(row)
                    continue
                if len(row.get("text", "")) > config.max_chars or not row.get("text"):
                    continue
                # Routing data says edge/cloud; the intent sets (models/intent/data) say simple/complex.
                target = pools.simple if row.get("label") in ("edge", "simple") else pools.complex
                target.setdefault(lang, []).append(row)
    for entry in load_faq_pack(Path(config.faq_pack)):
        pools.faq.setdefault(entry.lang or "en", []).extend(entry.questions())
    return pools


def _think(rng: random.Random, mean: float) -> float:
    if mean <= 0:
        return 0.0
    return round(min(rng.expovariate(1.0 / mean), 4 * mean), 3)


def _pick_lang(rng: random.Random, pool: dict[str, list[Any]], zh_share: float) -> str:
    lang = "zh" if rng.random() < zh_share else "en"
    if pool.get(lang):
        return lang
    return next(k for k, v in sorted(pool.items()) if v)


def build_traffic(config: TrafficConfig, pools: Pools | None = None) -> list[Session]:
    """The sessions, in order; session ``i`` belongs to kiosk ``i % concurrency``."""
    pools = pools or load_pools(config)
    rng = random.Random(config.seed)
    asked_simple: list[tuple[str, str, str]] = []  # (text, lang, source) of fresh simple questions
    sessions: list[Session] = []
    for index in range(config.sessions):
        turns: list[Turn] = []
        if rng.random() < config.multi_turn_share and pools.multi:
            lang = _pick_lang(rng, pools.multi, config.zh_share)
            row = rng.choice(pools.multi[lang])
            users = [m["content"] for m in row["messages"] if m.get("role") == "user" and m.get("content")]
            source = row.get("source", "?")
            for n, text in enumerate(users[: config.max_turns]):
                opener = n == 0
                # Task dialogues and the intent sets' conversations (labelled simple/complex, complex
                # because multi-turn) open with a single kiosk question; other sources' openers are
                # counted as complex, as the row says.
                label = "simple" if opener and (source in DIALOGUE_SOURCES or row.get("label") in INTENT_LABELS) \
                    else "complex"
                turns.append(Turn(text=text, label=label, dataset_label="complex",
                                  kind="opener" if opener else "followup", lang=lang, source=source,
                                  think_s=_think(rng, config.think_mean_s), followup=not opener))
        else:
            for _ in range(rng.randint(1, max(1, config.max_questions))):
                turns.append(_single_turn(rng, config, pools, asked_simple))
        sessions.append(Session(index=index, kiosk=index % max(1, config.concurrency), turns=tuple(turns)))
    return sessions


def _single_turn(rng: random.Random, config: TrafficConfig, pools: Pools,
                 asked_simple: list[tuple[str, str, str]]) -> Turn:
    think = _think(rng, config.think_mean_s)
    if rng.random() < config.faq_share and pools.faq:
        lang = _pick_lang(rng, pools.faq, config.zh_share)
        return Turn(rng.choice(pools.faq[lang]), "simple", "simple", "faq", lang, "faq-pack", think)
    if asked_simple and rng.random() < config.repeat_share:
        text, lang, source = rng.choice(asked_simple)
        return Turn(text, "simple", "simple", "repeat", lang, source, think)
    if rng.random() < config.complex_share:
        lang = _pick_lang(rng, pools.complex, config.zh_share)
        row = rng.choice(pools.complex[lang])
        return Turn(row["text"], "complex", "complex", "complex", lang, row.get("source", "?"), think)
    lang = _pick_lang(rng, pools.simple, config.zh_share)
    row = rng.choice(pools.simple[lang])
    asked_simple.append((row["text"], lang, row.get("source", "?")))
    return Turn(row["text"], "simple", "simple", "simple", lang, row.get("source", "?"), think)


def traffic_summary(sessions: list[Session]) -> dict[str, Any]:
    """Counts of the generated traffic, for the report."""
    kinds: dict[str, int] = {}
    langs: dict[str, int] = {}
    labels: dict[str, int] = {}
    for session in sessions:
        for turn in session.turns:
            kinds[turn.kind] = kinds.get(turn.kind, 0) + 1
            langs[turn.lang] = langs.get(turn.lang, 0) + 1
            labels[turn.label] = labels.get(turn.label, 0) + 1
    return {"sessions": len(sessions), "requests": sum(len(s.turns) for s in sessions),
            "kinds": kinds, "langs": langs, "labels": labels}
