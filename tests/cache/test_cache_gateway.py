"""The answer cache inside the real gateway: uvicorn on 127.0.0.1, the official openai client as the
kiosk, the embedded model answering misses, the admin API and the ``edgecloud cache`` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from edge.cli import main as cli_main
from harness import make_settings, run_gateway

from .conftest import SAMPLE_FAQ

pytestmark = pytest.mark.slow  # loads the embedded model once for the module

TOKEN = "test-admin-token-0123456789"
SYSTEM = "You are the help desk of Riverside Mall. Answer in one short sentence."


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path):
    settings = make_settings(
        tmp_path_factory.mktemp("cache-gw"),
        server={"admin_token": TOKEN},
        cache={"enabled": True, "faq_paths": [str(SAMPLE_FAQ)], "max_cacheable_temperature": 0.3},
    )
    with run_gateway(settings) as gw:
        yield gw


def _chat(gw, question: str, *, headers: dict[str, str] | None = None, history=None, **kwargs):
    messages = [{"role": "system", "content": SYSTEM}, *(history or []), {"role": "user", "content": question}]
    kwargs.setdefault("model", "edgecloud-edge")
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", 12)
    return gw.openai().chat.completions.with_raw_response.create(
        messages=messages, extra_headers=headers or {}, **kwargs
    )


def _admin(gw) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}"}


def test_faq_answer_non_streaming(gateway) -> None:
    raw = _chat(gateway, "What time does the mall open?")
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("The mall opens at 10:00")
    assert completion.choices[0].finish_reason == "stop"
    assert raw.headers["x-edgecloud-route"] == "cache"
    assert raw.headers["x-edgecloud-cache"] == "hit"
    assert raw.headers["x-edgecloud-reason"] == "faq"
    assert "cache;dur=" in raw.headers["server-timing"]


def test_faq_answer_streamed_as_many_sse_chunks(gateway) -> None:
    raw = _chat(gateway, "商场几点关门？", stream=True)
    assert raw.headers["x-edgecloud-route"] == "cache" and raw.headers["x-edgecloud-cache"] == "hit"
    deltas = [chunk.choices[0].delta.content for chunk in raw.parse() if chunk.choices and
              chunk.choices[0].delta.content]
    assert "".join(deltas) == "商场周日至周四晚上10点关门，周五和周六晚上11点关门。"
    assert len(deltas) >= 10  # replayed like a model, not one blob


# A request that surely stops: only answers that end by themselves are cached, and a stop sequence
# at the end of the first sentence (or line) ends it long before max_tokens.
SURELY_STOPS = {"max_tokens": 128, "stop": [".", "\n", "!"]}


def test_miss_then_hit_with_the_same_text(gateway) -> None:
    question = "Reply with the single word yes."
    first = _chat(gateway, question, **SURELY_STOPS)
    assert first.headers["x-edgecloud-route"] == "edge"
    text = first.parse().choices[0].message.content
    assert first.parse().choices[0].finish_reason == "stop", text
    second = _chat(gateway, "reply with the single word YES", **SURELY_STOPS)
    assert second.headers["x-edgecloud-route"] == "cache"
    assert second.headers["x-edgecloud-cache"] == "hit"
    assert second.parse().choices[0].message.content == text
    streamed = _chat(gateway, question, stream=True, **SURELY_STOPS)
    assert streamed.headers["x-edgecloud-cache"] == "hit"
    assert "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices) == text


def test_no_store_multi_turn_and_bypass_are_not_served(gateway) -> None:
    question = "What time does the mall open?"  # an FAQ question: would hit if read
    for headers in ({"cache-control": "no-store"}, {"x-edgecloud-cache": "bypass"}):
        raw = _chat(gateway, question, headers=headers, max_tokens=4)
        assert raw.headers["x-edgecloud-route"] != "cache"
    follow_up = _chat(gateway, question, max_tokens=4, history=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])
    assert follow_up.headers["x-edgecloud-route"] != "cache"


def test_admin_api_needs_the_token(gateway) -> None:
    r = httpx.get(gateway.base_url + "/admin/cache/stats")
    assert r.status_code == 401
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.get(gateway.base_url + "/admin/cache/stats", headers={"authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_admin_stats_faq_upload_and_purge(gateway) -> None:
    base = gateway.base_url
    stats = httpx.get(base + "/admin/cache/stats", headers=_admin(gateway)).json()
    assert stats["faq_entries"] > 0 and stats["hits"] >= 1 and 0 <= stats["hit_ratio"] <= 1
    csv_pack = "question,answer,paraphrases\nWhere is the ATM?,\"Level 1, by the lifts.\",cash machine?\n"
    r = httpx.post(base + "/admin/cache/faq?name=atm.csv", content=csv_pack.encode(),
                   headers={**_admin(gateway), "content-type": "text/csv"})
    assert r.status_code == 200 and r.json()["loaded"] == 1
    assert _chat(gateway, "Cash machine?").parse().choices[0].message.content == "Level 1, by the lifts."
    bad = httpx.post(base + "/admin/cache/faq", content=b'[{"question": "q"}]',
                     headers={**_admin(gateway), "content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_faq_pack"
    r = httpx.post(base + "/admin/cache/purge", json={"prefix": "cash", "faq": True}, headers=_admin(gateway))
    assert r.status_code == 200 and r.json()["purged"] == 1
    assert _chat(gateway, "Cash machine?", max_tokens=4).headers["x-edgecloud-route"] != "cache"


def test_cli_talks_to_the_gateway(gateway, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGECLOUD_SERVER_ADMIN_TOKEN", TOKEN)
    assert cli_main(["cache", "--url", gateway.base_url, "stats"]) == 0
    assert "hit_ratio" in json.loads(capsys.readouterr().out)
    pack = tmp_path / "lockers.json"
    pack.write_text(json.dumps([{"question": "Where are the lockers?", "answer": "Level B1."}]))
    assert cli_main(["cache", "--url", gateway.base_url, "load-faq", str(pack)]) == 0
    assert json.loads(capsys.readouterr().out)["loaded"] == 1
    wrong = tmp_path / "wrong-token"
    wrong.write_text("nope\n")
    assert cli_main(["cache", "--url", gateway.base_url, "--token-file", str(wrong), "purge"]) == 1
    assert "401" in capsys.readouterr().err
    right = tmp_path / "token"
    right.write_text(TOKEN + "\n")
    monkeypatch.delenv("EDGECLOUD_SERVER_ADMIN_TOKEN")
    assert cli_main(["cache", "--url", gateway.base_url, "--token-file", str(right), "purge",
                     "--prefix", "where are the lockers", "--faq"]) == 0
    assert json.loads(capsys.readouterr().out)["purged"] == 1


def test_cli_refuses_a_token_on_the_command_line(gateway, capsys) -> None:
    """A token in argv is readable by every local user (ps, /proc/PID/cmdline): refused before any request."""
    assert cli_main(["cache", "--url", gateway.base_url, "--token", TOKEN, "stats"]) == 2
    err = capsys.readouterr().err
    assert "--token-file" in err and TOKEN not in err


def test_zz_a_damaged_cache_file_never_fails_a_request(gateway) -> None:
    """Last in the module: garbage over both cache databases while the gateway runs."""
    cache_dir = Path(gateway.settings.server.data_dir) / "cache"
    for name in ("answers", "faq"):
        with open(cache_dir / name / "cache.db", "r+b") as db_file:
            db_file.write(b"garbage!" * 4096)
    for question in ("What time does the mall open?", "Reply with the single word yes.", "Where is the ATM?"):
        raw = _chat(gateway, question, max_tokens=8)
        assert raw.parse().choices[0].message.content  # answered: from the cache or from the model
    stats = httpx.get(gateway.base_url + "/admin/cache/stats", headers=_admin(gateway))
    assert stats.status_code == 200
    assert _chat(gateway, "Name a colour.", max_tokens=8).parse().choices[0].message.content
