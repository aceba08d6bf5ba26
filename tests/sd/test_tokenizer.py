"""The default hash tokenizer (documented, deterministic) and CLIP's BPE on a small hand-made vocabulary."""
import json
import zlib

import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd.tokenizer import ClipBPETokenizer, HashTokenizer


def test_hash_tokenizer_documented_ids():
    tok = HashTokenizer(49408, 8)
    ids = tok("A Photo, of cats")
    words = ["a", "photo", ",", "of", "cats"]
    expected = [49406] + [zlib.crc32(w.encode()) % 49406 for w in words] + [49407, 49407]
    np.testing.assert_array_equal(ids, expected)
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(tok("a photo , OF   cats"), ids)  # case and spacing do not matter


def test_hash_tokenizer_truncates_keeping_eos_and_pads_empty():
    tok = HashTokenizer(1000, 5)
    ids = tok("one two three four five")
    assert len(ids) == 5 and ids[0] == 998 and ids[-1] == 999
    np.testing.assert_array_equal(tok(""), [998, 999, 999, 999, 999])
    assert (tok("many words here")[1:4] < 998).all()


@pytest.fixture()
def bpe_files(tmp_path):
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "c": 2, "a": 3, "t": 4, "t</w>": 5, "ca": 6, "cat</w>": 7,
             "s</w>": 8, "cat": 9, ",</w>": 10}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nc a\nca t</w>\nca t\n")
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


def test_clip_bpe_merges_by_rank(bpe_files):
    tok = ClipBPETokenizer(*bpe_files, max_length=8)
    # "cat" -> c a t</w> -> ca t</w> -> cat</w>;  "cats" -> c a t s</w> -> ca t s</w> -> cat s</w>
    np.testing.assert_array_equal(tok("Cat cats,"), [0, 7, 9, 8, 10, 1, 1, 1])


def test_clip_bpe_bad_files_are_input_errors(tmp_path, bpe_files):
    with pytest.raises(InputError):
        ClipBPETokenizer(tmp_path / "missing.json", bpe_files[1])
    (tmp_path / "bad.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(InputError, match="startoftext"):
        ClipBPETokenizer(tmp_path / "bad.json", bpe_files[1])
