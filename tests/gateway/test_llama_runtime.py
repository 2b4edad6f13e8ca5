"""Opening the real llama.cpp model with CPU kernels that work here (models/llama_runtime.py).

The AMX kernel of llama.cpp segfaults on the first token on this project's Sapphire Rapids machines;
these tests pin the detection and check that the embedded model generates under the default setting.
"""

from __future__ import annotations

import llama_cpp.llama_cpp as lib
import pytest

from edge.local_model import find_embedded_model
from models.llama_runtime import cpu_flags, cpu_has_amx, open_llama, use_extra_buffer_types

SAPPHIRE_RAPIDS = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
ORIN = "processor\t: 0\nBogoMIPS\t: 62.50\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"


def test_flags_are_read_from_x86_and_arm_cpuinfo() -> None:
    assert "amx_int8" in cpu_flags(SAPPHIRE_RAPIDS)
    assert "avx2" in cpu_flags(EPYC)
    assert "asimd" in cpu_flags(ORIN)
    assert cpu_flags("") == set()


@pytest.mark.parametrize(
    ("cpuinfo", "setting", "expected"),
    [
        (SAPPHIRE_RAPIDS, "auto", False),  # the crashing AMX kernel is avoided
        (EPYC, "auto", True),  # everywhere else llama.cpp keeps its repacked kernels
        (ORIN, "auto", True),
        (SAPPHIRE_RAPIDS, "on", True),  # the operator can insist
        (EPYC, "off", False),
    ],
)
def test_extra_buffer_types_setting(cpuinfo: str, setting: str, expected: bool) -> None:
    assert cpu_has_amx(cpuinfo) is (cpuinfo is SAPPHIRE_RAPIDS)
    assert use_extra_buffer_types(setting, cpuinfo) is expected  # type: ignore[arg-type]


def test_the_embedded_model_generates_with_the_default_setting() -> None:
    path = find_embedded_model()
    assert path is not None
    before = lib.llama_model_default_params
    llm = open_llama(path, n_ctx=256, n_threads=1, verbose=False)
    assert lib.llama_model_default_params is before  # the library's function is put back
    assert llm.model_params.use_extra_bufts is use_extra_buffer_types("auto")
    out = llm.create_completion("Hello", max_tokens=2, temperature=0.0)
    assert out["usage"]["completion_tokens"] >= 1
