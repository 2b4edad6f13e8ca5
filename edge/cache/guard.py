"""The guard in front of every semantic hit: the words that matter must agree.

Sentence embeddings place "when does the pharmacy open" and "when does the pharmacy close" very
close together (same topic, same shape); a cosine threshold alone is how GPTCache-style caches
answer the closing time with the opening time. So a semantic neighbour is only accepted when,
besides the cosine:

- the numbers agree (digits, English number words, Chinese numerals: "gate 3" is not "gate 5"),
- the negations agree in count ("is parking free" is not "is parking not free"),
- the polar terms agree: each lexicon class below groups a word with its opposites' *class* being
  different (open/close, arrive/depart, entrance/exit, 开门/关门, 到达/出发 ...),
- and the content words overlap: at least half of the shorter question's content words (stemmed
  English words, Chinese characters) appear in the other one ("pharmacy" is not "bank").

Everything here is a pure function of normalised text, so the near-miss set is tested without a
model, and the guard is re-applied to the stored question at hit time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# label -> words. English entries are whole tokens; Chinese entries are matched as substrings,
# longest first, and removed from the text before numerals and content characters are read.
_POLAR: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "open": (("open", "opens", "opened", "opening", "openings", "opening hours"),
             ("开门", "开放", "开业", "开始营业", "开")),
    "close": (("close", "closes", "closed", "closing", "shut", "shuts"),
              ("关门", "关闭", "打烊", "停业", "关")),
    "arrive": (("arrive", "arrives", "arrived", "arriving", "arrival", "arrivals"),
               ("到达", "抵达", "到站", "进站", "到港")),
    "depart": (("depart", "departs", "departed", "departing", "departure", "departures",
                "leave", "leaves", "leaving"),
               ("出发", "离开", "发车", "起飞", "离港", "出站")),
    "entrance": (("entrance", "entrances", "entry", "enter"), ("入口", "进口")),
    "exit": (("exit", "exits"), ("出口",)),
    "first": (("first", "earliest"), ("首班", "第一班", "最早")),
    "last": (("last", "latest"), ("末班", "最后", "最晚")),
    "before": (("before",), ("之前", "以前")),
    "after": (("after",), ("之后", "以后")),
    "up": (("up", "upstairs", "above"), ("楼上", "上楼")),
    "down": (("down", "downstairs", "below"), ("楼下", "下楼")),
    "left": (("left",), ("左",)),
    "right": (("right",), ("右",)),
    "men": (("men", "mens", "man", "male", "gents", "gentlemen", "boys"), ("男",)),
    "women": (("women", "womens", "woman", "female", "ladies", "lady", "girls"), ("女",)),
    "today": (("today",), ("今天", "今日")),
    "tomorrow": (("tomorrow",), ("明天", "明日")),
    "yesterday": (("yesterday",), ("昨天",)),
    "tonight": (("tonight",), ("今晚",)),
    "weekday": (("weekday", "weekdays"), ("工作日",)),
    "weekend": (("weekend", "weekends"), ("周末",)),
    "monday": (("monday", "mondays"), ("周一", "星期一", "礼拜一")),
    "tuesday": (("tuesday", "tuesdays"), ("周二", "星期二", "礼拜二")),
    "wednesday": (("wednesday", "wednesdays"), ("周三", "星期三", "礼拜三")),
    "thursday": (("thursday", "thursdays"), ("周四", "星期四", "礼拜四")),
    "friday": (("friday", "fridays"), ("周五", "星期五", "礼拜五")),
    "saturday": (("saturday", "saturdays"), ("周六", "星期六", "礼拜六")),
    "sunday": (("sunday", "sundays"), ("周日", "星期日", "星期天", "礼拜天")),
    "morning": (("morning", "mornings", "am"), ("上午", "早上")),
    "afternoon": (("afternoon", "afternoons"), ("下午",)),
    "evening": (("evening", "evenings", "night", "pm"), ("晚上",)),
    "buy": (("buy", "buying", "purchase"), ("购买", "买")),
    "sell": (("sell", "selling"), ("卖",)),
    "refund": (("refund", "refunds", "return", "returns"), ("退款", "退货", "退")),
    "free": (("free",), ("免费",)),
    "paid": (("paid", "cost", "costs", "price", "prices", "fee", "fees", "charge", "charges"),
             ("收费", "多少钱", "价格", "费用")),
    "north": (("north",), ("北门", "北边")),
    "south": (("south",), ("南门", "南边")),
    "east": (("east",), ("东门", "东边")),
    "west": (("west",), ("西门", "西边")),
    "most": (("most", "maximum", "max"), ("最多", "最大")),
    "least": (("least", "minimum", "min"), ("最少", "最小")),
    "more": (("more",), ("更多",)),
    "less": (("less", "fewer"), ("更少",)),
    "cheap": (("cheap", "cheaper", "cheapest"), ("便宜",)),
    "expensive": (("expensive",), ("贵",)),
    "adult": (("adult", "adults"), ("成人", "大人")),
    "child": (("child", "children", "kid", "kids"), ("儿童", "小孩", "孩子")),
    "inside": (("inside", "indoor", "indoors"), ("室内",)),
    "outside": (("outside", "outdoor", "outdoors"), ("室外",)),
    "hot": (("hot", "warm"), ("热",)),
    "cold": (("cold", "cool"), ("冷",)),
    "in": (("in",), ()),
    "out": (("out",), ()),
}
_POLAR_EN: dict[str, str] = {word: label for label, (en, _zh) in _POLAR.items() for word in en}
_POLAR_ZH: list[tuple[str, str]] = sorted(
    ((word, label) for label, (_en, zh) in _POLAR.items() for word in zh), key=lambda item: -len(item[0])
)
# Chinese words that contain a polar or numeral character but mean neither ("离开" is handled as
# depart above; these are neutral and removed first).
# A-not-A questions ("有没有" = "is there") ask, they do not negate.
_ZH_NEUTRAL = (
    "有没有", "是不是", "能不能", "可不可以", "要不要", "对不对", "会不会",
    "关于", "关系", "相关", "开车", "打开",
    "一下", "一些", "一起", "一样", "一直", "一般", "一共", "一定", "万一", "统一", "唯一", "一切",
    "无障碍", "无线", "东西", "女士们先生们",
)
_ZH_NEUTRAL_CONTENT = frozenset({"无障碍", "无线"})  # kept as content words, not read as negations

_NEGATIONS_EN = frozenset({
    "not", "no", "never", "without", "cannot", "cant", "dont", "doesnt", "didnt", "isnt", "arent",
    "wasnt", "werent", "wont", "wouldnt", "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "mustnt",
    "neither", "nor", "none", "nothing", "nobody", "nowhere",
})
_NEGATIONS_ZH = ("不", "没", "别", "无", "非", "未", "勿", "莫", "禁止")

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    "hundred": 100, "thousand": 1000, "million": 1_000_000, "once": 1, "twice": 2, "half": 0.5,
    "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th", "sixth": "6th",
    "seventh": "7th", "eighth": "8th", "ninth": "9th", "tenth": "10th",
}
_STOP_EN = frozenset("""
a an the is are was were be been being do does did doing to of on at for from by with about as into
it its this that these those there here what whats when where which who whom whose why how i im me
my we our us you your he she they them their can could would should will shall may might must
please tell know like want need get got have has had any some much many way so if or and but
also just there theres time times hi hello thanks thank ok okay wheres whens hows
""".split())
_STOP_ZH = frozenset(
    "的了吗呢吧啊呀嘛是在有我你您他她它们请问哪里儿"
    "什么怎样几这那个和与要想能可以就都也还很啥谁为"
    "给让会得地着过点时候间么多少"
)
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}
_ZH_NUMERAL_RUN = re.compile("[零〇一二两三四五六七八九十百千万半]+")
_CJK_RUN = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_LATIN_TOKEN = re.compile(r"\d+|[^\W\d_]+")


@dataclass(frozen=True)
class Terms:
    """What must agree between two questions for one's answer to serve the other."""

    numbers: tuple[str, ...]
    negations: int
    polar: frozenset[str]
    content: frozenset[str]
    order: tuple[str, ...] = ()  # the content words in reading order ("北京到上海" vs "上海到北京")


def _zh_number(run: str) -> str:
    """A Chinese numeral run ("十五", "二十", "三百零五", "半") as digits; unknown shapes kept as text."""
    if run == "半":
        return "0.5"
    total, section, current = 0, 0, 0
    for char in run:
        if char in _ZH_DIGITS:
            current = _ZH_DIGITS[char]
        elif char in _ZH_UNITS:
            unit = _ZH_UNITS[char]
            if unit == 10000:
                total += (section + current) * unit
                section, current = 0, 0
            else:
                section += (current or 1) * unit
                current = 0
        else:
            return run
    return str(total + section + current)


def _stem(word: str) -> str:
    """Light English stemming, enough for park/parking/parks to meet."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def extract_terms(normalized: str) -> Terms:
    """The guard's view of a normalised question (see ``edge.cache.keys.normalize_text``)."""
    numbers: list[str] = []
    negations = 0
    polar: set[str] = set()
    content: list[str] = []
    spaced = _CJK_RUN.sub(lambda m: f" {m.group(0)} ", normalized)
    for piece in spaced.split():
        if _CJK_RUN.fullmatch(piece):
            negations += _cjk_terms(piece, numbers, polar, content)
            continue
        for token in _LATIN_TOKEN.findall(piece):
            if token.isdigit():
                numbers.append(str(int(token)))
            elif token in _NUMBER_WORDS:
                numbers.append(str(_NUMBER_WORDS[token]))
            elif token in _NEGATIONS_EN:
                negations += 1
            elif token in _POLAR_EN:
                polar.add(_POLAR_EN[token])
            elif token not in _STOP_EN:
                content.append(_stem(token))
    return Terms(tuple(sorted(numbers)), negations, frozenset(polar), frozenset(content), tuple(content))


def _cjk_terms(run: str, numbers: list[str], polar: set[str], content: list[str]) -> int:
    for word in _ZH_NEUTRAL:
        if word in run:
            if word in _ZH_NEUTRAL_CONTENT:
                content.append(word)
            run = run.replace(word, " ")
    for word, label in _POLAR_ZH:
        if word in run:
            polar.add(label)
            run = run.replace(word, " ")
    negations = 0
    for word in _NEGATIONS_ZH:
        negations += run.count(word)
        run = run.replace(word, " ")
    for match in _ZH_NUMERAL_RUN.finditer(run):
        numbers.append(_zh_number(match.group(0)))
    run = _ZH_NUMERAL_RUN.sub(" ", run)
    content.extend(char for char in run if char.strip() and char not in _STOP_ZH)
    return negations


def terms_agree(a: Terms, b: Terms, min_overlap: float = 0.5) -> bool:
    """True when nothing that changes the answer differs between the two questions."""
    if a.numbers != b.numbers or a.negations != b.negations or a.polar != b.polar:
        return False
    if not a.content and not b.content:
        return True
    if not a.content or not b.content:
        return False
    shared = len(a.content & b.content)
    return shared / min(len(a.content), len(b.content)) >= min_overlap


def questions_agree(a: str, b: str) -> bool:
    """``terms_agree`` on two normalised questions."""
    return terms_agree(extract_terms(a), extract_terms(b))


__all__ = ["Terms", "extract_terms", "questions_agree", "terms_agree"]
