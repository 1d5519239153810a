"""Instruction tokens: a mission string -> a fixed-length vector of word ids.

Every level of every suite shares one vocabulary, as DMLab-30's language levels do, so
one agent can read all of them. Word ids come from a stable hash (CRC32) of the
lower-cased word rather than from a word list: new levels need no vocabulary edit and
every process agrees on the ids. With ``VOCAB_SIZE = 1024`` buckets and a few hundred
distinct MiniGrid/BabyAI words, collisions are rare, and a collision only merges two
words' embeddings. Id 0 is padding.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

VOCAB_SIZE = 1024
MAX_TOKENS = 32
_WORD = re.compile(r"[a-z]+")


def word_id(word: str) -> int:
    """Id in [1, VOCAB_SIZE - 1] of a lower-cased word: CRC32 modulo the buckets (0 is padding)."""
    return 1 + zlib.crc32(word.encode()) % (VOCAB_SIZE - 1)


def tokenize(mission: str, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """``"go to the red ball"`` -> int64 [max_tokens], zero-padded (truncated if longer)."""
    ids = [word_id(w) for w in _WORD.findall(mission.lower())][:max_tokens]
    out = np.zeros(max_tokens, dtype=np.int64)
    out[: len(ids)] = ids
    return out
