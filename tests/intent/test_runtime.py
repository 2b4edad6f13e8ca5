"""The shipped intent model, loaded the way the gateway loads it (numpy + onnxruntime only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.intent.features import FeatureConfig, featurize, normalize
from models.intent.runtime import DEFAULT_MODEL_DIR, IntentClassifier, IntentResult, probs_runner

ROOT = Path(__file__).resolve().parents[2]

KNOWN = [
    ("prove that sqrt(2) is irrational", "complex"),
    ("写一个校验IPv6的正则", "complex"),
    ("Write a Python function that merges two sorted lists and explain its complexity.", "complex"),
    ("帮我规划一个三天的北京行程，预算两千元，带着老人", "complex"),
    ("where is the nearest restroom?", "simple"),
    ("洗手间在哪里", "simple"),
    ("What time does the pharmacy close?", "simple"),
    ("请问地铁站怎么走？", "simple"),
]


@pytest.fixture(scope="module")
def clf() -> IntentClassifier:
    return IntentClassifier.load()


@pytest.mark.parametrize(("text", "label"), KNOWN)
def test_known_examples(clf: IntentClassifier, text: str, label: str) -> None:
    result = clf.classify(text)
    assert isinstance(result, IntentResult)
    assert result.label == label, result


def test_result_fields(clf: IntentClassifier) -> None:
    result = clf.classify("where can I buy a metro ticket")
    assert set(result.probs) == {"simple", "complex"}
    assert abs(sum(result.probs.values()) - 1.0) < 1e-5
    assert result.confidence == result.probs[result.label]
    assert result.confidence >= 0.5
    assert result.latency_ms > 0


def test_style_is_not_the_signal(clf: IntentClassifier) -> None:
    """Case, '?' and full-width punctuation are normalised away: same text, same probabilities."""
    variants = ["Where is the nearest restroom?", "where is the nearest restroom", "WHERE IS THE NEAREST RESTROOM？"]
    probs = [clf.classify(v).probs["complex"] for v in variants]
    assert max(probs) - min(probs) < 1e-6


def test_empty_and_huge_inputs(clf: IntentClassifier) -> None:
    assert clf.classify("").label in {"simple", "complex"}
    long_paste = "Summarize this report:\n" + ("The committee reviewed the budget and the audit findings. " * 2000)
    assert clf.classify(long_paste).label == "complex"


def test_card(clf: IntentClassifier) -> None:
    card = clf.card
    assert card["labels"] == ["simple", "complex"]
    assert card["version"] == clf.version
    assert len(card["training_data"]["sha256"]) == 64
    assert 0.5 <= card["thresholds"]["simple_min_confidence"] < 1.0
    assert clf.confidence_threshold == card["thresholds"]["simple_min_confidence"]
    # The threshold split is the dev set: its figures, per language, are in the card.
    split = card["metrics"]["threshold_split"]["routing"]
    assert split["all"]["n"] > 0 and split["all"]["accuracy"] > 0.9
    assert {"en", "zh"} <= set(split)
    # the card is a copy: callers cannot change the loaded model's view of itself
    card["version"] = "tampered"
    assert clf.version != "tampered"


def test_shipped_model_is_small() -> None:
    """The whole model folder a fleet update moves, both stages and their card, stays at 30 MB or less; the
    n-gram stage's int8 first layer is 4.7 MB of it."""
    files = [p for p in DEFAULT_MODEL_DIR.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 30_000_000
    assert (DEFAULT_MODEL_DIR / "intent.onnx").stat().st_size < 5_000_000


def test_the_binding_run_gives_the_public_runs_probabilities(clf: IntentClassifier) -> None:
    """A CPU-only session runs through the binding's own ``run``: the same numbers as the public one."""
    session = clf._session
    assert session.get_providers() == ["CPUExecutionProvider"] and callable(session._sess.run)
    for text, _ in KNOWN:
        idx, val = featurize(text, clf._features)
        feed = {"indices": idx, "values": val}
        assert clf._run(feed)[0].tobytes() == session.run(["probs"], feed)[0].tobytes()



def test_the_real_session_is_run_through_its_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the shipped model the binding's run agrees at load, so requests no longer go through the public run."""
    session = IntentClassifier.load()._session
    calls = []
    public = session.run
    monkeypatch.setattr(session, "run", lambda *args: calls.append(1) or public(*args))
    idx, val = featurize("where is gate B12?", FeatureConfig())
    run = probs_runner(session, {"indices": idx, "values": val})
    assert len(calls) == 1  # the probe's comparison
    run({"indices": idx, "values": val})
    assert len(calls) == 1


class _Session:
    """An InferenceSession's face: providers, a public ``run`` and maybe the binding's; counts the calls."""

    def __init__(self, providers: list[str], binding: object = None) -> None:
        self._providers = providers
        self.public_calls = 0
        if binding is not None:
            self._sess = binding

    def get_providers(self) -> list[str]:
        return self._providers

    def run(self, names: list[str], feed: dict) -> list[np.ndarray]:
        self.public_calls += 1
        return [np.array([0.25, 0.75], dtype=np.float32)]


class _Binding:
    def __init__(self, answer: tuple[float, ...] | None = (0.25, 0.75)) -> None:
        self.answer = answer
        self.calls = 0

    def run(self, names: list[str], feed: dict, options: object) -> list[np.ndarray]:
        self.calls += 1
        if self.answer is None:
            raise TypeError("run() takes 2 positional arguments")  # a binding whose signature changed
        return [np.array(self.answer, dtype=np.float32)]


@pytest.mark.parametrize(("providers", "binding", "used"), [
    (["CPUExecutionProvider"], _Binding(), "binding"),
    (["CPUExecutionProvider"], None, "public"),  # another onnxruntime: no binding attribute
    (["CPUExecutionProvider"], object(), "public"),  # a binding without run
    (["CPUExecutionProvider"], _Binding(None), "public"),  # a binding whose call fails
    (["CPUExecutionProvider"], _Binding((0.5, 0.5)), "public"),  # a binding that answers otherwise
    (["CUDAExecutionProvider", "CPUExecutionProvider"], _Binding(), "public"),  # may fail over: public run
])
def test_the_public_run_unless_cpu_only_with_a_binding_that_agrees(providers: list[str], binding: object,
                                                                   used: str) -> None:
    session = _Session(providers, binding)
    run = probs_runner(session, {})
    public_before, binding_before = session.public_calls, getattr(binding, "calls", 0)
    run({})
    assert (session.public_calls - public_before, getattr(binding, "calls", 0) - binding_before) == \
        ((0, 1) if used == "binding" else (1, 0))


def test_provider_falls_back_to_cpu() -> None:
    clf = IntentClassifier.load(providers=["CUDAExecutionProvider"])  # not in the CPU build of onnxruntime
    assert clf.provider == "CPUExecutionProvider"
    assert clf.classify("洗手间在哪里").label == "simple"


def test_feature_hashing_is_stable_across_processes() -> None:
    """Python's hash() is salted per process; the features must not be."""
    code = (
        "import json; from models.intent.features import FeatureConfig, featurize;"
        "i, v = featurize('Where is gate B12? 登机口', FeatureConfig());"
        "print(json.dumps([i.tolist(), [round(float(x), 6) for x in v]]))"
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.append(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert outs[0] == outs[1]
    idx, _val = featurize("Where is gate B12? 登机口", FeatureConfig())
    assert json.loads(outs[0])[0] == idx.tolist()


def test_normalize_removes_style() -> None:
    assert normalize("Where Is The ATM？！") == "where is the atm"
    assert normalize("ＡＢＣ，你好。") == "abc 你好"
    assert normalize("os.path.join(a, b)") == "os.path.join(a b)"


def test_runtime_and_cli_import_no_training_stack() -> None:
    code = (
        "import sys, models.cli, models.intent.runtime;"
        "bad = [m for m in ('sklearn', 'scipy', 'onnx', 'skl2onnx') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
