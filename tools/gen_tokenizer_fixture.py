"""Write tests/fixtures/clip_tokenizer/: a real CLIP tokenizer folder and the expected ids of a prompt corpus.

Dev-time only (needs `transformers`, and `open_clip_torch` or ``--bpe``); the tests read what it writes and need
neither. Three steps, each run in the environment that has what it needs:

    python tools/gen_tokenizer_fixture.py folder [--bpe bpe_simple_vocab_16e6.txt.gz]
        CLIP's vocabulary derived from OpenAI's BPE file as CLIP and transformers derive it (the byte alphabet,
        its ``</w>`` variants, one token per merge, ``<|startoftext|>``, ``<|endoftext|>``: 49408 ids), written
        gzipped as folder/vocab.json.gz + folder/merges.txt.gz with SD 1.5's special_tokens_map.json and
        tokenizer_config.json; the corpus of prompts into corpus.json.
    python tools/gen_tokenizer_fixture.py expected
        adds the ids of transformers' ``CLIPTokenizer`` for every prompt of the corpus under the key
        ``transformers_slow`` (transformers 4.x without ftfy: the Python tokenizer) or ``transformers_fast``
        (transformers >= 5, or 4.x's CLIPTokenizerFast with --fast), with padding="max_length", truncation
        to model_max_length, as diffusers' pipelines call it. With transformers >= 5 it also writes the folder
        as transformers saves it (folder_tokenizer_json/: tokenizer.json, gzipped, + tokenizer_config.json),
        checking that the saved tokenizer reloaded gives the same ids.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "clip_tokenizer"
FOLDER = FIXTURE / "folder"
TOKENIZER_JSON_FOLDER = FIXTURE / "folder_tokenizer_json"  # what transformers >= 5 saves: tokenizer.json only
CORPUS = FIXTURE / "corpus.json"
EXPECTED = FIXTURE / "expected_ids.json"

SPECIAL = {"content": None, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}


def bytes_to_unicode() -> dict[int, str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes)))


def clip_vocab(bpe_gz: Path) -> tuple[dict[str, int], list[str]]:
    """CLIP's SimpleTokenizer derivation (the same as openai/clip-vit-large-patch14's vocab.json)."""
    lines = gzip.open(bpe_gz).read().decode("utf-8").split("\n")
    merges = lines[1:49152 - 256 - 2 + 1]
    alphabet = list(bytes_to_unicode().values())
    tokens = alphabet + [c + "</w>" for c in alphabet] + ["".join(m.split()) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    assert len(tokens) == 49408 and len(set(tokens)) == 49408, len(tokens)
    return {t: i for i, t in enumerate(tokens)}, merges


def special(content: str) -> dict:
    return dict(SPECIAL, content=content)


def write_folder(bpe_gz: Path) -> None:
    vocab, merges = clip_vocab(bpe_gz)
    FOLDER.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same input gives the same bytes (no spurious fixture diffs)
    with gzip.GzipFile(FOLDER / "vocab.json.gz", "wb", mtime=0) as f:
        f.write(json.dumps(vocab, ensure_ascii=False).encode("utf-8"))
    with gzip.GzipFile(FOLDER / "merges.txt.gz", "wb", mtime=0) as f:
        f.write(("#version: 0.2\n" + "\n".join(merges) + "\n").encode("utf-8"))
    bos, eos = special("<|startoftext|>"), special("<|endoftext|>")
    (FOLDER / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": bos, "eos_token": eos, "pad_token": "<|endoftext|>", "unk_token": eos}, indent=2) + "\n")
    (FOLDER / "tokenizer_config.json").write_text(json.dumps(
        {"add_prefix_space": False, "bos_token": bos, "do_lower_case": True, "eos_token": eos, "errors": "replace",
         "model_max_length": 77, "pad_token": "<|endoftext|>", "tokenizer_class": "CLIPTokenizer",
         "unk_token": eos}, indent=2) + "\n")


HAND_WRITTEN = [
    # typical Stable Diffusion prompts
    "a photo of an astronaut riding a horse on mars",
    "A majestic lion jumping from a big stone at night",
    "portrait of a young woman, highly detailed, digital painting, artstation, concept art, sharp focus",
    "a cozy cabin in the woods, snow, warm light, 4k, 8k, ultra hd",
    "((masterpiece)), (best quality:1.2), [worst quality], {detailed}",
    "<lora:add_detail:0.8> cyberpunk city at dusk, neon lights",
    "an oil painting of a cat wearing a top hat -- by Greg Rutkowski & Alphonse Mucha",
    "low-poly 3D render of a fox; isometric; pastel colors",
    "photo_realistic, f/1.8, 85mm, ISO 100, 1/200s",
    "steampunk airship over london, 1890s, sepia",
    "the quick brown fox jumps over the lazy dog",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "CamelCaseWords and snake_case_words and kebab-case-words",
    "email me at someone@example.com or visit https://example.com/a?b=c&d=e#frag",
    "#hashtag @mention $100 50% 3.14159 -2.5e-3 1,000,000",
    "1234567890 0987654321 42 007 2024-06-01 12:30:45",
    "x^2 + y^2 = z^2, a*b/c, a<b>c, a|b, ~tilde~, `code`, \\backslash\\",
    "!!!", "...", "?!?!", "---", "***", "(((", ")))", "''", "\"\"", "'", "\"quoted\"", "'single quoted'",
    "!?.,;:()[]{}<>@#$%^&*-_=+|\\/~`",
    # contractions and apostrophes
    "it's", "IT'S", "don't", "I'm", "we'll", "they're", "I've", "she'd", "cant't won't shouldn't've",
    "rock'n'roll", "'s 't 're 've 'm 'll 'd", "''s", "o'clock", "dog's bone's owner's",
    "it’s a typographic apostrophe", "‘curly’ “double” quotes", "l'été d'un garçon",
    # accents and scripts
    "café naïve résumé façade jalapeño crème brûlée", "Ångström Zürich Øresund São Paulo", "straße STRASSE ß ẞ",
    "e\u0301 vs \u00e9 (decomposed vs composed)", "A\u030a ngstrom", "ǅ ǆ ǈ titlecase digraphs", "ﬁ ﬂ ligatures",
    "İstanbul ıi", "ΟΔΟΣ οδός Σίσυφος ΣΊΣΥΦΟΣ", "Привет, мир! Москва", "Ελληνικά κείμενα",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "안녕하세요 세계", "こんにちは世界",
    "カタカナ ひらがな", "你好，世界！", "一只可爱的猫在阳光下睡觉", "漂亮的風景画, 4k", "中文English混合text",
    "日本の桜🌸", "Tiếng Việt có dấu", "Zalgo: Z̴̡̢a̵̘̓l̸̰̿g̶̣̈́o̷̟̔", "ʕ•ᴥ•ʔ (◕‿◕) ¯\\_(ツ)_/¯",
    # numbers beyond ASCII digits
    "１２３ fullwidth digits", "x² y³ ½ ¼ superscripts and fractions", "Ⅻ Ⅳ roman numerals", "٣٤٥ arabic digits",
    "①②③ circled", "3rd 21st 100th", "v1.5 sd2.1 SDXL-1.0",
    # emoji
    "🔥", "😀😃😄", "a cat 🐱 and a dog 🐶", "👍🏽 thumbs up with skin tone", "👨‍👩‍👧‍👦 family (ZWJ)",
    "🇯🇵 🇺🇸 flags", "1️⃣ keycap", "❤️ heart with variation selector", "☕ coffee ♥ ♦ ♣ ♠",
    # whitespace and control characters
    "", " ", "   ", "\t", "\n", "\t \n \r\n", "\u3000", "\u00a0", "\u2028\u2029",
    "  leading and trailing spaces  ", "multiple    spaces\tand\ttabs\nand\nnewlines",
    "non\u00a0breaking\u00a0space", "ideographic\u3000space", "line\u2028separator", "para\u2029separator",
    "vertical\x0btab", "form\x0cfeed", "bell\x07char", "nul\x00char", "zero\u200bwidth space", "soft\u00adhyphen",
    "bom\ufeffinside", "replacement\ufffdchar", "file\x1cseparator", "next\x85line", "rtl\u200fmark",
    "word\u200djoiner",
    # special tokens written in the text
    "<|startoftext|>", "<|endoftext|>", "a <|endoftext|> b", "<|ENDOFTEXT|>", "<|startoftext|>hello<|endoftext|>",
    "<|STARTOFTEXT|>", "a <|StartOfText|> b <|EndOfText|> c",
    # long prompts
    ", ".join(["highly detailed"] * 40),
    " ".join(f"word{i}" for i in range(100)),
    "a " * 80,
    "masterpiece, best quality, ultra-detailed, illustration, 1girl, solo, long hair, looking at viewer, smile, "
    "open mouth, bangs, skirt, shirt, long sleeves, hat, dress, bow, holding, closed mouth, standing, full body, "
    "flower, outdoors, sky, day, cloud, water, tree, blue sky, petals, cherry blossoms, building, scenery, "
    "reflection, fence, stairs, railing, spring (season), pink flower, east asian architecture",
    "🌸" * 60,
    "1234567890" * 10,
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
]

WORDS = ["cat", "dog", "forest", "sunset", "portrait", "cyberpunk", "watercolor", "octane", "render", "bokeh",
         "café", "naïve", "über", "東京", "猫", "城", "🎨", "🌊", "😺", "ΣΟΦΊΑ", "привет", "x²", "3.5", "42", "1999",
         "it's", "don't", "we'll", "(", ")", "[", "]", ":1.3", ",", ".", "!", "?", "--ar", "16:9", "&", "/",
         "ultra-detailed", "8K", "HDR", "f/2.8", "<lora:x:1>", "#art", "@user", "_", "__init__", "\t", "  ",
         "e\u0301", "\u00a0", "\u200b", "ﬁne", "Straße", "İ", "Ω", "µ", "℃", "™", "©", "→", "∞", "√2", "½"]


def corpus() -> list[str]:
    rng = random.Random(20260601)
    generated = []
    for n in range(130):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 60, 90])
        sep = rng.choice([" ", ", ", " ", "", "  "])
        generated.append(sep.join(rng.choice(WORDS) for _ in range(length)))
    return list(dict.fromkeys(HAND_WRITTEN + generated))  # unique, in order


def write_expected(fast: bool) -> None:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        from transformers import CLIPTokenizer as cls
        key = "transformers_fast"
    elif fast:
        from transformers import CLIPTokenizerFast as cls
        key = "transformers_fast"
    else:
        if importlib.util.find_spec("ftfy") is not None:
            sys.exit("uninstall ftfy: the fixture is transformers' CLIPTokenizer without ftfy (its documented "
                     "fallback cleanup)")
        from transformers import CLIPTokenizer as cls
        key = "transformers_slow"
    import tempfile
    prompts = json.loads(CORPUS.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:  # transformers reads plain files
        for name in ("vocab.json", "merges.txt"):
            (Path(tmp) / name).write_bytes(gzip.open(FOLDER / f"{name}.gz").read())
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            (Path(tmp) / name).write_bytes((FOLDER / name).read_bytes())
        tok = cls.from_pretrained(tmp)
        ids = [tok(p, padding="max_length", max_length=tok.model_max_length, truncation=True).input_ids
               for p in prompts]
        if major >= 5:
            saved = Path(tmp) / "saved"
            tok.save_pretrained(saved)
            again = cls.from_pretrained(saved)
            assert ids == [again(p, padding="max_length", max_length=77, truncation=True).input_ids for p in prompts]
            TOKENIZER_JSON_FOLDER.mkdir(parents=True, exist_ok=True)
            for path in saved.iterdir():
                if path.name == "tokenizer.json":
                    with gzip.GzipFile(TOKENIZER_JSON_FOLDER / "tokenizer.json.gz", "wb", mtime=0) as f:
                        f.write(path.read_bytes())
                else:
                    (TOKENIZER_JSON_FOLDER / path.name).write_bytes(path.read_bytes())
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.is_file() else {}
    expected[key] = {"producer": f"transformers {transformers.__version__} {cls.__name__}", "ids": ids}
    EXPECTED.write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    print(f"{key}: {len(ids)} prompts from {expected[key]['producer']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["folder", "expected"])
    ap.add_argument("--bpe", type=Path, help="bpe_simple_vocab_16e6.txt.gz (default: open_clip's copy)")
    ap.add_argument("--fast", action="store_true", help="transformers 4.x: use CLIPTokenizerFast")
    args = ap.parse_args(argv)
    if args.step == "folder":
        bpe = args.bpe
        if bpe is None:
            spec = importlib.util.find_spec("open_clip")
            if spec is None:
                sys.exit("pass --bpe or install open_clip_torch (it ships bpe_simple_vocab_16e6.txt.gz)")
            bpe = Path(spec.submodule_search_locations[0]) / "bpe_simple_vocab_16e6.txt.gz"
        write_folder(bpe)
        CORPUS.write_text(json.dumps(corpus(), ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        print(f"wrote {FOLDER} and {CORPUS}")
    else:
        write_expected(args.fast)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
