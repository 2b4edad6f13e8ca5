"""Style variants of training rows, so the classifier learns what is asked rather than how it is said.

Why: in public routing data every long row is a hard task and every easy row is a short, tidy query, so a
model trained on it learns "long or chatty = complex" and "unpunctuated = simple". Each variant here
keeps the request and changes only its wrapping, and every variant is applied to both labels alike, so
no wrapping can carry label signal:

* ``chatty``: one to three label-neutral preamble sentences before the request ("Hi, we just got off a
  twelve-hour flight …"), and sometimes a closer after it ("Thanks so much!");
* ``voice``: what a speech-to-text transcript looks like: no punctuation, lower case, fillers ("um",
  "like", "那个", "就是") dropped between words or clauses;
* ``light``: a typo or two and a greeting or thanks around the request.

Preambles and closers are plain text files, one per line, in ``models/intent/data/augment/``
(``preambles_en.txt``, ``preambles_zh.txt``, ``closers_en.txt``, ``closers_zh.txt``, and the hard-sounding
stories ``preambles_heavy_<lang>.txt`` and ``after_heavy_<lang>.txt`` that ``chatty`` mixes in), written for
this project; the trainer reads them once. Randomness comes from the caller's ``random.Random``, seeded per row,
so the same data and seed give the same variants.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

AUGMENT_DIR = Path(__file__).resolve().parent / "data" / "augment"
KINDS = ("chatty", "voice", "light")
HEAVY_SHARE = 0.25  # chatty variants whose preamble names a hard-sounding topic
AFTER_SHARE = 0.1  # chatty variants with such a story after the request

_FILLERS_EN = ("um", "uh", "like", "you know", "so", "yeah", "okay so", "i mean", "uhh", "hmm")
_FILLERS_ZH = ("那个", "就是", "嗯", "然后", "呃", "这个", "对", "就是说", "那个那个", "啊")
_PUNCT_RE = re.compile(r"[?!,;:.¿¡、，；：？！。~～…\"“”'‘’()（）]+")
_ZH_PUNCT_RE = re.compile(r"[，、；：？！。~～…“”‘’（）,;:?!.]+")
_SPACE_RE = re.compile(r"\s+")
_PREFIX_EN = ("", "", "hi ", "hello, ", "excuse me, ", "sorry, ", "hey ", "quick question: ", "um ")
_SUFFIX_EN = ("", "", " please", " thanks", " thank you", " asap")
_PREFIX_ZH = ("", "", "请问", "你好，", "您好，请问", "麻烦问一下，", "打扰一下，", "hi，")
_SUFFIX_ZH = ("", "", "谢谢", "，谢谢", "呢", "啊", "呀")


@dataclass(frozen=True)
class Phrases:
    """Label-neutral text to wrap requests in, per language (``en``, ``zh``)."""

    preambles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    closers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    heavy: dict[str, tuple[str, ...]] = field(default_factory=dict)  # background naming a hard-sounding topic
    after: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "I'm asking because …", after the request

    @classmethod
    def load(cls, directory: Path = AUGMENT_DIR) -> Phrases:
        """Read ``preambles_<lang>.txt`` and ``closers_<lang>.txt``; blank lines and ``#`` lines skipped."""

        def read(name: str) -> tuple[str, ...]:
            path = directory / name
            if not path.is_file():
                return ()
            lines = path.read_text(encoding="utf-8").splitlines()
            return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))

        langs = ("en", "zh")
        return cls(
            preambles={lang: read(f"preambles_{lang}.txt") for lang in langs},
            closers={lang: read(f"closers_{lang}.txt") for lang in langs},
            heavy={lang: read(f"preambles_heavy_{lang}.txt") for lang in langs},
            after={lang: read(f"after_heavy_{lang}.txt") for lang in langs},
        )

    def sources(self) -> dict[str, int]:
        """How many lines of each kind were read (for the model card)."""
        out = {f"preambles_{k}": len(v) for k, v in self.preambles.items()}
        out.update({f"closers_{k}": len(v) for k, v in self.closers.items()})
        out.update({f"preambles_heavy_{k}": len(v) for k, v in self.heavy.items() if v})
        out.update({f"after_heavy_{k}": len(v) for k, v in self.after.items() if v})
        return out


_CJK_RE = re.compile(r"[\u3400-\u9fff]")


def _script(lang: str, text: str = "") -> str:
    """Chinese wrapping for Chinese rows and for mixed rows written mostly in Chinese."""
    if lang == "zh":
        return "zh"
    if lang == "mixed" and len(_CJK_RE.findall(text)) * 3 >= len(text.replace(" ", "")):
        return "zh"
    return "en"


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    return word[:i] + word[i] + word[i:]


def light(text: str, lang: str, rng: random.Random) -> str:
    """One or two typos and a greeting or thanks around the request."""
    words = text.split(" ")
    if len(words) > 1 and rng.random() < 0.6:
        for _ in range(rng.randint(1, 2)):
            j = rng.randrange(len(words))
            words[j] = _typo(words[j], rng)
        text = " ".join(words)
    if _script(lang, text) == "zh":
        return rng.choice(_PREFIX_ZH) + text + rng.choice(_SUFFIX_ZH)
    return rng.choice(_PREFIX_EN) + text + rng.choice(_SUFFIX_EN)


def chatty(text: str, lang: str, rng: random.Random, phrases: Phrases) -> str:
    """One to three preamble sentences before the request and, half the time, a closer after it.

    With ``HEAVY_SHARE`` one preamble names a hard-sounding topic (an illness, a court case, a visa, a coding
    course), and with ``AFTER_SHARE`` such a story follows the request instead of a closer: visitors tell
    these stories around easy questions, and because every label gets them alike, the words of the story
    carry no label signal; only the request does.
    """
    script = _script(lang, text)
    pre = phrases.preambles.get(script) or ()
    post = phrases.closers.get(script) or ()
    heavy = phrases.heavy.get(script) or ()
    after = phrases.after.get(script) or ()
    parts = [rng.choice(pre) for _ in range(rng.randint(1, 3))] if pre else []
    if heavy and rng.random() < HEAVY_SHARE:
        story = rng.choice(heavy)
        if parts:
            parts[rng.randrange(len(parts))] = story
        else:
            parts = [story]
    joiner = "" if script == "zh" else " "
    out = joiner.join([*parts, text])
    if after and rng.random() < AFTER_SHARE:
        out = out + joiner + rng.choice(after)
    elif post and rng.random() < 0.5:
        out = out + joiner + rng.choice(post)
    return out


def voice(text: str, lang: str, rng: random.Random) -> str:
    """A speech-to-text rendering: punctuation gone, lower case, fillers between words or clauses."""
    if _script(lang, text) == "zh":
        clauses = [c for c in _ZH_PUNCT_RE.split(text) if c.strip()]
        out: list[str] = []
        for clause in clauses or [text]:
            if rng.random() < 0.5:
                out.append(rng.choice(_FILLERS_ZH))
            out.append(clause.strip())
        if rng.random() < 0.3:
            out.insert(0, rng.choice(_FILLERS_ZH))
        return _SPACE_RE.sub(" ", (" " if rng.random() < 0.3 else "").join(out)).strip().lower()
    words = _PUNCT_RE.sub(" ", text).lower().split()
    if not words:
        return text
    for _ in range(rng.randint(1, 3)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(_FILLERS_EN))
    if len(words) > 2 and rng.random() < 0.3:  # a self-correction: "the the", "where where"
        j = rng.randrange(len(words))
        words.insert(j, words[j])
    return " ".join(words)


def variant(text: str, lang: str, kind: str, rng: random.Random, phrases: Phrases) -> str:
    """The ``kind`` variant of ``text`` (one of ``KINDS``)."""
    if kind == "chatty":
        return chatty(text, lang, rng, phrases)
    if kind == "voice":
        return voice(text, lang, rng)
    if kind == "light":
        return light(text, lang, rng)
    raise ValueError(f"unknown augmentation kind {kind!r}; expected one of {KINDS}")


__all__ = ["AUGMENT_DIR", "KINDS", "Phrases", "chatty", "light", "variant", "voice"]
