"""``_textfeatures.c`` built as the Jetson builds it: ``char`` unsigned, warnings as errors.

The module is compiled at install on the device (aarch64, JetPack's GCC), where the ABI makes a plain ``char``
unsigned; on x86-64, where the suite runs, it is signed. No aarch64 machine is at hand, so this rebuilds the
module from its source with ``-funsigned-char`` (and ``-Wall -Wextra -Werror``, so that a warning another
compiler would print fails here first), loads that build beside the installed one and compares: the text
features (``featurize``, the router's whole path) and the English cue scan of every shipped text against the
installed build, which the other tests hold to the Python and numpy spelling, and random text against that
spelling itself. A difference in how the source reads a byte would show as a feature or a cue that differs.

What this does not show: the module running on an aarch64 CPU (alignment, the compiler's own code), which only
the device can (docs/intent.md, *Limitations*, says what was checked instead).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.intent import cues, features
from models.intent.cues import CUE_VERSIONS, TABLES, _count_numbers, _english_cues
from models.intent.features import FeatureConfig, featurize, normalize
from tests.intent.test_features_equivalence import TEXTS

SOURCE = Path(features.__file__).with_name("_textfeatures.c")
CONFIGS = [FeatureConfig(), FeatureConfig(version=2), FeatureConfig(dim=1000, char_ngrams=(2, 2, 5))]


def _compiler() -> list[str] | None:
    """The compiler the install uses (sysconfig's CC), else any ``cc`` on the path."""
    cc = (sysconfig.get_config_var("CC") or "").split()
    if cc and shutil.which(cc[0]):
        return cc
    return [found] if (found := shutil.which("cc") or shutil.which("gcc")) else None


@pytest.fixture(scope="module")
def unsigned_char_build(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler: the install falls back to the Python spelling, which the other tests cover")
    out = tmp_path_factory.mktemp("uchar") / ("_textfeatures" + importlib.machinery.EXTENSION_SUFFIXES[0])
    command = [*cc, "-shared", "-fPIC", "-O2", "-funsigned-char", "-Wall", "-Wextra", "-Werror",
               f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(out)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stderr
    spec = importlib.util.spec_from_file_location("_textfeatures", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _featurize_with(module: ModuleType | None, texts: list[str], config: FeatureConfig) -> list[tuple[bytes, bytes]]:
    """``featurize`` (the router's whole feature path: both views, cues, shape) with ``module`` as the C
    spelling, or the Python and numpy spelling for None."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(features, "_textfeatures", module)
        patch.setattr(cues, "_textfeatures", module)
        return [tuple(part.tobytes() for part in featurize(text, config)) for text in texts]


def _assert_same_cues(module: ModuleType, norm: str, version: int) -> None:
    t = TABLES[version]
    found, numbers = module.cue_scan(norm, *t.scan_args)
    assert found == _english_cues(norm, t), norm
    assert numbers == _count_numbers(norm, t), norm


@pytest.mark.parametrize("config", CONFIGS, ids=["shipped", "version-2", "odd"])
def test_shipped_texts_give_the_same_features(unsigned_char_build: ModuleType, config: FeatureConfig) -> None:
    """Against the installed build, which ``test_features_equivalence`` holds to the specification on the same
    texts (the Python spelling here would cost the suite half a minute)."""
    texts = TEXTS if config == FeatureConfig() else TEXTS[::8]  # the other layouts on an eighth
    built = _featurize_with(unsigned_char_build, texts, config)
    installed = _featurize_with(features._textfeatures, texts, config)
    assert [i for i, (a, b) in enumerate(zip(built, installed, strict=True)) if a != b] == []


@pytest.mark.parametrize("version", CUE_VERSIONS)
def test_shipped_texts_give_the_same_cues(unsigned_char_build: ModuleType, version: int) -> None:
    args = TABLES[version].scan_args
    for norm in map(normalize, TEXTS):
        assert unsigned_char_build.cue_scan(norm, *args) == features._textfeatures.cue_scan(norm, *args), norm


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=160) | st.text("ab é中文1+{\x7f\x80ÿ", max_size=200))
def test_random_text_gives_the_same_features_and_cues(unsigned_char_build: ModuleType, text: str) -> None:
    config = FeatureConfig()
    assert _featurize_with(unsigned_char_build, [text], config) == _featurize_with(None, [text], config)
    for version in CUE_VERSIONS:
        _assert_same_cues(unsigned_char_build, normalize(text), version)

