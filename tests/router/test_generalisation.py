"""The shipped classifier judges the request, not its length or style, and the router uses the card's threshold.

Fixed examples written for this test (not rows of any training, threshold or evaluation file): friendly,
rambling messages whose ask is simple stay on the device; short requests that need reasoning, code,
planning or expert care go to the cloud, in English and Chinese. The held-out evaluation is
``edgecloud models eval-intent`` (docs/intent.md); this test guards the behaviour it measures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edge.config import RouterConfig, Settings
from edge.router import LiveState, Router
from edge.schemas import parse_chat_request
from models.intent import dataset as ds
from models.intent.runtime import IntentClassifier

UP = LiveState(edge_ready=True, cloud_enabled=True, cloud_available=True, cloud_ttft_p95_s=0.8)
SETTINGS = Settings()

CHATTY_SIMPLE = [
    "Hi there! My sister and I flew in from Madrid this morning, we barely slept and our hotel check-in isn't "
    "until three. We'd love to freshen up a bit first. Are there showers in this terminal?",
    "Good afternoon, I'm here with my two grandkids and they've been asking for ice cream for the past hour, I "
    "promised them a treat if they behaved at the dentist. Where is the ice cream shop?",
    "hello sorry my english not so good, i come from brazil for the conference and my phone die, is there "
    "place to charge phone",
    "你好呀，我们一家人第一次来这个商场，孩子一直吵着要去玩，老人又走不动了，想找个地方歇一歇。请问儿童乐园在几楼？",
    "不好意思打扰一下，我刚做完体检，空腹到现在，饿得头都晕了，家里人还在路上。医院里面有食堂吗？",
    "我朋友说这个博物馆周一闭馆，我觉得她记错了，我们还打了个赌。博物馆周一开门吗？",
]
SHORT_HARD = [
    "prove the sum of two odd numbers is always even",
    "regex that validates an IPv6 address",
    "plan a 3-day Tokyo trip under ¥50k",
    "can I take ibuprofen with warfarin?",
    "写个正则校验六位邮政编码",
    "证明素数有无限多个",
    "五千块预算规划三天成都游",
    "我该不该提前还房贷",
]


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(RouterConfig(), IntentClassifier.load())


def _route(router: Router, text: str) -> str:
    req = parse_chat_request({"model": "edgecloud-auto", "messages": [{"role": "user", "content": text}]},
                             SETTINGS, {})
    return router.decide(req, UP, 40).route


@pytest.mark.parametrize("text", CHATTY_SIMPLE)
def test_chatty_but_simple_stays_on_the_device(router: Router, text: str) -> None:
    assert _route(router, text) == "edge"


@pytest.mark.parametrize("text", SHORT_HARD)
def test_short_but_hard_goes_to_the_cloud(router: Router, text: str) -> None:
    assert _route(router, text) == "cloud"


def test_examples_are_not_in_any_data_file() -> None:
    data_dir = Path(__file__).resolve().parents[2] / "models" / "intent" / "data"
    # The top level and every folder under it (held-out, threshold, unused rows): found, not listed.
    data = ds.expand_paths([data_dir, *sorted(p for p in data_dir.iterdir() if p.is_dir())], include_test_files=True)
    rows, _ = ds.load_rows(data, keep_multi_turn=True)
    keys = {ds.text_key(r.text) for r in rows}
    assert not [t for t in CHATTY_SIMPLE + SHORT_HARD if ds.text_key(t) in keys]


def test_the_router_uses_the_cards_threshold_and_says_so(router: Router) -> None:
    card = router.classifier.card
    assert router.threshold() == card["thresholds"]["simple_min_confidence"] == router.classifier.confidence_threshold
    body = {"model": "edgecloud-auto", "messages": [{"role": "user", "content": "Where is gate B12?"}]}
    req = parse_chat_request(body, SETTINGS, {})
    d = router.decide(req, UP, 10)
    assert d.threshold == card["thresholds"]["simple_min_confidence"]
    assert "chosen on" in d.threshold_source and "complex recall" in d.threshold_source
    # The card records the split the threshold was chosen on and its figures there.
    assert card["thresholds"]["target_routing_recall"] == 0.99
    assert card["metrics"]["threshold_split"]["routing"]["all"]["complex_to_cloud"] >= 0.99
    # An operator's own threshold wins, and the explanation says whose it is.
    own = Router(RouterConfig(confidence_threshold=0.9), router.classifier)
    assert own.threshold() == 0.9 and own.threshold_source().startswith("operator")
