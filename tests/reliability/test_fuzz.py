"""Fuzzing: schemathesis against the gateway's own OpenAPI document, hypothesis against the parsers.

Bounded for CI: ``EDGECLOUD_FUZZ_EXAMPLES`` (default 25) cases per API operation and per generation
mode (valid and invalid inputs), and ``EDGECLOUD_FUZZ_PROPERTY_EXAMPLES`` (default 100) per property.
The full run (a few thousand API cases) is::

    EDGECLOUD_FUZZ_EXAMPLES=400 EDGECLOUD_FUZZ_PROPERTY_EXAMPLES=5000 \\
        .venv/bin/python -m pytest tests/reliability/test_fuzz.py -q

What must hold: no 5xx other than a clean 503 (a backend busy or a feature off), every error in the
OpenAI shape without a traceback; the SSE parser gives the same events however the bytes are split
and never holds more than the unfinished line; the cache key normaliser is idempotent and keeps
every letter and digit; the manifest parsers and the repository verifier refuse anything malformed
with their own error (never a crash, never a path that escapes a folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from reliability.kiosk import check_error_shape
from reliability.support import cloud_section, register_secret

from cloud_bridge.sse import SSEParser
from edge.cache.keys import normalize_text
from harness import GatewayHandle, make_settings, run_gateway
from models.fleet.bundle import ArtifactInfo, BundleError, ChannelManifest

API_EXAMPLES = int(os.environ.get("EDGECLOUD_FUZZ_EXAMPLES", "25"))
PROPERTY_EXAMPLES = int(os.environ.get("EDGECLOUD_FUZZ_PROPERTY_EXAMPLES", "100"))
ADMIN_TOKEN = register_secret("fuzz-admin-token-" + "0123456789abcdef")
PROPS = settings(max_examples=PROPERTY_EXAMPLES, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- the HTTP API


@pytest.fixture(scope="module")
def fuzz_gw(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path,
            fake_cloud: Any) -> Iterator[GatewayHandle]:
    """Short answers (max_tokens <= 4) so hundreds of valid chat requests stay cheap."""
    settings_ = make_settings(
        tmp_path_factory.mktemp("fuzz"),
        server={"admin_token": ADMIN_TOKEN, "api_docs": True},
        edge={"max_tokens_limit": 4, "default_max_tokens": 4, "max_queue": 4},
        cloud=cloud_section(fake_cloud.base_url),
    )
    with run_gateway(settings_) as gw:
        yield gw


def _operations(gw: GatewayHandle) -> list[Any]:
    import schemathesis

    schema = schemathesis.openapi.from_url(gw.base_url + "/openapi.json")
    ops = []
    for result in schema.get_all_operations():
        ops.append(result.ok())  # an operation schemathesis cannot read is itself a failure
    return ops


@pytest.mark.slow
def test_openapi_lists_every_public_endpoint(fuzz_gw: GatewayHandle) -> None:
    doc = httpx.get(fuzz_gw.base_url + "/openapi.json", timeout=10).json()
    paths = set(doc["paths"])
    for expected in ("/v1/chat/completions", "/v1/models", "/v1/route", "/healthz", "/readyz"):
        assert expected in paths, paths


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("auth", ["token", "none"])
def test_schemathesis_no_server_errors(fuzz_gw: GatewayHandle, mode: str, auth: str) -> None:
    from schemathesis import GenerationMode

    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"} if auth == "token" else {}
    failures: list[str] = []
    seen_status: dict[int, int] = {}
    ops = _operations(fuzz_gw)
    assert len(ops) >= 5
    # POST /admin/update would start real update cycles; the fleet agent is off here (503), still fuzzed.
    for op in ops:
        strategy = op.as_strategy(generation_mode=generation)

        @settings(max_examples=API_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case: Any) -> None:
            response = case.call(base_url=fuzz_gw.base_url, headers=headers, timeout=60)
            seen_status[response.status_code] = seen_status.get(response.status_code, 0) + 1
            problem = _judge(response.status_code, response.content, response.headers)
            if problem:
                failures.append(f"{case.method} {case.path} -> {problem}\n  {case.as_curl_command()[:600]}")

        try:
            run()
        except Unsatisfiable:
            # Negative mode on an operation with no inputs (GET /healthz): nothing can be invalid.
            assert generation == GenerationMode.NEGATIVE, op.label
            continue
    print(f"schemathesis {mode}/{auth}: statuses {dict(sorted(seen_status.items()))}")
    assert not failures, "\n".join(failures[:10])
    assert sum(seen_status.values()) >= len(ops) * min(API_EXAMPLES, 5)
    if auth == "none" and mode == "positive":
        # Admin routes were reached without the token: every one of them refused.
        assert seen_status.get(401, 0) > 0, seen_status


def _judge(status: int, content: bytes, headers: Any) -> str | None:
    """What is wrong with one response, or None."""
    text = content.decode("utf-8", "replace")
    if "Traceback (most recent call last)" in text:
        return f"{status} with a traceback"
    if status >= 500 and status != 503:
        return f"{status}: {text[:300]}"
    ctype = str(headers.get("content-type", "")) if hasattr(headers, "get") else ""
    if status >= 400:
        try:
            problems = check_error_shape(json.loads(content)["error"])
        except (ValueError, KeyError, TypeError):
            return f"{status} not an OpenAI error ({ctype}): {text[:200]}"
        if problems:
            return f"{status}: {problems}"
    return None


# --------------------------------------------------------------------------- SSE parser

_line_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=40)
_newline = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def sse_streams(draw: Any) -> tuple[bytes, list[str]]:
    """A valid SSE stream (comments, ``event:`` lines, multi-line data; one line-end style per
    stream, as a CR then an LF would be one CRLF) and the data of each event it carries."""
    nl = draw(_newline)
    events = draw(st.lists(st.lists(_line_text, min_size=1, max_size=3), max_size=6))
    out: list[str] = []
    expected: list[str] = []
    for lines in events:
        if draw(st.booleans()):
            out.append(": keep-alive" + nl)
        if draw(st.booleans()):
            out.append("event: message" + nl)
        values = []
        for line in lines:
            value = draw(st.sampled_from(["", " "])) + line
            out.append("data:" + value + nl)
            values.append(value[1:] if value.startswith(" ") else value)  # one leading space goes
        out.append(nl)
        expected.append("\n".join(values))
    return "".join(out).encode("utf-8"), expected


@PROPS
@given(stream=sse_streams(), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_sse_split_anywhere_same_events(stream: tuple[bytes, list[str]], cuts: list[int]) -> None:
    raw, expected = stream
    assert [e.data for e in SSEParser().feed(raw)] == expected
    points = sorted({c % (len(raw) + 1) for c in cuts})
    parser = SSEParser()
    got: list[str] = []
    start = 0
    for point in [*points, len(raw)]:
        got += [e.data for e in parser.feed(raw[start:point])]
        start = point
    assert got == expected
    assert parser.pending_bytes == 0


def test_sse_empty_read_between_cr_and_lf() -> None:
    parser = SSEParser()
    got = parser.feed(b"data: a\r") + parser.feed(b"") + parser.feed(b"\ndata: b\r\n\r\n")
    assert [e.data for e in got] == ["a\nb"]


@PROPS
@given(data=st.binary(max_size=4096), split=st.integers(min_value=0, max_value=4096))
def test_sse_arbitrary_bytes_never_crash_and_stay_bounded(data: bytes, split: int) -> None:
    parser = SSEParser()
    split %= len(data) + 1
    events = parser.feed(data[:split]) + parser.feed(data[split:])
    for event in events:
        assert isinstance(event.data, str)
    # What it holds is at most the input (an unfinished line + an unfinished event's data).
    assert parser.pending_bytes <= len(data) * 3 + 3  # replacement chars may be 3 bytes per input byte


# --------------------------------------------------------------------------- cache key normaliser


@PROPS
@given(text=st.text(max_size=200))
def test_normalize_idempotent_and_total(text: str) -> None:
    once = normalize_text(text)
    assert isinstance(once, str)
    assert normalize_text(once) == once
    assert once == once.strip() and "  " not in once


_ascii_question = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=120)


@PROPS
@given(text=_ascii_question)
def test_normalize_keeps_every_letter_and_digit(text: str) -> None:
    """It folds case, spaces and punctuation, never a word or a number: 'open' != 'close', '3' != '5'."""
    norm = normalize_text(text)
    assert [c for c in norm if c.isalnum()] == [c for c in text.lower() if c.isalnum()]
    assert normalize_text(text.upper()) == norm


@PROPS
@given(text=_ascii_question, a=st.integers(0, 9), b=st.integers(0, 9))
def test_normalize_never_merges_different_numbers(text: str, a: int, b: int) -> None:
    if a != b:
        assert normalize_text(f"{text} {a}") != normalize_text(f"{text} {b}")


# --------------------------------------------------------------------------- manifest verifier

_SAFE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                          st.text(max_size=20))
_json_values = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)


@st.composite
def manifests(draw: Any) -> bytes:
    name = st.one_of(st.sampled_from(["stable", "../etc", "a/b", "", "..", "Kiosk", "x" * 80]),
                     st.text(max_size=12))
    entry = st.fixed_dictionaries({}, optional={
        "bundle": name, "version": st.one_of(st.integers(-3, 10**12), st.text(max_size=5), st.booleans()),
        "label": _json_values, "hardware": name, "targets": st.one_of(st.lists(st.text(max_size=30)),
                                                                      _json_values)})
    body = draw(st.fixed_dictionaries({}, optional={
        "channel": name, "bundles": st.one_of(st.lists(entry, max_size=3), _json_values)}))
    if draw(st.booleans()):
        return json.dumps(body).encode()
    return draw(st.one_of(st.binary(max_size=200), st.just(json.dumps(body).encode()[: draw(st.integers(0, 50))])))


@PROPS
@given(data=manifests())
def test_channel_manifest_refuses_or_is_safe(data: bytes) -> None:
    try:
        manifest = ChannelManifest.from_bytes(data)
    except BundleError:
        return
    assert _SAFE.match(manifest.channel)
    for entry in manifest.entries:
        assert _SAFE.match(entry.bundle) and _SAFE.match(entry.hardware)
        assert isinstance(entry.version, int)


@PROPS
@given(custom=st.one_of(_json_values, st.fixed_dictionaries({"edgecloud": st.fixed_dictionaries({}, optional={
    "bundle": st.text(max_size=12), "version": st.one_of(st.integers(-2, 5), st.booleans(),
                                                         st.text("0123456789", min_size=1, max_size=3)),
    "label": st.text(max_size=5), "kind": st.sampled_from(["gguf", "faq", "intent", "config", "exe", ""]),
    "hardware": st.sampled_from(["any", "orin-nx", "../x", ""]), "min_agent_version": st.text(max_size=8),
    "file_name": st.sampled_from(["model.gguf", "../../x", "..", ".hidden", "a/b", "ok.json", ""])})})))
def test_artifact_info_refuses_or_is_safe(custom: Any) -> None:
    try:
        info = ArtifactInfo.from_custom(custom)
    except BundleError:
        return
    assert "/" not in info.file_name and info.file_name not in (".", "..") and not info.file_name.startswith(".")
    assert _SAFE.match(info.bundle) and _SAFE.match(info.hardware)
    assert info.version >= 1 and info.kind in ("gguf", "intent", "faq", "config")


@pytest.mark.parametrize("version", ["", "v1", None, [1]])
def test_artifact_info_bad_version_is_a_bundle_error(version: Any) -> None:
    custom = {"edgecloud": {"bundle": "kiosk", "version": version, "label": "x", "kind": "gguf",
                            "hardware": "any", "min_agent_version": "0.1.0", "file_name": "m.gguf"}}
    try:
        ArtifactInfo.from_custom(custom)
    except BundleError:
        return
    except (ValueError, TypeError):
        raise
    pytest.fail("accepted a non-integer version")


@pytest.fixture(scope="module")
def published_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.fleet.repo import FleetRepository

    work = tmp_path_factory.mktemp("fleet")
    repo = FleetRepository(work / "workspace")
    repo.init()
    cfg = work / "config.json"
    cfg.write_text(json.dumps({"system_prompt": "You are a kiosk."}), encoding="utf-8")
    repo.build(version=1, artifacts={"config": [cfg]}, label="v1")
    repo.promote("stable", 1)
    repo.publish(work / "public")
    return work / "public"


@pytest.mark.slow
@settings(max_examples=max(20, PROPERTY_EXAMPLES // 10), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(pick=st.integers(min_value=0), offset=st.integers(min_value=0), junk=st.binary(min_size=1, max_size=16))
def test_verifier_refuses_tampered_repository(published_repo: Path, tmp_path_factory: pytest.TempPathFactory,
                                              pick: int, offset: int, junk: bytes) -> None:
    """Overwrite a few bytes of any published file: the verifier reports it (or the bytes did not
    change what is signed), and never crashes."""
    from models.fleet.verify import verify_published

    work = tmp_path_factory.mktemp("tamper")
    repo = work / "public"
    shutil.copytree(published_repo, repo)
    files = sorted(p for p in repo.rglob("*") if p.is_file() and p.name != "1.root.json")
    victim = files[pick % len(files)]
    data = bytearray(victim.read_bytes())
    at = offset % max(1, len(data))
    before = bytes(data)
    data[at:at + len(junk)] = junk
    victim.write_bytes(bytes(data))
    report = verify_published(repo, published_repo / "metadata" / "1.root.json")
    if bytes(data) != before and not _same_signed_json(before, bytes(data)):
        assert not report.ok, (victim.relative_to(repo), report.lines)
    shutil.rmtree(work, ignore_errors=True)


def _same_signed_json(a: bytes, b: bytes) -> bool:
    """True when both parse to the same JSON (a whitespace-only change; the signatures still hold)."""
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return False


def test_verifier_accepts_the_untouched_repository(published_repo: Path) -> None:
    from models.fleet.verify import verify_published

    report = verify_published(published_repo, published_repo / "metadata" / "1.root.json")
    assert report.ok, report.lines


def test_verifier_refuses_a_changed_artifact(published_repo: Path, tmp_path: Path) -> None:
    from models.fleet.verify import verify_published

    repo = tmp_path / "public"
    shutil.copytree(published_repo, repo)
    artifact = next(p for p in (repo / "targets").rglob("*") if p.is_file())
    artifact.write_bytes(artifact.read_bytes().replace(b"kiosk", b"KIOSK"))
    report = verify_published(repo, published_repo / "metadata" / "1.root.json")
    assert not report.ok and any("FAIL" in line for line in report.lines), report.lines
