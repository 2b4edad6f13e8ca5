"""Venue knowledge inside the real gateway: uvicorn on 127.0.0.1, the official openai client as the
kiosk, the embedded model (llama.cpp) answering, the admin API and the ``edgecloud knowledge`` CLI."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from edge.cli import main as cli_main
from harness import make_settings, run_gateway

pytestmark = pytest.mark.slow  # loads the embedded model once for the module

TOKEN = "knowledge-admin-token-0123456789"
SYSTEM = "You are the help desk of Quayside Mall. Answer in one short sentence."
REFUSAL = "Sorry, I don't know that. Please ask the staff at the Blue Desk by the west door."
PACK = """---
name: quayside
version: {version}
refusal.en: {refusal}
refusal.zh: 抱歉，我不知道。请到西门旁的蓝色服务台咨询工作人员。
---
## lost-property (en)
keywords: lost and found, lost items
The lost property office is on Level {level}, room {level}-42. It is open from 08:00 to 18:00.

## lost-property (zh)
失物招领处位于{level}楼{level}-42室，营业时间08:00至18:00。

## parking (en)
keywords: car park, parking fee
Parking costs 12 yuan per hour.
"""


def pack_text(version: str, level: int) -> str:
    return PACK.format(version=version, level=level, refusal=REFUSAL)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path):
    tmp = tmp_path_factory.mktemp("knowledge-gw")
    pack = tmp / "quayside.md"
    pack.write_text(pack_text("1", 7), encoding="utf-8")
    settings = make_settings(
        tmp, server={"admin_token": TOKEN},
        cache={"enabled": True, "max_cacheable_temperature": 0.3},
        knowledge={"paths": [str(pack)], "mode": "strict", "uncovered_min_count": 1},
    )
    with run_gateway(settings) as gw:
        yield gw


def _admin() -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}"}


def _chat(gw, question: str, **kwargs):
    kwargs.setdefault("model", "edgecloud-edge")
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", 40)
    return gw.openai(timeout=300).chat.completions.with_raw_response.create(
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}], **kwargs)


def _upload(gw, text: str | bytes, name: str = "quayside.md") -> httpx.Response:
    return httpx.post(gw.base_url + "/admin/knowledge", params={"name": name}, timeout=120,
                      content=text.encode("utf-8") if isinstance(text, str) else text,
                      headers={**_admin(), "content-type": "text/markdown"})


def test_a_grounded_answer_carries_the_fact(gateway) -> None:
    status = httpx.get(gateway.base_url + "/admin/knowledge", headers=_admin(), timeout=30).json()
    assert status["loaded"] and status["name"] == "quayside" and status["version"] == "1"
    raw = _chat(gateway, "Where is the lost property office?")
    answer = raw.parse().choices[0].message.content
    assert raw.headers["x-edgecloud-route"] == "edge"
    assert "knowledge:strong:lost-property" in raw.headers["x-edgecloud-reason"]
    assert "7" in answer, answer  # Level 7 / room 7-42: the model knows it only from the pack


def test_strict_mode_refuses_to_invent(gateway) -> None:
    raw = _chat(gateway, "Is there a Gucci boutique in the mall?", model="edgecloud-auto")
    assert raw.parse().choices[0].message.content == REFUSAL
    assert raw.headers["x-edgecloud-route"] == "edge"
    assert raw.headers["x-edgecloud-reason"] == "knowledge:none:refused"
    streamed = _chat(gateway, "有古驰专卖店吗？", model="edgecloud-auto", stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
    assert text == "抱歉，我不知道。请到西门旁的蓝色服务台咨询工作人员。"
    status = httpx.get(gateway.base_url + "/admin/knowledge", headers=_admin(), timeout=30).json()
    assert {"question": "is there a gucci boutique in the mall?", "count": 1} in status["uncovered"]


def test_route_shows_the_passages_and_their_scores(gateway) -> None:
    body = {"model": "edgecloud-auto", "messages": [{"role": "user", "content": "how much is parking"}]}
    out = httpx.post(gateway.base_url + "/v1/route", json=body, timeout=30).json()
    knowledge = out["knowledge"]
    assert knowledge["passages"][0]["id"] == "parking" and knowledge["passages"][0]["score"] > 0
    assert 0 < knowledge["passages"][0]["coverage"] <= 1 and knowledge["strength"] in ("strong", "weak")
    assert any(rule.startswith("knowledge:") for rule in out["rules"])


def test_a_pack_update_invalidates_the_answers_built_on_the_old_one(gateway) -> None:
    question = "Which room is the lost property office in?"
    first = _chat(gateway, question, max_tokens=64)
    if first.parse().choices[0].finish_reason != "stop":
        pytest.skip("the model ran out of tokens: such answers are (rightly) not cached")
    again = _chat(gateway, question, max_tokens=64)
    assert again.headers["x-edgecloud-route"] == "cache"
    before = httpx.get(gateway.base_url + "/admin/knowledge", headers=_admin(), timeout=30).json()

    loaded = _upload(gateway, pack_text("2", 9))
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["knowledge_version"] != before["knowledge_version"]
    assert gateway.services.cache.knowledge_version == loaded.json()["knowledge_version"]
    after = _chat(gateway, question, max_tokens=64)
    assert after.headers["x-edgecloud-route"] == "edge"  # the old answer no longer matches
    assert after.headers["x-edgecloud-cache"] in ("miss", "store")


def test_a_malformed_pack_is_refused_and_the_old_one_kept(gateway) -> None:
    before = httpx.get(gateway.base_url + "/admin/knowledge", headers=_admin(), timeout=30).json()
    broken = pack_text("3", 5).replace("Parking costs 12 yuan per hour.", "")
    refused = _upload(gateway, broken, name="broken.md")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_knowledge_pack"
    assert "broken.md: line 14: the fact has no text" in error["message"]
    not_utf8 = _upload(gateway, pack_text("3", 5).encode("utf-8").replace("失物".encode(), "失物".encode("gbk")),
                       name="gbk.md")
    assert not_utf8.status_code == 400 and "gbk.md: line 12: not UTF-8" in not_utf8.json()["error"]["message"]
    after = httpx.get(gateway.base_url + "/admin/knowledge", headers=_admin(), timeout=30).json()
    assert after["pack_version"] == before["pack_version"] and after["facts"] == before["facts"]
    assert "broken" not in after["pack_version"] and after["last_error"]
    found = httpx.get(gateway.base_url + "/admin/knowledge/search", params={"q": "lost property"},
                      headers=_admin(), timeout=30).json()
    assert found["passages"][0]["id"] == "lost-property"


def test_metrics_and_dashboard(gateway) -> None:
    _chat(gateway, "Is there a Gucci boutique in the mall?", model="edgecloud-auto")
    text = httpx.get(gateway.base_url + "/metrics", timeout=30).text
    assert 'edgecloud_knowledge_lookups_total{result="none"}' in text
    assert "edgecloud_knowledge_retrieval_seconds_bucket" in text and "edgecloud_knowledge_hit_ratio" in text
    data = httpx.get(gateway.base_url + "/dashboard/data", timeout=30).json()["knowledge"]
    assert data["name"] == "quayside" and data["uncovered"][0]["question"].startswith("is there a gucci")


def test_cli_status_and_load(gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    pack = tmp_path / "quayside.md"
    pack.write_text(pack_text("4", 6), encoding="utf-8")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    common = ["knowledge", "--url", gateway.base_url, "--token-file", str(token_file)]
    assert cli_main([*common, "load", str(pack)]) == 0
    assert '"version": "4"' in capsys.readouterr().out
    assert cli_main([*common, "status"]) == 0
    assert '"name": "quayside"' in capsys.readouterr().out
    assert cli_main([*common, "search", "where is lost property"]) == 0
    assert "lost-property" in capsys.readouterr().out
    pack.write_text("## x (en)\n", encoding="utf-8")
    assert cli_main([*common, "load", str(pack)]) == 1
    assert "quayside.md: no 'name' or 'version'" in capsys.readouterr().err
    monkeypatch.setenv("EDGECLOUD_SERVER_ADMIN_TOKEN", TOKEN)
    assert cli_main(["knowledge", "--url", gateway.base_url, "status"]) == 0
    assert cli_main(["knowledge", "--url", gateway.base_url, "--token", TOKEN, "status"]) == 2
    assert TOKEN not in capsys.readouterr().err


def test_admin_api_needs_the_token(gateway) -> None:
    assert httpx.get(gateway.base_url + "/admin/knowledge", timeout=30).status_code == 401
