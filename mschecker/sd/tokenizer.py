"""Prompt -> token ids for the text encoder: CLIP's own tokenizer for real pipeline folders, a hash for the bundled
graphs.

``ClipTokenizer`` (``load_clip_tokenizer(folder)``) reads a diffusers/transformers tokenizer folder (``vocab.json``
and ``merges.txt``, or ``tokenizer.json`` alone as transformers >= 5 saves it, optionally gzipped as ``*.gz``;
``tokenizer_config.json``; ``special_tokens_map.json``) and
reproduces transformers' ``CLIPTokenizer`` token for token, as diffusers' pipelines call it:
``tokenizer(prompt, padding="max_length", max_length=model_max_length, truncation=True)`` -> ``[BOS] ids... [EOS]``
truncated to ``model_max_length`` (EOS kept last) and padded with the folder's pad token (SD 1.x: ``<|endoftext|>``,
SD 2.x: ``!``). The BPE itself is the ``tokenizers`` package's, with CLIP's ``</w>`` word ends. Text cleanup comes
in the two variants transformers has shipped, which differ on CJK text, control/format characters and a few
special-token spellings (docs/SD_PIPELINE.md lists them):

- ``cleanup="clip"`` (default): transformers >= 5's ``CLIPTokenizer`` and 4.x's ``CLIPTokenizerFast`` (NFC,
  whitespace runs -> one space, lowercase), which is what diffusers runs with transformers installed today;
- ``cleanup="basic"``: transformers 4.x's Python ``CLIPTokenizer`` when ftfy is not installed (its BasicTokenizer:
  control and format characters dropped, every CJK ideograph its own word, then NFC and lowercase).

Both are verified on a 256-prompt corpus against ids that transformers produced (tests/sd/test_tokenizer.py).

``HashTokenizer`` (the bundled graphs' default, no files needed) is deterministic and documented: the prompt is
lowercased and split into words and single punctuation marks (regex ``[a-z0-9]+|[^\\sa-z0-9]``); each piece maps
to ``zlib.crc32(piece.encode()) % (vocab_size - 2)``; the ids are framed as ``[BOS] pieces... [EOS]`` with
BOS = vocab_size - 2, EOS = vocab_size - 1 (49406 / 49407 for the CLIP vocabulary, as in CLIP), truncated to
``max_length`` (EOS kept last) and padded with EOS to ``max_length`` (SD 1.5's tokenizer pads with EOS).
"""
from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from mschecker.errors import InputError

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

    def overflow(self, text: str) -> int:
        """How many pieces of ``text`` truncation drops (0 when it fits)."""
        return max(0, len(self.pieces(text)) + 2 - self.max_length)




# CLIP's pre-tokenizer pattern (transformers' CLIPTokenizer): special tokens, contractions, letter runs, single
# digits, runs of anything else but whitespace.
_CLIP_PIECES = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
# transformers' BasicTokenizer (the ftfy-less cleanup of 4.x's Python CLIPTokenizer): characters of Unicode
# category C other than tab/newline/CR and U+FFFD are dropped; Zs, tab/newline/CR are spaces, and so are U+2028
# and U+2029 (Python's str.split() splits on them); each CJK ideograph (BERT's ranges) is a word of its own.
_BASIC_DROPPED = r"[\p{C}&&[^\t\n\r]]|\x{FFFD}"
_BASIC_SPACES = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]+"
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
        r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
# Python's str.lower() (the Python tokenizer's) writes a capital sigma that ends a word as final sigma; tokenizers'
# Lowercase maps characters one by one. Unicode's Final_Sigma context, its look-behind cut at three case-ignorable
# characters between the cased letter and the sigma (the regex engine needs a bounded look-behind).
_CI = r"\p{Case_Ignorable}"
_FINAL_SIGMA = (r"(?<=\p{Cased}|\p{Cased}" + _CI + r"|\p{Cased}" + _CI * 2 + r"|\p{Cased}" + _CI * 3 + r")"
                r"\x{03A3}(?!" + _CI + r"*\p{Cased})")
CLEANUPS = ("clip", "basic")
_MAX_LENGTH_LIMIT = 1 << 20  # CLIP text encoders take 77 tokens; padding every prompt to more is a broken config
# transformers' CLIPTokenizer defaults, used where the folder's configs do not name a token; in the order
# transformers registers special tokens (its SPECIAL_TOKENS_ATTRIBUTES: for one text, the later entry's matching
# rule wins)
_DEFAULT_TOKENS = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                   "pad_token": "<|endoftext|>"}


def _read_text(folder: Path, name: str, required: bool) -> tuple[Path, str | None]:
    """``name`` or ``name.gz`` in ``folder`` as text; (path, None) for an absent optional file."""
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            try:
                raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
                return path, raw.decode("utf-8")
            except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
                raise InputError(f"{path}: cannot read the tokenizer file: {exc}") from None
    if required:
        raise InputError(f"{folder / name}: not found (a CLIP tokenizer folder needs vocab.json and merges.txt, or tokenizer.json)")
    return folder / name, None


def _read_json(folder: Path, name: str, required: bool):
    path, text = _read_text(folder, name, required)
    if text is None:
        return path, None
    # lazy: start-up (mschecker.schema)
    from mschecker.schema import parse_json  # invalid JSON, and nesting past the parser's recursion limit: one line

    return path, parse_json(text, str(path))


def _token_entry(value, where: Path, key: str) -> tuple[str, bool]:
    """A token entry is a string or an AddedToken object with ``content``: (content, found in normalized text).
    transformers >= 5 matches a string entry on the raw text and an object as its ``normalized`` says."""
    normalized = False
    if isinstance(value, dict):
        value, normalized = value.get("content"), value.get("normalized", True)
    if not isinstance(value, str) or not value or not isinstance(normalized, bool):
        raise InputError(f"{where}: {key} must be a token string or an object with 'content', got {value!r}")
    return value, normalized


class ClipTokenizer:
    """CLIP's byte-level BPE tokenizer of one pipeline folder (see the module docstring)."""

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], *, max_length: int,
                 special_tokens: dict[str, str] | None = None, normalized_specials: frozenset[str] = frozenset(),
                 cleanup: str = "clip", source: str = "tokenizer"):
        """``special_tokens``: bos/eos/unk/pad_token -> token (CLIPTokenizer's defaults for absent keys);
        ``normalized_specials``: the special tokens that cleanup="clip" also finds in the lowercased text
        (cleanup="basic" finds every special token there, as the Python tokenizer does)."""
        if cleanup not in CLEANUPS:
            raise InputError(f"unknown tokenizer cleanup {cleanup!r}; choose one of {', '.join(CLEANUPS)}")
        if not isinstance(max_length, (int, np.integer)) or isinstance(max_length, bool) or max_length < 2:
            raise InputError(f"{source}: model_max_length must be an integer >= 2, got {max_length!r}")
        if max_length > _MAX_LENGTH_LIMIT:  # transformers saves int(1e30) when no length was set
            raise InputError(f"{source}: model_max_length {max_length} is not a prompt length (transformers' "
                             f"'unset' value?); the text encoder's input length is needed")
        tokens = dict(_DEFAULT_TOKENS, **(special_tokens or {}))
        ids = {}
        for key, token in tokens.items():
            if token not in vocab:
                raise InputError(f"{source}: {key} {token!r} is not in vocab.json")
            ids[key] = vocab[token]
        self.source, self.cleanup, self.max_length = source, cleanup, int(max_length)
        self.vocab_size = len(vocab)
        self.bos, self.eos, self.pad, self.unk = (ids[k] for k in ("bos_token", "eos_token", "pad_token",
                                                                    "unk_token"))
        try:
            model = BPE(vocab=vocab, merges=merges, continuing_subword_prefix="", end_of_word_suffix="</w>",
                        fuse_unk=False, unk_token=tokens["unk_token"])
        except Exception as exc:  # tokenizers raises its own exception types for inconsistent merges
            raise InputError(f"{source}: merges.txt does not fit vocab.json ({exc})") from None
        self._tokenizer = tok = Tokenizer(model)
        self._untruncated: Tokenizer | None = None  # built on first use by overflow()
        split = pre_tokenizers.Split(Regex(_CLIP_PIECES), behavior="removed", invert=True)
        if cleanup == "clip":  # transformers' CLIPTokenizer (>= 5) / CLIPTokenizerFast, component for component
            tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                                   normalizers.Lowercase()])
            tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False)])
        else:
            tok.normalizer = normalizers.Sequence([
                normalizers.Replace(Regex(_BASIC_DROPPED), ""), normalizers.Replace(Regex(_BASIC_SPACES), " "),
                normalizers.NFC(), normalizers.Replace(Regex(_FINAL_SIGMA), "\u03c2"), normalizers.Lowercase()])
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(_CJK), behavior="isolated"), split,
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.add_special_tokens([
            AddedToken(t, normalized=cleanup == "basic" or t in normalized_specials, special=True)
            for t in dict.fromkeys(tokens.values())])
        bos, eos = tokens["bos_token"], tokens["eos_token"]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A {eos}",
                                                           special_tokens=[(bos, self.bos), (eos, self.eos)])
        tok.enable_truncation(self.max_length)
        tok.enable_padding(length=self.max_length, pad_id=self.pad, pad_token=tokens["pad_token"])

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), max_length) int64 ids."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("prompts must be a list of strings")
        return np.array([e.ids for e in self._tokenizer.encode_batch(list(texts))], dtype=np.int64).reshape(
            len(texts), self.max_length)

    def __call__(self, text: str) -> np.ndarray:
        """(max_length,) int64 ids of one prompt (the interface HashTokenizer shares)."""
        return self.encode([text])[0]

    def tokens(self, text: str) -> list[str]:
        """The BPE tokens of ``text`` (``</w>`` marks word ends), framed and padded like the ids."""
        return self._tokenizer.encode(text).tokens

    def overflow(self, text: str) -> int:
        """How many tokens of ``text`` truncation drops (0 when it fits): diffusers warns about them ("The
        following part of your input was truncated because CLIP can only handle sequences up to N tokens")."""
        if self._untruncated is None:
            self._untruncated = Tokenizer.from_str(self._tokenizer.to_str())
            self._untruncated.no_truncation()
            self._untruncated.no_padding()
        return max(0, len(self._untruncated.encode(text).ids) - self.max_length)


def _vocab_and_merges(folder: Path):
    """(vocab, merges, per-token normalized flags of tokenizer.json's added tokens) from vocab.json + merges.txt,
    or from tokenizer.json (what transformers >= 5 saves instead) when the folder has no vocab.json."""
    has_vocab = any((folder / n).is_file() for n in ("vocab.json", "vocab.json.gz"))
    if not has_vocab and any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.json.gz")):
        return _from_tokenizer_json(folder)
    vocab_path, vocab = _read_json(folder, "vocab.json", required=True)
    _check_vocab(vocab, vocab_path)
    merges_path, text = _read_text(folder, "merges.txt", required=True)
    lines = text.splitlines()
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = []
    for number, line in enumerate(lines, start=2):
        if line.strip():
            pair = line.split()
            if len(pair) != 2:
                raise InputError(f"{merges_path}: line {number} is not a merge of two tokens: {line[:60]!r}")
            merges.append((pair[0], pair[1]))
    return vocab, merges, {}


def _check_vocab(vocab, path: Path) -> None:
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                              for k, v in vocab.items()):
        raise InputError(f"{path}: expected an object mapping tokens to integer ids")


def _from_tokenizer_json(folder: Path):
    path, saved = _read_json(folder, "tokenizer.json", required=True)
    model = saved.get("model") if isinstance(saved, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or model.get("end_of_word_suffix") != "</w>":
        raise InputError(f"{path}: not a CLIP tokenizer (expected a BPE model with end_of_word_suffix '</w>')")
    vocab, raw = model.get("vocab"), model.get("merges")
    _check_vocab(vocab, path)
    merges = []
    for merge in raw if isinstance(raw, list) else [None]:
        pair = merge.split() if isinstance(merge, str) else merge  # "a b" (older files) or ["a", "b"]
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise InputError(f"{path}: model.merges must list pairs of tokens, got {merge!r}")
        merges.append((pair[0], pair[1]))
    added = saved.get("added_tokens") or []
    flags = {t["content"]: t["normalized"] for t in added if isinstance(t, dict)
             and isinstance(t.get("content"), str) and isinstance(t.get("normalized"), bool)}
    return vocab, merges, flags


def load_clip_tokenizer(folder: str | Path, *, max_length: int | None = None, cleanup: str = "clip") -> ClipTokenizer:
    """The tokenizer of a diffusers pipeline's ``tokenizer/`` folder: vocab.json + merges.txt (gzipped or not),
    or tokenizer.json alone (transformers >= 5 saves only that), with tokenizer_config.json and
    special_tokens_map.json. ``max_length`` overrides ``model_max_length`` (needed when the folder has none)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: tokenizer folder not found")
    vocab, merges, saved_flags = _vocab_and_merges(folder)
    special: dict[str, str] = {}
    flags: dict[str, bool] = {}
    config_length = None
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # the latter overrides, as in transformers
        path, config = _read_json(folder, name, required=False)
        if config is None:
            continue
        if not isinstance(config, dict):
            raise InputError(f"{path}: expected a JSON object")
        for key in _DEFAULT_TOKENS:
            if config.get(key) is not None:
                special[key], flags[key] = _token_entry(config[key], path, key)
        if name == "tokenizer_config.json":
            config_length = config.get("model_max_length")
    if max_length is None:
        if config_length is None:
            raise InputError(f"{folder / 'tokenizer_config.json'}: no model_max_length (the prompt length)")
        max_length = config_length
    normalized = {}
    for key in _DEFAULT_TOKENS:  # registration order: for one token text the last entry's rule holds
        token = special.get(key, _DEFAULT_TOKENS[key])
        normalized[token] = saved_flags.get(token, flags.get(key, False))
    return ClipTokenizer(vocab, merges, max_length=max_length, special_tokens=special, cleanup=cleanup,
                         normalized_specials=frozenset(t for t, n in normalized.items() if n), source=str(folder))
