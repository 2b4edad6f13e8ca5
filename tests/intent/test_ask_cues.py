"""The classifier's views of a request: the final ask, the difficulty cues and the style variants."""

from __future__ import annotations

import random

import pytest

from models.intent.ask import final_ask
from models.intent.augment import AFTER_SHARE, HEAVY_SHARE, KINDS, Phrases, chatty, variant
from models.intent.cues import CUE_NAMES, cue_tokens
from models.intent.features import FeatureConfig, featurize, normalize


@pytest.mark.parametrize(
    ("text", "ask"),
    [
        ("Good evening! We just came out of dinner and we are too full to move. Which floor is the cinema on?",
         "Which floor is the cinema on?"),
        ("你好，我刚下高铁，拖着两个大箱子走了好久。请问这附近哪里可以打印登机牌？", "请问这附近哪里可以打印登机牌？"),
        ("Where is the restroom? Thanks so much!", "Where is the restroom?"),
        ("um so we just got off the train and uh the kids are hungry and tired where is the food court",
         "where is the food court"),
        ("写一个校验IPv6的正则", "写一个校验IPv6的正则"),
        ("I have three days in Tokyo and 50k yen. Can you plan it?", "Can you plan it?"),
    ],
)
def test_final_ask(text: str, ask: str) -> None:
    assert final_ask(text) == ask


def test_final_ask_of_a_long_comma_chain_is_its_last_ask_clause() -> None:
    text = ("请帮我制定一个三天的成都旅游计划，预算五千元，要包括住宿、交通和美食，"
            "最好避开人多的景点，还要适合老人和小孩")
    assert final_ask(text) == "请帮我制定一个三天的成都旅游计划"


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        ("debug this", "code"), ("这段代码哪里错了", "code"),
        ("is this mole cancer", "medical"), ("孕妇能吃布洛芬吗", "medical"),
        ("can my landlord keep my deposit under the lease", "legal"), ("离婚财产怎么分，要请律师吗", "legal"),
        ("should I refinance my mortgage", "finance"), ("个税怎么算", "finance"),
        ("plan a 3 day trip to Rome", "plan"), ("帮我规划一下行程", "plan"),
        ("draft a wedding toast", "write"), ("帮我写一首诗", "write"),
        ("prove that sqrt 2 is irrational", "reason"), ("证明根号2是无理数", "reason"),
        ("translate this paragraph into French", "passage"), ("翻译下面这段话", "passage"),
    ],
)
def test_each_cue_fires_in_both_languages(text: str, cue: str) -> None:
    assert f"cue:{cue}" in cue_tokens(normalize(text))


@pytest.mark.parametrize("text", ["where is the food court", "药店在哪", "免税店在几楼", "我的登机牌上写的几号门",
                                  "do you accept visa cards", "小程序怎么点餐"])
def test_venue_questions_name_no_domain(text: str) -> None:
    assert not [t for t in cue_tokens(normalize(text)) if t.startswith("cue:")]


def test_cue_names_and_number_counts() -> None:
    assert set(CUE_NAMES) == {"code", "medical", "legal", "finance", "plan", "write", "reason", "passage"}
    assert "number:2" in cue_tokens(normalize("what is 12 times 7"))
    assert "number:3" in cue_tokens(normalize("小明有9个苹果，给了小红3个，又买了5个"))


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        ("Dijkstra or A*: when to use which?", "code"), ("动态规划和贪心有什么区别", "code"),
        ("the other driver says I was at fault, do I have to pay", "legal"), ("对方要我全责赔钱怎么办", "legal"),
        ("which is better for me, the monthly pass or ten single tickets", "reason"), ("这两个套餐选哪个", "reason"),
    ],
)
def test_version_2_vocabulary(text: str, cue: str) -> None:
    assert f"cue:{cue}" in cue_tokens(normalize(text), 2)
    assert f"cue:{cue}" not in cue_tokens(normalize(text), 1)


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        ("give me the arguments for and against a four-day week", "reason"), ("小时候青大了黄，猜一个水果", "reason"),
        ("一件衣服打九折再减50元是多少钱", "reason"),
        ("what's the best route for a day in the old town", "plan"), ("西湖一日游怎么安排", "plan"),
        ("is it safe to take these two together", "medical"), ("孩子半夜发烧到39度", "medical"),
        ("can I work part time on my student visa", "legal"), ("我在这边读书，周末能去打工吗", "legal"),
        ("is my bonus taxed twice", "finance"),
        ("translate this notice for my guests please", "passage"), ("帮我把入园须知翻成日文", "passage"),
    ],
)
def test_version_3_vocabulary(text: str, cue: str) -> None:
    assert f"cue:{cue}" in cue_tokens(normalize(text), 3)
    assert f"cue:{cue}" not in cue_tokens(normalize(text), 2)


def test_version_2_counts_spoken_numbers() -> None:
    text = normalize("um the ferry does like twenty two knots and the island is sixty miles away")
    assert "number:3" in cue_tokens(text, 2)  # twenty, two, sixty
    assert "number:0" in cue_tokens(text, 1)
    assert "number:0" in cue_tokens(normalize("which one is the right one"), 2)


def test_variants_are_deterministic_and_keep_the_request() -> None:
    phrases = Phrases.load()
    assert all(n > 0 for n in phrases.sources().values())
    for kind in KINDS:
        a = variant("Where is the pharmacy?", "en", kind, random.Random("x"), phrases)
        b = variant("Where is the pharmacy?", "en", kind, random.Random("x"), phrases)
        assert a == b
        assert "pharm" in a.lower()
    voice = variant("请问，药店在哪里？", "zh", "voice", random.Random(3), phrases)
    assert "？" not in voice and "药店" in voice
    with pytest.raises(ValueError):
        variant("x", "en", "shouting", random.Random(0), phrases)


def test_version_2_models_still_featurise_as_before() -> None:
    """A v2 model (whole message only) keeps loading: its features skip the ask view and the cues."""
    v2 = FeatureConfig(version=2)
    v3 = FeatureConfig()
    text = "Hello there, long day. Which floor is the cinema on?"
    idx2, _ = featurize(text, v2)
    idx3, _ = featurize(text, v3)
    assert idx3.shape[0] > idx2.shape[0]
    assert FeatureConfig.from_dict(v2.to_dict()) == v2
    assert FeatureConfig.from_dict(v3.to_dict()) == v3
    with pytest.raises(ValueError):
        FeatureConfig.from_dict({**v3.to_dict(), "version": 1})


def test_chatty_variants_tell_hard_sounding_stories_around_the_request() -> None:
    """A quarter of the chatty variants carry a story naming an illness, a court case, a visa or the like, and a
    tenth add one after the request; the request stays whole, and no story asks anything itself."""
    phrases = Phrases.load()
    for lang in ("en", "zh"):
        assert len(phrases.heavy[lang]) >= 100 and len(phrases.after[lang]) >= 50
        assert not any(mark in line for line in phrases.heavy[lang] + phrases.after[lang] for mark in "?？")
    rng = random.Random(5)
    request = "Where is the pharmacy?"
    outs = [chatty(request, "en", rng, phrases) for _ in range(1000)]
    assert all(request in out for out in outs)
    with_story = sum(any(line in out for line in phrases.heavy["en"]) for out in outs) / len(outs)
    story_after = sum(any(out.endswith(line) for line in phrases.after["en"]) for out in outs) / len(outs)
    assert abs(with_story - HEAVY_SHARE) < 0.06 and abs(story_after - AFTER_SHARE) < 0.05
    assert "药店在哪里？" in chatty("药店在哪里？", "zh", random.Random(1), phrases)
