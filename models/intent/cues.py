"""Difficulty cues: which kind of task a request names, as a handful of tokens for the classifier.

Why: character n-grams learn the exact words of the training rows. A very short request such as "debug
this", "sue my airline?", "孕妇能吃布洛芬吗" or "这段代码哪里错了" carries almost no n-grams, and its few
ones ("where", "哪里") lean towards venue questions. What makes it hard is its domain: code, medicine,
law, money, planning, writing, reasoning, a whole passage to translate. Each domain is a short list of
general words here (English and Chinese), and a request that names one gets one token
(``cue:medical``); the linear model learns each cue's weight from the training rows, and every cue also
fires in venue questions (a pharmacy, a tax-free counter, a writing desk), so it is evidence, not a rule.

``number`` counts the distinct numbers in the text (1, 2, 3, 4 or more): one-step arithmetic has two,
word problems have more.

The lists name domains, not training sentences: they were written from general vocabulary, and a test
checks that each cue fires on a plain example in both languages.

Versions: a model learns the weights of the cues its trainer computed, so the vocabulary is versioned and the
feature version names it (``FeatureConfig.cue_version``: feature version 4 reads vocabulary 2, version 5 reads
vocabulary 3). Version 1 is ``_CUES`` with digits and Chinese numerals; version 2 adds ``_ADDED_IN_2`` (algorithm
names, liability and insurance words, choosing between options) and English number words from "two" up, which
voice transcripts use instead of digits; version 3 adds ``_ADDED_IN_3`` (arguing in depth, riddles posed in
Chinese, two-step sums, routes, notices to translate, one's own symptoms, drug mixes, visas and tax). Each
version's tables are built once; a model of any version is featurised exactly as it was trained.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress, count, pairwise
from operator import itemgetter

try:  # the English cues in C, built at install with the text features (``models/intent/_textfeatures.c``)
    from models.intent import _textfeatures
except ImportError:  # pragma: no cover - no compiler at install: the spelling below (the tests run both)
    _textfeatures = None


@dataclass(frozen=True)
class _Cue:
    """One domain's vocabulary: English words, word prefixes and phrases, and Chinese terms.

    Words are set lookups, not a regular expression with word boundaries per domain: such an alternation of a
    hundred words costs about 0.1 ms per call in Python's ``re``, the whole budget of a kiosk request's features.
    """

    words: frozenset[str]
    prefixes: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()  # matched against the space-padded English words of the text
    zh: tuple[str, ...] = ()  # Chinese substrings
    zh_re: tuple[str, ...] = ()  # Chinese terms that need context (a lookahead or lookbehind), one pattern each


def _w(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CUES: dict[str, _Cue] = {
    "code": _Cue(
        _w("python java javascript typescript c++ golang rust sql regex regexp code coding script bug debug error "
           "exception stacktrace compile compiler api json csv xml yaml html css vba macro linux bash shell docker "
           "kubernetes git nullpointer segfault algorithm algorithms database programming deploy backend frontend "
           "array arrays recursion recursive pointer pointers struct boolean bst hashmap hashtable dfs bfs "
           "quicksort mergesort big-o refactor unittest pytest npm"),
        ("crashloop",),
        ("regular expression", "stack trace", "excel formula", "null pointer", "linked list", "binary tree",
         "binary search", "hash map", "hash table", "in c", "in c++", "in go", "in rust", "in java", "unit test",
         "for loop", "while loop", "infinite loop", "sorting algorithm", "time complexity"),
        ("代码", "编程", "函数", "脚本", "报错", "正则", "算法", "数据库", "编译", "调试", "链表", "二叉树", "数组",
         "递归", "指针", "排序算法", "哈希", "时间复杂度", "单元测试", "死循环", "变量"),
        (r"(?<!小)程序",),
    ),
    "medical": _Cue(
        _w("symptom symptoms dose dosage mg medication medications medicine medicines pill pills drug drugs ibuprofen "
           "paracetamol acetaminophen aspirin antibiotic antibiotics amoxicillin warfarin insulin metformin statin "
           "statins xanax rash mole cancer tumor tumour hypertension swallowed overdose infection fracture migraine "
           "seizure asthma prescription hepatitis hiv aids depression anxiety stroke pneumonia tuberculosis "
           "epilepsy arthritis chemotherapy antidepressant antidepressants sertraline melatonin"),
        ("pregnan", "allerg", "diabet", "diagnos", "sprain", "vaccin"),
        ("blood pressure", "chest pain", "side effect", "side effects", "what could it be", "should i see a doctor"),
        ("症状", "剂量", "孕妇", "怀孕", "过敏", "糖尿病", "高血压", "血压", "胰岛素", "抗生素", "布洛芬", "阿司匹林",
         "对乙酰氨基酚", "疼", "痛", "癌", "肿瘤", "咳嗽", "骨折", "头晕", "胸闷", "副作用", "挂什么科", "是什么病",
         "怎么治", "乙肝", "艾滋", "抑郁", "焦虑症", "中风", "心脏病", "哮喘", "癫痫", "结核", "化疗", "病史"),
        (r"药(?![店房])", r"炎(?!热)"),
    ),
    "legal": _Cue(
        _w("sue suing lawsuit lawyer attorney legal illegal law laws contract lease tenant landlord divorce custody "
           "visas immigration asylum enforceable liable liability copyright trademark patent noncompete non-compete "
           "inheritance opt"),
        ("deport",),
        ("in court", "court case", "will and", "green card", "work permit", "visa application", "visa rules",
         "visa status", "visa extension", "visa expired", "visa expires", "visa expiring", "visa refused",
         "visa refusal"),
        ("起诉", "律师", "法律", "违法", "合法", "合同", "离婚", "抚养权", "签证", "移民", "赔偿", "仲裁", "遗产",
         "继承", "侵权", "版权", "专利", "劳动法"),
    ),
    "finance": _Cue(
        _w("taxes stock stocks mortgage loan apr ira roth 401k pension bitcoin etf portfolio dividend annuity"),
        ("invest", "retire", "crypto", "refinanc", "amortis", "amortiz"),
        ("income tax", "tax return", "interest rate", "credit score", "monthly payment", "compound interest"),
        ("个税", "房贷", "贷款", "利息", "利率", "理财", "投资", "股票", "基金", "养老金", "复利", "月供", "收益率",
         "公积金"),
        (r"(?<![免退])税",),
    ),
    "plan": _Cue(
        _w("plan planning itinerary budget optimise optimize"),
        (),
        ("day trip",),
        ("规划", "计划", "行程", "攻略", "预算", "安排一下", "几天的"),
    ),
    "write": _Cue(
        _w("write draft compose essay poem poetry speech toast letter email resume cv slogan rewrite proofread "
           "paraphrase outline article blog lyrics caption"),
        ("summar",),
        ("cover letter", "press release"),
        ("帮我写", "作文", "文章", "诗", "演讲", "邮件", "总结", "摘要", "润色", "改写", "文案", "稿", "大纲", "读后感",
         "报告", "对联", "祝酒词"),
        (r"写(?=[一个篇封首段份出下点些]|代码|程序|作文|文章|诗|邮件|信|简历|报告|总结)",),
    ),
    "reason": _Cue(
        _w("prove proof solve puzzle riddle logic logical equation derive derivation theorem compare comparison "
           "evaluate critique argue debate implication implications tradeoff tradeoffs trade-off trade-offs "
           "probability optimal"),
        ("analys", "analyz"),
        ("step by step", "in detail", "pros and cons", "why did", "explain why", "knights and knaves"),
        ("证明", "推导", "解方程", "方程", "逻辑", "谜题", "为什么", "详细", "分析", "比较一下", "对比", "优劣", "利弊",
         "评价", "原理", "论证", "概率", "最优", "推理", "相容"),
    ),
    "passage": _Cue(
        _w("paragraph passage"),
        (),
        ("this paragraph", "this passage", "whole text", "whole paragraph", "whole page", "whole document",
         "whole letter", "the following", "this text", "this document", "this article", "this letter", "this essay",
         "this contract", "this email"),
        ("下面这段", "这段话", "这段文字", "这篇", "全文", "整段", "以下内容", "这封信", "这份"),
    ),
}
# Version 2's additions, merged into version 1's lists of the same domain.
_ADDED_IN_2: dict[str, _Cue] = {
    "code": _Cue(
        _w("dijkstra bellman-ford knapsack backtracking memoization memoisation heap heaps trie graph graphs mutex "
           "deadlock concurrency multithreading async await lambda leetcode github django flask nodejs php kotlin "
           "matlab pandas numpy tensorflow pytorch"),
        (),
        ("dynamic programming", "shortest path", "machine learning", "neural network", "race condition",
         "memory leak", "big o"),
        ("动态规划", "最短路径", "图论", "线程", "并发", "死锁", "内存泄漏", "机器学习", "神经网络", "前端", "后端"),
    ),
    "legal": _Cue(
        _w("compensation damages liability settlement negligence"),
        (),
        ("insurance claim", "at fault", "police report", "small claims"),
        ("索赔", "理赔", "免赔", "全责", "责任方", "交通事故", "肇事", "报警"),
    ),
    "reason": _Cue(
        frozenset(),
        (),
        ("when to use", "which is better", "should i choose", "or should i"),
        ("哪个更好", "选哪个", "怎么选"),
    ),
}
# Version 3's additions, merged into version 2's lists: the kinds of difficulty the fresh sets of rounds v22-v24
# found with no cue word (an argument in depth, a riddle posed in Chinese, a two-step sum, a route to plan, a
# notice or a card to translate, one's own tax, visa, symptom or drug mix), written as each domain's general
# vocabulary, not as those requests' words.
_ADDED_IN_3: dict[str, _Cue] = {
    "medical": _Cue(
        _w("fever vomiting nausea diarrhoea diarrhea dizzy dizziness insomnia palpitations eczema interact "
           "interaction interactions contraindicated"),
        (),
        ("safe to take", "ok with", "okay with", "safe with", "mix with"),
        ("发烧", "发热", "心慌", "失眠", "腹泻", "拉肚子", "呕吐", "湿疹", "皮疹", "一起吃", "同时吃", "散瞳"),
    ),
    "legal": _Cue(
        _w("permit permits"),
        (),
        ("my visa", "student visa", "tourist visa", "transit visa", "work visa", "allowed to work"),
        ("打工", "学生签", "工作签", "旅游签", "过境签", "居留"),
    ),
    "finance": _Cue(_w("taxed taxable deductible owe owed")),
    "plan": _Cue(
        _w("one-day two-day three-day"),
        (),
        ("day route", "best route", "route for"),
        ("一日游", "两日游", "三日游", "路线", "怎么玩", "玩一天"),
    ),
    "reason": _Cue(
        _w("arguments argument convincing persuasive theories justify critically brainteaser brainteasers "
           "brain-teaser in-depth"),
        (),
        ("in depth", "make the case", "case for", "for and against", "which side", "the evidence"),
        ("深入", "展开讲", "展开说", "论述", "透彻", "讲透", "论据", "辩论", "猜谜", "猜一个", "猜个字", "猜一猜",
         "谜语", "谜底", "脑筋急转弯", "找规律", "一共多少", "总共多少", "加起来", "再减", "再加", "再乘", "再除",
         "再打", "平均每", "相遇"),
    ),
    "passage": _Cue(
        frozenset(),
        (),
        ("translate this", "translate the", "this notice", "this note", "this sign", "this message", "this card",
         "this menu", "this review", "these instructions", "full text"),
        ("这一段", "这一大段", "把这段", "这段翻", "这封", "须知", "告示", "这则", "这条通知", "以下"),
    ),
}
_ADDITIONS = (_ADDED_IN_2, _ADDED_IN_3)  # version k + 1 merges the first k of these into ``_CUES``
CUE_VERSIONS = tuple(range(1, len(_ADDITIONS) + 2))
CUE_VERSION = CUE_VERSIONS[-1]  # the newest vocabulary (the newest feature version reads it)


def _vocabulary(version: int) -> dict[str, _Cue]:
    """The domains of one version, in the fixed domain order of ``_CUES``: version 1's lists with the additions
    of every later version up to ``version`` merged in."""
    merged = dict(_CUES)
    for added in _ADDITIONS[: version - 1]:
        for name, more in added.items():
            cue = merged[name]
            merged[name] = _Cue(cue.words | more.words, cue.prefixes + more.prefixes, cue.phrases + more.phrases,
                                cue.zh + more.zh, cue.zh_re + more.zh_re)
    return merged


_EN_WORD_RE = re.compile(r"[a-z0-9+'-]+")
_CJK_RE = re.compile(r"[\u3400-\u9fff]")
# Any character a number can start with: a cheap scan that spares most texts the two-branch one below.
_NUMERAL_RE = re.compile(r"[\d零一二两三四五六七八九十百千万亿半]")
_NUMBER = (r"\d+(?:[.,]\d+)?|[零一二两三四五六七八九十百千万亿半]+"
           r"(?=[个只块元岁天年月小时分钟公里米斤克度人次本张件辆层楼号%％])")
_DIGITS_RE = re.compile(_NUMBER)  # the numerals alone, counted apart from number words (``_count_numbers``)
# English number words from two up (version 2): "one" is mostly a pronoun.
_EN_NUMBER_WORDS = frozenset(
    "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million".split())
_EN_NUMBERS = rf"\b(?:{'|'.join(sorted(_EN_NUMBER_WORDS))})\b"


_Phrases = dict[str, tuple[tuple[str, tuple[str, ...]], ...]]


@dataclass(frozen=True)
class CueTables:
    """One version's lookup tables for all domains, so a text is scanned once, not once per domain: word ->
    domains, (prefix, domain) pairs, first word of an English phrase -> (domain, phrase words) in domain order,
    one pattern for the Chinese terms (each domain a named group), and the number pattern. The fields after
    ``number_words`` are views of the others, derived here because ``cue_tokens`` tests against them per
    request."""

    names: tuple[str, ...]
    words: dict[str, tuple[str, ...]]
    prefix_cues: tuple[tuple[str, str], ...]
    phrases_by_first: _Phrases
    zh_re: re.Pattern[str]
    number_re: re.Pattern[str]  # what ``number:<n>`` counts: its distinct matches (``cue_tokens`` counts them faster)
    number_words: frozenset[str]  # the English number words ``number_re`` finds (version 2)
    cue_words: frozenset[str] = field(init=False)
    phrase_firsts: frozenset[str] = field(init=False)
    prefixes: tuple[str, ...] = field(init=False)
    # A word can start with a prefix only if its first ``len(shortest prefix)`` characters are one of
    # ``prefix_heads``: ``prefix_head`` cuts them, and ``map`` calls both in C, with no frame per word.
    prefix_head: Callable[[str], str] = field(init=False)
    prefix_length: int = field(init=False)  # the shortest prefix's length: what ``prefix_head`` keeps
    prefix_heads: frozenset[str] = field(init=False)
    phrase_pairs: frozenset[tuple[str, str]] = field(init=False)  # the first two words of every phrase
    # ``number_words`` as whole words behind a lookahead for their first letters (None without any): a word
    # start that no number word starts with fails in one set test, not once per word of the alternation.
    number_words_re: re.Pattern[str] | None = field(init=False)
    # The tables ``_textfeatures.cue_scan`` takes after the text, in its order: spelled once, here.
    scan_args: tuple = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cue_words", frozenset(self.words))
        object.__setattr__(self, "phrase_firsts", frozenset(self.phrases_by_first))
        object.__setattr__(self, "prefixes", tuple(prefix for prefix, _ in self.prefix_cues))
        shortest = min(map(len, self.prefixes), default=0)
        object.__setattr__(self, "prefix_head", itemgetter(slice(None, shortest)))
        object.__setattr__(self, "prefix_length", shortest)
        object.__setattr__(self, "prefix_heads", frozenset(prefix[:shortest] for prefix in self.prefixes))
        pairs = [parts[:2] for options in self.phrases_by_first.values() for _, parts in options]
        if any(len(pair) < 2 for pair in pairs):
            raise ValueError("every English cue phrase needs two words or more (one word is a cue word)")
        object.__setattr__(self, "phrase_pairs", frozenset(pairs))
        firsts = "".join(sorted({word[0] for word in self.number_words}))
        words = "|".join(map(re.escape, sorted(self.number_words)))
        object.__setattr__(self, "number_words_re",
                           re.compile(rf"\b(?=[{firsts}])(?:{words})\b") if self.number_words else None)
        object.__setattr__(self, "scan_args", (self.words, self.prefix_heads, self.prefix_length, self.prefix_cues,
                                               self.phrases_by_first, self.number_words))


_LOOKBEHIND_RE = re.compile(r"\(\?<[!=][^()]*\)")
_METACHARS = frozenset("\\[](){}.*+?^$|")


def _first_chars(cue: _Cue) -> set[str]:
    """Every character a match of the domain's Chinese terms can start with. A ``zh_re`` pattern may open
    with lookbehinds (they consume nothing) and must then name a plain character: anything else is
    refused here, so that the prefilter in ``zh_pattern`` can never drop a match."""
    chars = {term[0] for term in cue.zh}
    for pattern in cue.zh_re:
        rest = pattern
        while (lookbehind := _LOOKBEHIND_RE.match(rest)) is not None:
            rest = rest[lookbehind.end():]
        if not rest or rest[0] in _METACHARS:
            raise ValueError(f"a zh_re pattern must start with a plain character after its lookbehinds: {pattern!r}")
        chars.add(rest[0])
    return chars


def zh_alternation(vocabulary: dict[str, _Cue]) -> str:
    """Every domain's Chinese terms as one alternation, each domain a named group (``lastgroup`` names it)."""
    return "|".join(f"(?P<{name}>{'|'.join([*(re.escape(t) for t in cue.zh), *cue.zh_re])})"
                    for name, cue in vocabulary.items() if cue.zh or cue.zh_re)


def zh_pattern(vocabulary: dict[str, _Cue]) -> str:
    """``zh_alternation`` behind a lookahead for the characters a term can start with. Why the lookahead:
    without it ``re`` tries every branch of the alternation (hundreds of terms) at every character of the
    text, about 0.7 us a character, the largest cost of a Chinese request's features; with it a character no
    term starts with fails in one set test. It consumes nothing and admits every position a branch could match
    at, so the matches are the same."""
    firsts = set().union(*(_first_chars(cue) for cue in vocabulary.values()))
    if not firsts:
        return "(?!)"  # no Chinese terms: a pattern that never matches
    return f"(?=[{''.join(re.escape(ch) for ch in sorted(firsts))}])(?:{zh_alternation(vocabulary)})"


def _compile(version: int) -> CueTables:
    vocabulary = _vocabulary(version)
    words: dict[str, tuple[str, ...]] = {}
    for name, cue in vocabulary.items():
        for word in cue.words:
            words[word] = (*words.get(word, ()), name)
    prefixes = tuple((prefix, name) for name, cue in vocabulary.items() for prefix in cue.prefixes)
    phrases: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for name, cue in vocabulary.items():
        for phrase in cue.phrases:
            parts = tuple(phrase.split(" "))
            phrases.setdefault(parts[0], []).append((name, parts))
    zh = zh_pattern(vocabulary)
    number, number_words = (_NUMBER, frozenset()) if version == 1 else (f"{_NUMBER}|{_EN_NUMBERS}", _EN_NUMBER_WORDS)
    return CueTables(tuple(vocabulary), words, prefixes, {k: tuple(v) for k, v in phrases.items()}, re.compile(zh),
                     re.compile(number), number_words)


TABLES = {version: _compile(version) for version in CUE_VERSIONS}


def _phrase_cues(words: list[str], t: CueTables) -> set[str]:
    """Domains whose English phrases occur as whole words, left to right without overlap (the first
    phrase in domain order wins at a position, and the scan resumes after it). A dictionary of first
    words instead of one regular expression over the joined text: the alternation of every phrase, tried
    at every space, cost a fifth of a kiosk request's feature time. Only the positions whose first two
    words begin a phrase are visited (every phrase has two words or more), found in C (``compress``): a
    Python step per word, or per first word such as "in" and "or", cost 30 us on a chatty message."""
    found: set[str] = set()
    resume = 0
    starts = map(t.phrase_pairs.__contains__, pairwise(words))
    for i in compress(count(), starts):
        if i < resume:
            continue
        for name, parts in t.phrases_by_first[words[i]]:
            if tuple(words[i : i + len(parts)]) == parts:
                found.add(name)
                resume = i + len(parts)
                break
    return found


def cue_tokens(norm: str, version: int = CUE_VERSION) -> list[str]:
    """The cue tokens of a normalised text (``normalize`` in ``features``): ``cue:<domain>`` and ``number:<n>``,
    with the vocabulary of ``version`` (the model card's).

    The English words, prefixes, phrases and the number count are one pass of the C module where it was
    built (``_textfeatures.cue_scan``), else ``_english_cues`` and ``_count_numbers`` below, which are its
    specification: the tests hold the two to each other. The Chinese terms are always ``re``'s.
    """
    t = TABLES[version]
    if _textfeatures is not None:
        found, numbers = _textfeatures.cue_scan(norm, *t.scan_args)
    else:
        found, numbers = _english_cues(norm, t), _count_numbers(norm, t)
    if _CJK_RE.search(norm) is not None:
        found.update(m.lastgroup for m in t.zh_re.finditer(norm) if m.lastgroup)
    tokens = [f"cue:{name}" for name in t.names if name in found]
    tokens.append(f"number:{min(numbers, 4)}")
    return tokens


def _english_cues(norm: str, t: CueTables) -> set[str]:
    """The domains of the English cue words, prefixes and phrases of ``norm``.

    A set intersection for the cue words and one filtering pass for the prefixes, not a dictionary lookup
    and a prefix test per word in a Python loop: that loop cost more than a long message's shape tokens.
    The filter compares each word's head with a set (``prefix_heads``), not each word with every prefix:
    a third of the time on a long message; only the words it keeps are tested prefix by prefix.
    """
    word_list = _EN_WORD_RE.findall(norm)
    found: set[str] = set()
    for word in t.cue_words.intersection(word_list):
        found.update(t.words[word])
    for word in compress(word_list, map(t.prefix_heads.__contains__, map(t.prefix_head, word_list))):
        found.update(name for prefix, name in t.prefix_cues if word.startswith(prefix))
    if not t.phrase_firsts.isdisjoint(word_list):
        found |= _phrase_cues(word_list, t)
    return found


def _count_numbers(norm: str, t: CueTables) -> int:
    """``len(set(t.number_re.findall(norm)))``, in two parts that cannot overlap: the numerals (digits and
    Chinese numerals), searched from the first character that can start one (``_NUMERAL_RE``), and the number
    words of the version. A number word is letters with a word boundary on each side and a numeral holds no
    letter, so no match of one kind can hide or cut a match of the other, and their strings never coincide.
    Why not the one pattern: its alternation of words, tried at every position of a long message, and its
    scan of the whole text for a numeral cost more than the rest of the cues (about 30 us at 300 characters)."""
    first = _NUMERAL_RE.search(norm)
    numbers = len(set(_DIGITS_RE.findall(norm, first.start()))) if first is not None else 0
    if t.number_words_re is not None:
        numbers += len(set(t.number_words_re.findall(norm)))
    return numbers


CUE_NAMES = tuple(_CUES)

__all__ = ["CUE_NAMES", "CUE_VERSION", "CUE_VERSIONS", "TABLES", "CueTables", "cue_tokens"]
