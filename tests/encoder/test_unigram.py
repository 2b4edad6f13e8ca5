"""The Unigram tokenizer on a vocabulary the test chose: normalisation, metaspace, the best-scoring
segmentation, unknown characters, truncation, and the JSON form the model directory stores."""

from __future__ import annotations

import numpy as np

from models.encoder.unigram import METASPACE, UnigramTokenizer

M = METASPACE
PIECES = ["<s>", "<pad>", "</s>", "<unk>", M, M + "a", M + "ab", "b", "c", M + "abc", "bc", "A"]
SCORES = [0, 0, 0, 0, -3.0, -2.0, -2.5, -2.0, -2.0, -9.0, -1.0, -2.0]


def _tok(**kw) -> UnigramTokenizer:
    return UnigramTokenizer.build(PIECES, np.asarray(SCORES), {0xFF21: (0x41,), 0x3000: (0x20,)}, 0, 2, 3, **kw)


def test_the_best_scoring_segmentation_wins() -> None:
    tok = _tok()
    # "▁abc": ▁abc alone scores -9; ▁a + bc scores -3; ▁ab + c scores -4.5
    assert [PIECES[i] for i in tok.content_ids("abc")] == [M + "a", "bc"]


def test_spaces_become_metaspace_once_and_a_leading_one_is_added() -> None:
    tok = _tok()
    assert tok.normalized("a  b") == f"{M}a{M}b"
    assert tok.normalized(" a") == f"{M}a"


def test_the_normalisation_map_runs_first() -> None:
    tok = _tok()
    assert tok.normalized("\uff21\u3000a") == f"{M}A{M}a"  # full-width A and an ideographic space


def test_an_uncovered_character_is_unk_at_the_lowest_score_less_ten() -> None:
    tok = _tok()
    assert tok.unk_score == -19.0
    assert tok.content_ids("az") == [5, 3]
    assert _tok(unk_score=-50.0).unk_score == -50.0


def test_special_pieces_are_never_matched_in_text() -> None:
    assert 0 not in _tok().content_ids("<s>") and 2 not in _tok().content_ids("</s>")


def test_encode_wraps_and_truncates() -> None:
    tok = _tok()
    assert tok.encode("a b c", 4) == [0, 5, 4, 2]
    assert tok.encode("", 8) == [0, 4, 2]


def test_the_json_form_gives_the_same_tokenizer() -> None:
    tok = _tok(unk_score=-30.0)
    again = UnigramTokenizer.from_json(tok.to_json())
    for text in ("abc", "a  b\uff21", "zz bc", ""):
        assert again.content_ids(text) == tok.content_ids(text)
    assert again.unk_score == -30.0


def test_the_json_scores_are_the_shortest_that_read_back_as_the_same_float32() -> None:
    rng = np.random.default_rng(3)
    scores = np.concatenate([[0, 0, 0, 0], -rng.random(len(PIECES) - 4) * 20]).astype(np.float32)
    tok = UnigramTokenizer.build(PIECES, scores, {}, 0, 2, 3)
    written = tok.to_json()["scores"]
    assert np.array_equal(np.asarray(written, np.float32), scores)
    assert all(len(repr(s)) <= len(repr(float(x))) for s, x in zip(written, scores, strict=True))
    assert max(len(repr(s).lstrip("-").replace(".", "")) for s in written) <= 9
