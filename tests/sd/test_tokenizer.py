"""Tokenizers: CLIP's real BPE against transformers' ids on a 256-prompt corpus, the folder loader's bad input, and
the default hash tokenizer of the bundled graphs (documented, deterministic).

The expected ids were produced once by transformers (tools/gen_tokenizer_fixture.py): ``transformers_fast`` by
transformers 5.24's CLIPTokenizer, ``transformers_slow`` by transformers 4.57's Python CLIPTokenizer without ftfy.
"""
import gzip
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd.tokenizer import ClipTokenizer, HashTokenizer, load_clip_tokenizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clip_tokenizer"
FOLDER = FIXTURE / "folder"
CORPUS = json.loads((FIXTURE / "corpus.json").read_text(encoding="utf-8"))
EXPECTED = json.loads((FIXTURE / "expected_ids.json").read_text())
REFERENCE = {"clip": "transformers_fast", "basic": "transformers_slow"}


@pytest.fixture(scope="module", params=sorted(REFERENCE))
def cleanup(request):
    return request.param


@pytest.fixture(scope="module")
def clip_tokenizers():
    return {mode: load_clip_tokenizer(FOLDER, cleanup=mode) for mode in REFERENCE}


def test_corpus_covers_what_the_issue_names():
    assert len(CORPUS) >= 200
    text = "".join(CORPUS)
    for needle in ("!", "3.14159", "é", "\u0301", "猫", "🐱", "\u200d", "it's", "\t", "\u00a0"):
        assert needle in text
    assert "" in CORPUS and " " in CORPUS
    ids = np.array(EXPECTED["transformers_fast"]["ids"])
    assert ids.shape == (len(CORPUS), 77)
    assert (ids[:, -2] != 49407).sum() >= 5  # >= 5 prompts run past 77 tokens (truncated: no padding before EOS)


def test_clip_tokenizer_matches_transformers_token_for_token(clip_tokenizers, cleanup):
    got = clip_tokenizers[cleanup].encode(CORPUS)
    expected = np.array(EXPECTED[REFERENCE[cleanup]]["ids"], dtype=np.int64)
    wrong = [CORPUS[i] for i in np.flatnonzero((got != expected).any(axis=1))]
    assert not wrong, f"{len(wrong)} prompts differ from {EXPECTED[REFERENCE[cleanup]]['producer']}: {wrong[:5]}"
    assert got.dtype == np.int64


def test_the_corpus_tells_the_two_cleanups_apart(clip_tokenizers):
    """Each cleanup rule is exercised: CJK words, dropped control/format characters, final sigma, specials."""
    fast, slow = (np.array(EXPECTED[k]["ids"]) for k in ("transformers_fast", "transformers_slow"))
    differ = {CORPUS[i] for i in np.flatnonzero((fast != slow).any(axis=1))}
    for prompt in ("你好，世界！", "zero\u200bwidth space", "bell\x07char", "ΟΔΟΣ οδός Σίσυφος ΣΊΣΥΦΟΣ",
                   "👨\u200d👩\u200d👧\u200d👦 family (ZWJ)", "<|ENDOFTEXT|>"):
        assert prompt in differ
    assert len(differ) >= 50


def test_clip_tokens_are_clip_bpe(clip_tokenizers):
    tok = clip_tokenizers["clip"]
    assert tok.tokens("A photo of an Astronaut's helmet")[:8] == [
        "<|startoftext|>", "a</w>", "photo</w>", "of</w>", "an</w>", "astronaut</w>", "'s</w>", "helmet</w>"]
    ids = tok("a photo")
    assert ids.shape == (77,) and ids[0] == 49406 and ids[3] == 49407 and (ids[3:] == 49407).all()
    assert (tok.bos, tok.eos, tok.pad, tok.vocab_size, tok.max_length) == (49406, 49407, 49407, 49408, 77)


def test_truncation_keeps_eos_last_and_max_length_overrides(clip_tokenizers):
    long = " ".join(["photo"] * 100)
    ids = clip_tokenizers["clip"](long)
    assert ids[0] == 49406 and ids[-1] == 49407 and (ids[1:-1] == ids[1]).all() and ids[1] != 49407
    short = load_clip_tokenizer(FOLDER, max_length=8)
    np.testing.assert_array_equal(short(long), [49406] + [ids[1]] * 6 + [49407])
    np.testing.assert_array_equal(short(""), [49406] + [49407] * 7)


def plain_copy(tmp_path: Path, **config_changes) -> Path:
    """The fixture folder with plain vocab.json / merges.txt (as pipelines ship them) and edited configs."""
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes(gzip.decompress((FOLDER / f"{name}.gz").read_bytes()))
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        config = json.loads((FOLDER / name).read_text())
        config.update({k: v for k, v in config_changes.items() if k in config or name == "tokenizer_config.json"})
        (folder / name).write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return folder


def test_pad_token_comes_from_the_folder(tmp_path, clip_tokenizers):
    """SD 2.x's tokenizer pads with "!" (id 0), SD 1.x's with <|endoftext|>."""
    sd2 = load_clip_tokenizer(plain_copy(tmp_path, pad_token="!"))
    assert sd2.pad == 0
    for prompt in ("a photo of a cat", "", "漂亮的風景画, 4k"):
        ids = clip_tokenizers["clip"](prompt)
        end = int(np.flatnonzero(ids == 49407)[0])
        np.testing.assert_array_equal(sd2(prompt), np.concatenate([ids[:end + 1], np.zeros(76 - end, np.int64)]))


def test_a_folder_saved_by_transformers_5_tokenizer_json_only_gives_the_same_ids(tmp_path):
    """transformers >= 5 saves tokenizer.json (no vocab.json / merges.txt); its added tokens say which special
    tokens are also found lowercased (here <|startoftext|> is, <|endoftext|> is not)."""
    tok = load_clip_tokenizer(FIXTURE / "folder_tokenizer_json")
    np.testing.assert_array_equal(tok.encode(CORPUS), EXPECTED["transformers_fast"]["ids"])
    # older tokenizers files write each merge as one "a b" string
    saved = json.loads(gzip.decompress((FIXTURE / "folder_tokenizer_json" / "tokenizer.json.gz").read_bytes()))
    saved["model"]["merges"] = [" ".join(pair) for pair in saved["model"]["merges"]]
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(saved))
    shutil.copy(FIXTURE / "folder_tokenizer_json" / "tokenizer_config.json", folder)
    np.testing.assert_array_equal(load_clip_tokenizer(folder).encode(CORPUS[:60]), tok.encode(CORPUS[:60]))
    saved["model"]["end_of_word_suffix"] = ""
    (folder / "tokenizer.json").write_text(json.dumps(saved))
    with pytest.raises(InputError, match=r"tokenizer\.json: not a CLIP tokenizer"):
        load_clip_tokenizer(folder)
    saved["model"].update(end_of_word_suffix="</w>", merges=[["a"]])
    (folder / "tokenizer.json").write_text(json.dumps(saved))
    with pytest.raises(InputError, match=r"tokenizer\.json: model\.merges"):
        load_clip_tokenizer(folder)


def test_plain_and_gzipped_files_give_the_same_ids(tmp_path, clip_tokenizers):
    plain = load_clip_tokenizer(plain_copy(tmp_path))
    np.testing.assert_array_equal(plain.encode(CORPUS[:40]), clip_tokenizers["clip"].encode(CORPUS[:40]))


@pytest.mark.parametrize("damage, named", [
    (lambda f: (f / "merges.txt").unlink(), "merges.txt"),
    (lambda f: (f / "vocab.json").unlink(), "vocab.json"),
    (lambda f: (f / "vocab.json").write_text("{not json"), "vocab.json"),
    (lambda f: (f / "vocab.json").write_text("[1, 2]"), "vocab.json"),
    (lambda f: (f / "vocab.json").write_text('{"a": "1"}'), "vocab.json"),
    (lambda f: (f / "merges.txt").write_text("#version: 0.2\na b c\n"), "merges.txt: line 2"),
    (lambda f: (f / "merges.txt").write_text("#version: 0.2\nzz\u2603 q\u2603\n"), "merges.txt"),
    (lambda f: (f / "tokenizer_config.json").write_text("{"), "tokenizer_config.json"),
    (lambda f: (f / "special_tokens_map.json").write_text('{"pad_token": "<|nope|>"}'), "pad_token"),
    (lambda f: (f / "special_tokens_map.json").write_text('{"bos_token": 5}'), "special_tokens_map.json"),
    (lambda f: (f / "tokenizer_config.json").write_text('{"model_max_length": 1}'), "model_max_length"),
    (lambda f: (f / "tokenizer_config.json").write_text('{"model_max_length": 1e30}'), "model_max_length"),
    (lambda f: (f / "tokenizer_config.json").write_text(
        '{"model_max_length": 1000000000000000019884624838656}'), "not a prompt length"),
    (lambda f: (f / "tokenizer_config.json").unlink(), "tokenizer_config.json"),
    (lambda f: (f / "vocab.json").unlink() or (f / "vocab.json.gz").write_bytes(b"not gzip"), "vocab.json.gz"),
    (lambda f: shutil.rmtree(f), "tokenizer"),
])
def test_bad_folders_are_input_errors_naming_the_file(tmp_path, damage, named):
    folder = plain_copy(tmp_path)
    damage(folder)
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        load_clip_tokenizer(folder)


def test_bad_arguments_are_input_errors(clip_tokenizers):
    with pytest.raises(InputError, match="cleanup"):
        load_clip_tokenizer(FOLDER, cleanup="ftfy")
    with pytest.raises(InputError, match="strings"):
        clip_tokenizers["clip"].encode(["ok", None])
    with pytest.raises(InputError, match="list of strings"):
        clip_tokenizers["clip"].encode("one prompt, not a list")
    with pytest.raises(InputError, match="bos_token"):
        ClipTokenizer({"a</w>": 0}, [], max_length=4)


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


@pytest.mark.slow
def test_fixture_is_what_the_installed_transformers_computes(clip_tokenizers):
    """With transformers installed (dev environments only): its CLIPTokenizer still gives the stored ids (>= 5:
    transformers_fast; 4.x without ftfy: transformers_slow)."""
    transformers = pytest.importorskip("transformers")
    import importlib.util
    import tempfile

    major = int(transformers.__version__.split(".")[0])
    if major < 5 and importlib.util.find_spec("ftfy") is not None:
        pytest.skip("transformers 4.x with ftfy cleans text differently (neither reference)")
    key = "transformers_fast" if major >= 5 else "transformers_slow"
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("vocab.json", "merges.txt"):
            (Path(tmp) / name).write_bytes(gzip.decompress((FOLDER / f"{name}.gz").read_bytes()))
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            shutil.copy(FOLDER / name, tmp)
        tok = transformers.CLIPTokenizer.from_pretrained(tmp)
        ids = [tok(p, padding="max_length", max_length=77, truncation=True).input_ids for p in CORPUS]
    assert ids == EXPECTED[key]["ids"]
