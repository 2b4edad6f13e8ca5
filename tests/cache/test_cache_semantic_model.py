"""The embedding model's pieces: the WordPiece tokenizer against known BERT ids, unit vectors."""

from __future__ import annotations

import numpy as np
import pytest

from edge.cache.wordpiece import WordPiece

from .conftest import needs_embedding_model


def test_wordpiece_matches_bert_uncased_ids() -> None:
    tokenizer = WordPiece.load()
    assert tokenizer.encode("Hello, world!") == [101, 7592, 1010, 2088, 999, 102]
    assert tokenizer.encode("Café") == [101, 7668, 102]  # lower-cased, accent stripped
    assert tokenizer.encode("unaffable") == [101, 14477, 20961, 3468, 102]
    assert tokenizer.encode("的") == [101, tokenizer.vocab["的"], 102]  # CJK split per character
    assert len(WordPiece.load(max_length=8).encode("word " * 50)) == 8


@needs_embedding_model
@pytest.mark.slow
def test_embeddings_are_unit_vectors_and_rank_paraphrases_first() -> None:
    from edge.cache.semantic import Embedder

    embedder = Embedder()
    vectors = embedder.embed(["where is the restroom", "where's the restroom", "how much is parking"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert embedder.unknown_share("商场几点开门") > 0.3 > embedder.unknown_share("when does the mall open")
