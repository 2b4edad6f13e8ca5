"""Find the final ask of a kiosk message: the part that says what the visitor wants.

Why: visitors wrap easy questions in greetings, stories and thanks ("Good evening! We just came out of
the most wonderful dinner, … Which floor is the cinema on?"). A classifier that only sees the whole
message learns that long, chatty text is hard, because every long row in public routing data is a hard
task. Giving the model the final ask as a second view, with its own features, lets it judge the request
by what is asked while the whole message still shows context that matters (a pasted document, code).

The rules, in order, on the raw text (punctuation still present):

1. Split into sentences at ``. ? ! ; 。 ？ ！ ； …`` and line breaks.
2. Drop trailing closers: short sentences of thanks, apology or "no rush" with no question in them.
3. Take the last sentence that reads as an ask (ends in a question mark or holds an ask cue such as
   "where", "can you", "how", "请问", "吗", "帮我", "写"); if none does, the last remaining sentence.
4. A long sentence without inner stops (voice transcripts, comma chains) is split again at commas and
   the last clause that reads as an ask is taken; failing that, English text from its last ask-opening
   word ("where", "can you", "write" …), else its last 14 words or 24 characters.

The result is a view for the features, never shown to anyone: a wrong cut costs a little accuracy,
not correctness, because the whole message is featurised as well.
"""

from __future__ import annotations

import re

_SENTENCE_RE = re.compile(r"[^.?!;。？！；…\n]+[.?!;。？！；…]*")
_CLAUSE_RE = re.compile(r"[^,，、:：]+")
_QUESTION_END_RE = re.compile(r"[?？]\s*$")
_WORD_RE = re.compile(r"[A-Za-z0-9']+")
_CJK_RE = re.compile(r"[\u3400-\u9fff]")

def _trie_pattern(words: list[str]) -> str:
    """One regular expression that matches exactly the strings in ``words``, as a trie: ``re`` tries
    an alternation's branches one by one at every position, so a flat list of 80 words made a search
    over a long voice transcript cost ~0.1 ms; a trie tries one branch per first letter. Only for
    existence tests (``search``): which of two overlapping words matches first is not kept."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        end = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if end else body

    return build(trie)


def _first_chars(words: list[str]) -> str:
    """A lookahead for the characters ``words`` start with, to put before their trie: ``re`` still tries the
    pattern at every position, but a position no word starts at fails in one set test instead of one per
    branch of the trie's first level (a third of the search's time on a long English message, and three
    quarters of the Chinese pattern's there). It consumes nothing, so the same positions match."""
    return "(?=[" + "".join(re.escape(ch) for ch in sorted({word[0] for word in words})) + "])"


# What reads as an ask, in English (whole words) and Chinese. Used to test a sentence, never to cut it.
_ASK_EN_TERMS = [
    "where", "what", "what's", "whats", "when", "which", "who", "whom", "whose", "why", "how", "is there",
    "are there", "is it", "are you", "can i", "can you", "can we", "could you", "could i", "would you",
    "will you", "do you", "does", "did", "should", "shall", "may i", "please", "pls", "tell me", "show me",
    "help me", "i need", "we need", "i want", "we want", "i'd like", "i would like", "looking for", "explain",
    "write", "translate", "calculate", "compute", "prove", "plan", "find", "give me", "recommend", "suggest",
    "compare", "summarise", "summarize", "convert", "list", "fix", "debug", "wondering", "any idea", "is the",
    "are the", "do i", "do we",
]
_ASK_ZH_TERMS = [
    "吗", "呢", "哪", "什么", "啥", "怎么", "怎样", "如何", "多少", "是否", "能不能", "可不可以", "可以",
    "有没有", "请问", "请", "帮我", "帮忙", "告诉", "想知道", "想问", "写", "翻译", "计算", "算一下", "证明",
    "规划", "计划", "推荐", "比较", "解释", "总结", "为什么", "谁", "在哪",
]
_ASK_ZH_MEASURE = "几[点个号楼层天岁次]"  # "几点", "几楼": a question word with a measure word
# The lookahead sits inside the case-insensitive pattern, so it admits every case the trie's letters match.
_ASK_EN = re.compile(r"\b" + _first_chars(_ASK_EN_TERMS) + _trie_pattern(_ASK_EN_TERMS) + r"\b", re.IGNORECASE)
_ASK_ZH = re.compile(_first_chars([*_ASK_ZH_TERMS, _ASK_ZH_MEASURE])
                     + f"(?:{_trie_pattern(_ASK_ZH_TERMS)}|{_ASK_ZH_MEASURE})")
_CLOSER_RE = re.compile(
    r"^\W*(thanks?|thank you|thx|cheers|much appreciated|appreciate it|sorry|no rush|have a (nice|good|great) "
    r"day|bye|ok|okay|that's all|谢谢|多谢|感谢|麻烦了|麻烦你了|辛苦了|不好意思|打扰了|不着急|拜托了|好的)",
    re.IGNORECASE,
)
# Words that open an English ask; the ask of an unpunctuated voice transcript starts at the last one.
_LEAD_EN = re.compile(
    r"\b(where|what|what's|whats|when|which|who|why|how|is there|are there|can i|can you|can we|could you|"
    r"would you|do you|does|should|may i|please|tell me|show me|help me|explain|write|translate|calculate|"
    r"prove|plan|give me|recommend|suggest|compare|convert|fix|debug)\b",
    re.IGNORECASE,
)
_LONG_WORDS = 16
_LONG_CJK = 30
_TAIL_WORDS = 14
_TAIL_CHARS = 24


def _size(text: str) -> tuple[int, int]:
    return len(_WORD_RE.findall(text)), len(_CJK_RE.findall(text))


def _is_ask(text: str) -> bool:
    return bool(_QUESTION_END_RE.search(text) or _ASK_EN.search(text) or _ASK_ZH.search(text))


def _is_closer(text: str) -> bool:
    words, cjk = _size(text)
    if words > 8 or cjk > 12 or _QUESTION_END_RE.search(text):
        return False
    return bool(_CLOSER_RE.match(text))


def _tail(text: str) -> str:
    words = text.split()
    if len(words) > _TAIL_WORDS:
        return " ".join(words[-_TAIL_WORDS:])
    return text[-_TAIL_CHARS:]


def final_ask(text: str) -> str:
    """The final ask of ``text`` (see the module docstring); ``text`` itself when it is one short ask."""
    sentences = [s.strip() for s in _SENTENCE_RE.findall(text)]
    sentences = [s for s in sentences if s.strip(".?!;。？！；… ")]
    while len(sentences) > 1 and _is_closer(sentences[-1]):
        sentences.pop()
    if not sentences:
        return text.strip()
    chosen = next((s for s in reversed(sentences) if _is_ask(s)), sentences[-1])
    words, cjk = _size(chosen)
    if words <= _LONG_WORDS and cjk <= _LONG_CJK:
        return chosen
    clauses = [c.strip() for c in _CLAUSE_RE.findall(chosen) if c.strip()]
    for i in range(len(clauses) - 1, -1, -1):
        w, c = _size(clauses[i])
        if _is_ask(clauses[i]) and w <= _LONG_WORDS and c <= _LONG_CJK:
            if i > 0 and w < 4 and c < 6:  # "…，可以吗" / "…, ok?": the clause before says what
                return clauses[i - 1] + " " + clauses[i]
            return clauses[i]
    for match in reversed(list(_LEAD_EN.finditer(chosen))):
        if len(chosen[match.start() :].split()) >= 3:
            return chosen[match.start() :]
    return _tail(chosen)


__all__ = ["final_ask"]
