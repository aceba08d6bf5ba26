"""Prompt -> token ids for the bundled text encoder.

``HashTokenizer`` (the default, no files needed) is deterministic and documented: the prompt is lowercased and
split into words and single punctuation marks (regex ``[a-z0-9]+|[^\\sa-z0-9]``); each piece maps to
``zlib.crc32(piece.encode()) % (vocab_size - 2)``; the ids are framed as ``[BOS] pieces... [EOS]`` with
BOS = vocab_size - 2, EOS = vocab_size - 1 (49406 / 49407 for the CLIP vocabulary, as in CLIP), truncated to
``max_length`` (EOS kept last) and padded with EOS to ``max_length`` (SD 1.5's tokenizer pads with EOS).

``ClipBPETokenizer`` reads CLIP's own ``vocab.json`` and ``merges.txt`` (byte-level BPE with ``</w>`` word ends)
when the user supplies them, giving the real CLIP ids (text cleanup by ftfy is not applied: whitespace is
collapsed and the text lowercased).
"""
from __future__ import annotations

import json
import re
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import InputError

_WORDS = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def _frame(ids: list[int], bos: int, eos: int, max_length: int) -> np.ndarray:
    body = ids[: max_length - 2]
    framed = [bos, *body, eos]
    return np.array(framed + [eos] * (max_length - len(framed)), dtype=np.int64)


class HashTokenizer:
    """The default deterministic tokenizer (see the module docstring)."""

    def __init__(self, vocab_size: int, max_length: int):
        if vocab_size < 3 or max_length < 2:
            raise InputError(f"tokenizer needs vocab_size >= 3 and max_length >= 2, got {vocab_size}, {max_length}")
        self.vocab_size, self.max_length = vocab_size, max_length
        self.bos, self.eos = vocab_size - 2, vocab_size - 1

    def pieces(self, text: str) -> list[str]:
        return _WORDS.findall(text.lower())

    def __call__(self, text: str) -> np.ndarray:
        ids = [zlib.crc32(p.encode("utf-8")) % (self.vocab_size - 2) for p in self.pieces(text)]
        return _frame(ids, self.bos, self.eos, self.max_length)


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible byte -> printable unicode map."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes)))


# CLIP's pre-tokenizer pattern with Python-re classes for \p{L} (letters) and \p{N} (digits)
_CLIP_PIECES = re.compile(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|[^\s\w]+|_+",
                          re.IGNORECASE)


class ClipBPETokenizer:
    """CLIP's byte-level BPE from ``vocab.json`` + ``merges.txt`` (the files of openai/clip-vit-large-patch14)."""

    def __init__(self, vocab_path: str | Path, merges_path: str | Path, max_length: int = 77):
        try:
            self.encoder = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
            lines = Path(merges_path).read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read CLIP tokenizer files {vocab_path}, {merges_path}: {exc}") from None
        merges = [tuple(line.split()) for line in lines if line and not line.startswith("#version")]
        if not isinstance(self.encoder, dict) or any(len(m) != 2 for m in merges):
            raise InputError(f"{vocab_path} / {merges_path} are not CLIP vocab.json / merges.txt files")
        self.ranks = {m: i for i, m in enumerate(merges)}
        try:
            self.bos, self.eos = self.encoder["<|startoftext|>"], self.encoder["<|endoftext|>"]
        except KeyError:
            raise InputError(f"{vocab_path} lacks <|startoftext|> / <|endoftext|>") from None
        self.max_length = max_length
        self._cache: dict[str, list[str]] = {}

    def _bpe(self, word: str) -> list[str]:
        if word in self._cache:
            return self._cache[word]
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            pairs = {(a, b) for a, b in zip(parts, parts[1:])}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        self._cache[word] = parts
        return parts

    def __call__(self, text: str) -> np.ndarray:
        text = " ".join(text.split()).lower()
        table = _byte_to_unicode()
        ids = []
        for piece in _CLIP_PIECES.findall(text):
            mapped = "".join(table[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self._bpe(mapped) if t in self.encoder)
        return _frame(ids, self.bos, self.eos, self.max_length)
