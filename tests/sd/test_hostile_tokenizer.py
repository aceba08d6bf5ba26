"""Hostile tokenizer files: JSON nested past the parser's recursion limit (200,000 `[`) in vocab.json,
tokenizer.json or special_tokens_map.json, plain or gzipped, is one InputError naming the file (exit 2), not a
RecursionError (exit 3)."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from mschecker.errors import InputError
from mschecker.sd.tokenizer import load_clip_tokenizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clip_tokenizer"
DEEP = "[" * 200_000 + "]" * 200_000


def _folder(tmp_path: Path, source: str) -> Path:
    folder = tmp_path / "tokenizer"
    shutil.copytree(FIXTURE / source, folder)
    return folder


@pytest.mark.parametrize("source, name", [("folder", "vocab.json"), ("folder", "special_tokens_map.json"),
                                          ("folder_tokenizer_json", "tokenizer.json")])
@pytest.mark.parametrize("gzipped", [False, True])
def test_deeply_nested_json_is_input_error_naming_the_file(tmp_path, source, name, gzipped):
    folder = _folder(tmp_path, source)
    for old in (folder / name, folder / f"{name}.gz"):
        old.unlink(missing_ok=True)
    target = folder / (f"{name}.gz" if gzipped else name)
    data = DEEP.encode()
    target.write_bytes(gzip.compress(data) if gzipped else data)
    with pytest.raises(InputError) as err:
        load_clip_tokenizer(folder, max_length=77)
    message = str(err.value)
    assert message.startswith(f"{target}: not valid JSON") and "\n" not in message


def test_invalid_json_still_names_the_file(tmp_path):
    folder = _folder(tmp_path, "folder")
    (folder / "special_tokens_map.json").write_text("{not json")
    with pytest.raises(InputError, match=r"special_tokens_map\.json: not valid JSON \(.*line 1"):
        load_clip_tokenizer(folder, max_length=77)


def test_the_cli_says_it_in_one_line_exit_2(tmp_path, capsys):
    from mschecker.cli import main

    folder = _folder(tmp_path, "folder")
    (folder / "vocab.json.gz").unlink()
    (folder / "vocab.json").write_text(DEEP)
    out = tmp_path / "small"
    assert main(["sd", "--preset", "small", "--save-pipeline", str(out), "--tokenizer", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'vocab.json'}: not valid JSON" in err and "Traceback" not in err and "RecursionError" not in err
    assert not out.exists()
