"""Fixtures for the fleet tests: an operator workspace, a published repository served over real HTTP
on loopback, small real artifacts (a real ONNX model, a real FAQ pack, a JSON config) and the
embedded GGUF where a test needs a real language model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from models.fleet.agent import Activator, UpdateAgent, UpdateResult
from models.fleet.repo import FleetRepository
from models.store import InstalledVersion

from .rangeserver import RangeServer

SHIPPED_INTENT = Path(__file__).resolve().parents[2] / "models" / "intent" / "default"


def make_onnx(directory: Path) -> Path:
    """A tiny real ONNX graph (used when the shipped intent model is not there)."""
    directory.mkdir(parents=True, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 2], [0.1] * 8)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "intent", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = directory / "intent.onnx"
    onnx.save(model, str(path))
    return path


def intent_files(directory: Path, encoder: bool = False) -> list[Path]:
    """The shipped intent model as a bundle's artefacts. By default the n-gram model alone (its card written
    without the ``encoder`` section): the update mechanics under test do not depend on the model's size, and
    the 26 MB encoder would only slow every bundle down. ``encoder=True``: the whole folder, as
    ``edgecloud fleet build --intent DIR`` takes it."""
    if not ((SHIPPED_INTENT / "intent.onnx").exists() and (SHIPPED_INTENT / "card.json").exists()):
        return [make_onnx(directory)]
    if encoder:
        return sorted(p for p in SHIPPED_INTENT.iterdir() if p.is_file() and p.suffix in (".onnx", ".json"))
    card = json.loads((SHIPPED_INTENT / "card.json").read_text(encoding="utf-8"))
    card.pop("encoder", None)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "card.json").write_text(json.dumps(card), encoding="utf-8")
    return [SHIPPED_INTENT / "intent.onnx", directory / "card.json"]


def faq_pack(path: Path, answer: str = "We open at 9.") -> Path:
    path.write_text(json.dumps({
        "format": "edgecloud-faq", "version": 1, "name": "mall",
        "entries": [{"id": "hours", "lang": "en", "question": "When does the mall open?", "answer": answer,
                     "paraphrases": ["What time does the mall open?"]}],
    }), encoding="utf-8")
    return path


def config_file(path: Path, padding_bytes: int = 0) -> Path:
    """A JSON config; ``padding_bytes`` makes it big enough to be cut or killed mid-download."""
    path.write_text(json.dumps({"system_prompt": "You are a kiosk.", "padding": "x" * padding_bytes}),
                    encoding="utf-8")
    return path


@dataclass
class Operator:
    """The operator side of a test: a workspace and the directory the HTTP server serves."""

    repo: FleetRepository
    work: Path
    public: Path

    def release(
        self,
        version: int,
        *,
        channel: str = "stable",
        hardware: str = "any",
        gguf: Path | None = None,
        faq: Path | None = None,
        config_padding: int = 0,
        min_agent_version: str = "0.1.0",
        publish: bool = True,
    ) -> None:
        src = self.work / f"src-{version}-{hardware}"
        src.mkdir(parents=True, exist_ok=True)
        artifacts: dict[str, list[Path]] = {
            "faq": [faq or faq_pack(src / "faq.json", f"Version {version}: we open at 9.")],
            "config": [config_file(src / "config.json", config_padding)],
            "intent": intent_files(src / "intent"),
        }
        if gguf is not None:
            artifacts["gguf"] = [gguf]
        self.repo.build(version=version, artifacts=artifacts, label=f"v{version}", hardware=hardware,
                        min_agent_version=min_agent_version)
        self.repo.promote(channel, version)
        if publish:
            self.repo.publish(self.public)

    @property
    def root(self) -> Path:
        return self.public / "metadata" / "1.root.json"


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    repo = FleetRepository(tmp_path / "workspace")
    repo.init()
    return Operator(repo, tmp_path, tmp_path / "public")


@pytest.fixture
def server(operator: Operator) -> Iterator[RangeServer]:
    operator.public.mkdir(parents=True, exist_ok=True)
    with RangeServer(operator.public) as srv:
        yield srv


def make_agent(operator: Operator, server: RangeServer, data_dir: Path, **kwargs: object) -> UpdateAgent:
    options: dict = {"reserve_bytes": 0, "check_jitter_s": 0, **kwargs}
    return UpdateAgent(data_dir=data_dir, repository_url=server.url, trusted_root=operator.root, **options)


def run_cycle(agent: UpdateAgent) -> UpdateResult:
    return asyncio.run(agent.check_and_apply())


class RecordingActivator(Activator):
    """A real-enough activator for agent tests: loads the new intent ONNX with onnxruntime and reads the
    FAQ pack, can be told to fail activation or the health check for a given version."""

    def __init__(self, fail_activate: int | None = None, unhealthy: int | None = None) -> None:
        self.fail_activate = fail_activate
        self.unhealthy = unhealthy
        self.activated: list[int] = []
        self._version: int | None = None

    async def activate(self, version: InstalledVersion) -> None:
        import onnxruntime as ort

        await asyncio.to_thread(ort.InferenceSession, str(version.artifacts["intent"]),
                                providers=["CPUExecutionProvider"])
        self.activated.append(version.version)
        if version.version == self.fail_activate:
            raise RuntimeError("the new model did not load")
        self._version = version.version

    async def health_check(self) -> bool:
        return self._version != self.unhealthy
