"""Streaming replay: chunks like a model's (words, 1-2 CJK characters) that join back exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edge.cache import replay_chunks


def test_english_goes_out_word_by_word() -> None:
    assert replay_chunks("The mall opens at 10:00.") == ["The", " mall", " opens", " at", " 10:00."]


def test_chinese_goes_out_in_small_groups() -> None:
    chunks = replay_chunks("商场每天上午10点开门，周末也一样。")
    assert "".join(chunks) == "商场每天上午10点开门，周末也一样。"
    assert len(chunks) >= 8 and all(1 <= len(c.strip()) <= 2 for c in chunks)


def test_mixed_text_and_whitespace_survive() -> None:
    text = "  Wi-Fi: \"Mall-Guest\"\n\n请连接 Mall-Guest 网络。 \t"
    assert "".join(replay_chunks(text)) == text
    assert replay_chunks("") == []


@given(st.text(max_size=200))
def test_chunks_always_join_back(text: str) -> None:
    chunks = replay_chunks(text)
    assert "".join(chunks) == text
    assert all(chunks)
