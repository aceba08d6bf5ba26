"""mschecker.npu.atc: every ATC precision file read and written as GE's own parsers read it (the module docstring
cites the GE source of each rule). Fast: no model runs."""
from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mschecker.errors import InputError
from mschecker.npu import atc
from mschecker.npu.atc import (AtcFlags, CustomDtype, atc_command_text, atc_expressible, customize_dtypes_text,
                               fusion_switch_text, keep_dtype_text, mixlist_updates, modify_mixlist_text, nearest,
                               op_precision_text, parse_atc_command, parse_customize_dtypes,
                               parse_customize_dtypes_with_notes, parse_customize_line, parse_keep_dtype,
                               parse_modify_mixlist, parse_op_precision_ini, parse_op_precision_ini_with_notes,
                               validate_modify_mixlist)

SD_NAME = "/up_blocks.2/resnets.0/norm2/Mul/GroupNorm"
SD_UNET = ("atc --framework=5 --model=unet.onnx --output=unet --input_format=NCHW --log=error "
           '--optypelist_for_implmode="Gelu,Sigmoid" --op_select_implmode=high_performance --soc_version=Ascend910B3')


def _file(tmp_path, text, name="f.cfg"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return p


def _refused(fn, arg, *patterns):
    """The call raises one InputError line matching every pattern."""
    with pytest.raises(InputError) as info:
        fn(arg)
    msg = str(info.value)
    assert "\n" not in msg
    for pat in patterns:
        assert re.search(pat, msg), (pat, msg)
    return msg


# ------------------------------------------------------------------------------------------------ constants
def test_constants_are_the_ge_vocabulary():
    assert atc.IMPLMODES == ("high_precision", "high_performance")
    assert len(atc.INI_MODES) == 8 and set(atc.IMPLMODES) <= set(atc.INI_MODES)
    assert set(atc.V2_TO_V1) == set(atc.PRECISION_MODES_V2) - {"mixed_hif8", "cube_hif8"}
    assert set(atc.V2_TO_V1.values()) <= set(atc.PRECISION_MODES_V1)
    assert {"float", "float16", "float32", "bfloat16", "int8"} <= set(atc.CUSTOM_DTYPES)
    assert "undefined" not in atc.CUSTOM_DTYPES  # DT_UNDEFINED is what the parser rejects
    assert atc.CUSTOM_DTYPES["float"] == atc.CUSTOM_DTYPES["float32"] == "float32"
    assert atc.CUSTOM_DTYPES["bfloat16"] == "bfloat16" and atc.CUSTOM_DTYPES["hifloat8"] is None
    assert set(atc.FLOAT_DTYPES) == {"float", "float16", "float32", "bfloat16"}
    assert nearest("flaot32", atc.CUSTOM_DTYPES)[0] == "float32"
    assert nearest("HIGH_PRECISION", atc.INI_MODES)[0] == "high_precision"


# ------------------------------------------------------------------------------------------------ customize_dtypes
def test_sd_recipe_single_colon_line_is_the_double_colon_entry():
    """GE's name is the text before the FIRST ':', so Huawei's single-colon recipe line parses like the doc form."""
    one = parse_customize_line(f"{SD_NAME}:InputDtype:float32", "r")
    two = parse_customize_line(f"{SD_NAME}::InputDtype:float32", "r")
    assert one == two == CustomDtype(SD_NAME, False, ("float32",), ())
    assert one.input_dtype(0) == "float32" and one.input_dtype(1) is None and one.output_dtype(0) is None
    assert one.text() == f"{SD_NAME}::InputDtype:float32" and one.key == SD_NAME


def test_doc_samples():
    t = parse_customize_line("OpType::Relu:InputDtype:float16,OutputDtype:int8", "doc")
    assert t == CustomDtype("Relu", True, ("float16",), ("int8",))
    assert t.key == "OpType::Relu" and t.output_dtype(0) == "int8"
    assert t.text() == "OpType::Relu:InputDtype:float16,OutputDtype:int8"
    n = parse_customize_line("fp32_vars/Relu::InputDtype:float16,OutputDtype:int8", "doc")
    assert n == CustomDtype("fp32_vars/Relu", False, ("float16",), ("int8",))


def test_values_empty_trimmed_and_case_insensitive():
    e = parse_customize_line("  n::InputDtype: ,FLOAT16 , , OutputDtype:BFloat16,  ", "x")
    assert e.inputs == (None, "float16") and e.outputs == ("bfloat16",)  # trailing empties mean nothing in GE
    assert e.input_dtype(0) is None and e.input_dtype(1) == "float16"
    assert e.text() == "n::InputDtype:,float16,OutputDtype:bfloat16"
    only_out = parse_customize_line("n:OutputDtype:float", "x")
    assert only_out.inputs == () and only_out.outputs == ("float",) and only_out.output_dtype(0) == "float32"
    noop = parse_customize_line("n::InputDtype:", "x")  # accepted by atc, no effect, but it holds the name
    assert noop.inputs == noop.outputs == () and noop.text() == "n::InputDtype:"
    assert parse_customize_line(noop.text(), "x") == noop
    assert parse_customize_line("n::InputDtype:int8", "x").inputs == ("int8",)  # ATC accepts non-float words


@pytest.mark.parametrize("line,patterns", [
    ("n::OutputDtype:flaot32", [r"^cfg\.txt:3: OutputDtype 'flaot32' is not a dtype ATC knows \(nearest: float32"]),
    ("n::InputDtype:undefined", ["InputDtype 'undefined'"]),
    ("n::InputDtype:\ufb02oat16", ["not a dtype"]),  # Python upper() makes 'FLOAT16' of the ligature, C does not
    ("", ["empty line", "fails the whole file"]),
    ("   ", ["empty line"]),
    (":InputDtype:float16", ["no op name"]),
    ("conv1", ["no op name"]),
    ("OpType::", ["empty OpType:: line"]),
    ("conv1 :InputDtype:float16", ["'conv1 ' ends with whitespace"]),
    ("conv1::float16", ["neither InputDtype nor OutputDtype"]),
    ("n::OutputDtype:float16,InputDtype:float16", ["InputDtype first"]),
    ("n::garbage InputDtype:float16", ["unexpected text 'garbage '", "ignores"]),
    ("n::InputDtype=float16", ["followed by ':'"]),
    ("n::InputDtype", ["followed by ':'"]),
    ("n::InputDtypeOutputDtype:float16", ["followed by ':'"]),
    ("InputDtype_cast::InputDtype:float16", ["contains 'InputDtype'"]),
    ("n::InputDtype:float16;OutputDtype:float32", [r"InputDtype 'float16;'"]),
    ("  OpType::Relu:InputDtype:float16", ["whitespace before OpType::", "named 'OpType'"]),
    ("OpType:Relu:InputDtype:float16", ["two colons"]),
    ("OpType::relu:InputDtype:float16", ["'relu' is not an Ascend IR op type"]),
    ("a\0b::InputDtype:float16", ["NUL"]),
])
def test_customize_line_errors_name_where_and_field(line, patterns):
    _refused(lambda t: parse_customize_line(t, "cfg.txt:3"), line, r"^cfg\.txt:3: ", *patterns)


def test_customize_file_first_wins_and_notes(tmp_path):
    p = _file(tmp_path, "a::InputDtype:float32\nOpType::Gelu:InputDtype:float32\na:InputDtype:float16\n"
                        "OpType::Gelu:OutputDtype:float16\nb::InputDtype:float16\n")
    entries, notes = parse_customize_dtypes_with_notes(p)
    assert entries == [CustomDtype("a", False, ("float32",)), CustomDtype("Gelu", True, ("float32",)),
                       CustomDtype("b", False, ("float16",))]
    assert parse_customize_dtypes(p) == entries
    assert len(notes) == 2 and notes[0].startswith(f"{p}:3: a repeats {p}:1")
    assert f"{p}:4: OpType::Gelu repeats {p}:2" in notes[1]


def test_customize_file_errors_name_file_and_line(tmp_path):
    _refused(parse_customize_dtypes, _file(tmp_path, "a::InputDtype:float32\n\nb::InputDtype:float32\n"),
             rf"{re.escape(str(tmp_path))}/f\.cfg:2: an empty line")
    _refused(parse_customize_dtypes, _file(tmp_path, "a::InputDtype:float32\n# note\n"), r"f\.cfg:2: ")
    _refused(parse_customize_dtypes, _file(tmp_path, "a::InputDtype:float32\n\n"), r"f\.cfg:2: an empty line")
    assert parse_customize_dtypes(_file(tmp_path, "")) == []
    assert parse_customize_dtypes(_file(tmp_path, "a::InputDtype:float32")) == [CustomDtype("a", False, ("float32",))]
    assert parse_customize_dtypes(_file(tmp_path, "a::InputDtype:float32\r\n"))[0].inputs == ("float32",)


def test_customize_line_limit_is_1023_bytes(tmp_path):
    head = "::InputDtype:float32"
    ok = "n" * (1023 - len(head)) + head
    assert len(ok) == 1023 and parse_customize_dtypes(_file(tmp_path, ok + "\n"))[0].name == "n" * 1003
    _refused(parse_customize_dtypes, _file(tmp_path, "x" + ok + "\n"), r"f\.cfg:1: the line is 1024 bytes")
    _refused(lambda t: parse_customize_line(t, "w"), "x" + ok, "1024 bytes")
    # bytes, not characters: a CRLF's '\r' and UTF-8 multi-byte names count
    _refused(parse_customize_dtypes, _file(tmp_path, ok + "\r\n"), "1024 bytes")
    _refused(parse_customize_dtypes, _file(tmp_path, "é" + ok[1:] + "\n"), "1024 bytes")
    with pytest.raises(ValueError, match="1023"):
        CustomDtype("n" * 1003, False, ("float32", "float16")).text()


def test_customize_writer_refuses_what_atc_cannot_carry(tmp_path):
    for name in ("a:b", "a\nb", " a", "a ", "", "OpType", "xInputDtype", "OutputDtypeY", "n" * 1020):
        assert atc_expressible(name, "customize_dtypes"), name
        with pytest.raises(ValueError):
            customize_dtypes_text([CustomDtype(name, False, ("float32",))])
    with pytest.raises(ValueError, match="not a dtype"):
        CustomDtype("a", False, ("fp32",)).text()
    with pytest.raises(ValueError, match="twice"):
        customize_dtypes_text([CustomDtype("a", False, ("float32",)), CustomDtype("a", False, ("float16",))])
    entries = [CustomDtype(SD_NAME, False, ("float32",)), CustomDtype("Relu", True, ("float16",), (None, "int8")),
               CustomDtype("a b", False, (), ("bfloat16",))]
    text = customize_dtypes_text(entries)
    assert text.endswith("\n") and "\n\n" not in text and "#" not in text
    assert parse_customize_dtypes(_file(tmp_path, text)) == entries


# ------------------------------------------------------------------------------------------------ keep_dtype
def test_keep_dtype_as_ge_reads_it(tmp_path):
    p = _file(tmp_path, "#算子名称配置样例：\nfp32_vars/Relu\n\n  conv 1\t\r\n#算子类型配置样例：\nOpType::Relu\n"
                        "fp32_vars/Relu\nfoo/OpType::Bar\n")
    assert parse_keep_dtype(p) == ["fp32_vars/Relu", "conv 1", "OpType::Relu", "foo/OpType::Bar"]
    _refused(parse_keep_dtype, _file(tmp_path, "a\nOpType::relu\n"), r"f\.cfg:2: OpType:: 'relu' is not an Ascend")
    _refused(parse_keep_dtype, _file(tmp_path, "OpType::\n"), r"f\.cfg:1: OpType:: '' is not")
    _refused(parse_keep_dtype, _file(tmp_path, "OpType:: Relu\n"), r"' Relu' is not")
    _refused(parse_keep_dtype, tmp_path / "nope", "does not exist")


def test_keep_dtype_writer(tmp_path):
    entries = ["fp32_vars/Relu", "OpType::Softmax", "conv 1", SD_NAME]
    text = keep_dtype_text(entries)
    assert "#" not in text and parse_keep_dtype(_file(tmp_path, text)) == entries
    for bad in ("#x", " x", "x\n", "OpType::softmax"):
        with pytest.raises(ValueError):
            keep_dtype_text([bad])
    assert atc_expressible("OpType::X", "keep_dtype")  # a node NAME that atc would read as a type entry


# ------------------------------------------------------------------------------------------------ op_precision.ini
def test_ini_as_ge_reads_it(tmp_path):
    p = _file(tmp_path, "# c\nSoftmax = high_precision\n[ByNodeName]\n; a note\n  # indented note\n"
                        "n1=keep_fp16\n\n   \n[ByOpType]\r\nGelu=high_performance\nSoftmax=high_performance\n"
                        ";Old=high_precision\n  #X=keep_fp16\n[ByNodeName]\nn1=high_precision\n")
    by_type, by_node, notes = parse_op_precision_ini_with_notes(p)
    # only column 1 makes a '#' comment in GE: an indented '#X=..' line is an entry (for an op named '#X')
    assert by_type == {"Softmax": "high_precision", "Gelu": "high_performance", ";Old": "high_precision",
                       "#X": "keep_fp16"}
    assert by_node == {"n1": "keep_fp16"}
    assert [n.split(": ", 1)[0] for n in notes] == [f"{p}:11", f"{p}:15"]
    assert "repeats" in notes[0] and "first" in notes[0]
    assert parse_op_precision_ini(p) == (by_type, by_node)


@pytest.mark.parametrize("text,patterns", [
    ("[ByOpType]\nSoftmax=fast\n", [r"op\.ini:2: Softmax = 'fast' is not a mode", "ignore"]),
    ("Gelu=high_precison\n", [r"op\.ini:1: Gelu = 'high_precison'", r"nearest: high_precision"]),
    ("Gelu=high_precision # fp32\n", [r"op\.ini:1: Gelu = 'high_precision # fp32'"]),
    ("[ByNodename]\nn=high_precision\n", [r"op\.ini:1: '\[ByNodename\]' is not a section", r"\[ByOpType\]"]),
    ("Gelu high_precision\n", [r"op\.ini:1: 'Gelu high_precision' has no '='", "ignore"]),
    ("=high_precision\n", [r"op\.ini:1: empty name"]),
    ("Gelu=\n", [r"op\.ini:1: empty mode"]),
])
def test_ini_errors_name_file_line_and_key(tmp_path, text, patterns):
    _refused(parse_op_precision_ini, _file(tmp_path, text, "op.ini"), *patterns)


def test_ini_writer(tmp_path):
    by_type, by_node = {"Gelu": "high_precision", ";x": "keep_fp16"}, {SD_NAME: "high_performance"}
    text = op_precision_text(by_type, by_node)
    assert text.startswith("# written by mschecker\n[ByOpType]\n")
    assert parse_op_precision_ini(_file(tmp_path, text, "o.ini")) == (by_type, by_node)
    only_node = op_precision_text({}, {"n": "high_precision"})
    assert "[ByOpType]" not in only_node
    assert parse_op_precision_ini(_file(tmp_path, only_node)) == ({}, {"n": "high_precision"})
    for bad in ("a=b", "#a", " a", ""):
        with pytest.raises(ValueError):
            op_precision_text({bad: "high_precision"}, {})
    with pytest.raises(ValueError):
        op_precision_text({"Gelu": "fast"}, {})


# ------------------------------------------------------------------------------------------------ modify_mixlist
DOC_MIXLIST = """{
  "black-list": {
     "to-remove": [
     "OpTypeA"
     ],
     "to-add": [
     "OpTypeB"
     ]
  },
  "white-list": {
     "to-remove": [
     "OpTypeC"
     ],
     "to-add": [
     "OpTypeD"
     ]
  }
}
"""


def test_mixlist_doc_sample(tmp_path):
    data = parse_modify_mixlist(_file(tmp_path, DOC_MIXLIST, "m.json"))
    assert data == {"black-list": {"to-remove": ["OpTypeA"], "to-add": ["OpTypeB"]},
                    "white-list": {"to-remove": ["OpTypeC"], "to-add": ["OpTypeD"]}}
    assert mixlist_updates(data) == {"OpTypeA": 32, "OpTypeB": 16, "OpTypeC": 8, "OpTypeD": 4}
    text = modify_mixlist_text(data)
    assert text.endswith("}\n") and parse_modify_mixlist(_file(tmp_path, text, "n.json")) == data
    both = {"black-list": {"to-add": ["A", "A", "Conv2D"]}, "white-list": {"to-remove": ["A"]}}
    assert validate_modify_mixlist(both, "p") == {"black-list": {"to-add": ["A", "Conv2D"]},
                                                  "white-list": {"to-remove": ["A"]}}
    assert mixlist_updates(both) == {"A": 16 | 8, "Conv2D": 16}


def test_mixlist_with_the_docs_comments_is_refused(tmp_path):
    commented = DOC_MIXLIST.replace('"black-list": {', '"black-list": {                  // 黑名单')
    _refused(parse_modify_mixlist, _file(tmp_path, commented, "m.json"), r"m\.json:2: a comment", "nlohmann")


@pytest.mark.parametrize("lists", [
    [("gray-list", "to-remove")], [("gray-list", "to-add"), ("gray-list", "to-remove")],
    [("white-list", "to-add"), ("black-list", "to-add")], [("white-list", "to-add"), ("white-list", "to-remove")],
    [("black-list", "to-add"), ("black-list", "to-remove")], [("black-list", "to-remove"), ("white-list", "to-remove")],
    [("gray-list", "to-add"), ("white-list", "to-add")], [("gray-list", "to-add"), ("black-list", "to-add")],
])
def test_each_invalid_combination_is_refused(tmp_path, lists):
    data: dict = {}
    for lst, upd in lists:
        data.setdefault(lst, {})[upd] = ["Relu"]
    bits = sum(atc.MIXLIST_BITS[k] for k in lists)
    assert bits not in atc.MIXLIST_VALID
    msg = _refused(lambda d: validate_modify_mixlist(d, "prof.toml"), data, r"^prof\.toml: op type Relu: ", "refuses")
    for lst, upd in lists:
        assert f"{lst}.{upd}" in msg
    _refused(parse_modify_mixlist, _file(tmp_path, json.dumps(data, indent=2), "m.json"), r"m\.json:\d+: op type Relu")


def test_every_valid_combination_is_accepted():
    for bits in atc.MIXLIST_VALID:
        data: dict = {}
        for (lst, upd), b in atc.MIXLIST_BITS.items():
            if bits & b:
                data.setdefault(lst, {})[upd] = ["Relu"]
        assert mixlist_updates(data) == {"Relu": bits}


@pytest.mark.parametrize("text,patterns", [
    ("", ["empty"]), ("  \n", ["empty"]), ("[]", ["JSON object"]),
    ('{"grey-list": {}}', [r"m\.json:1: 'grey-list' is not a list", "nearest: gray-list"]),
    ('{"white-list": {"add": ["A"]}}', ["'add' is not to-add or to-remove"]),
    ('{"white-list": ["A"]}', ["must be a JSON object"]),
    ('{"white-list": {"to-add": "A"}}', ["JSON array"]),
    ('{"white-list": {"to-add": [1]}}', ["not an op type string"]),
    ('{"white-list": {\n"to-add": ["relu"]}}', [r"m\.json:2: white-list\.to-add: 'relu' is not an Ascend IR op type"]),
    ('{"white-list": {}, "white-list": {}}', ["twice"]),
    ('{"white-list": {}} x', ["text after the JSON object"]),
    ('{"white-list": {"to-add": [NaN]}}', ["NaN"]),
    ('{"white-list": {"to-add": ["A",]}}', ["not valid JSON"]),
])
def test_mixlist_errors(tmp_path, text, patterns):
    _refused(parse_modify_mixlist, _file(tmp_path, text, "m.json"), *patterns)


def test_mixlist_bom_is_skipped_as_nlohmann_does(tmp_path):
    assert parse_modify_mixlist(_file(tmp_path, "\ufeff{}", "m.json")) == {}


# ------------------------------------------------------------------------------------------------ fusion switches
def test_fusion_switch_text_round_trips_through_the_reader(tmp_path):
    from mschecker.npu.fusion import load_switch_file, pass_names

    names = pass_names()[:2]
    lines = fusion_switch_text({names[0]: "off", names[1]: "ON"})
    assert lines == f"{names[0]}:off\n{names[1]}:on\n"
    assert load_switch_file(_file(tmp_path, lines, "sw.cfg")) == {names[0]: "off", names[1]: "on"}
    js = fusion_switch_text({"ALL": "off", names[0]: "on"})
    assert json.loads(js) == {"Switch": {"GraphFusion": {"ALL": "off", names[0]: "on"}}}
    assert load_switch_file(_file(tmp_path, js, "sw.json")) == {"ALL": "off", names[0]: "on"}
    for bad in ({names[0]: "maybe"}, {"a:b": "off"}, {" a": "off"}):
        with pytest.raises(ValueError):
            fusion_switch_text(bad)


# ------------------------------------------------------------------------------------------------ atc command
def test_sd_unet_command():
    f = parse_atc_command(SD_UNET, "Makefile:12")
    assert f == AtcFlags(model="unet.onnx", framework="5", soc_version="Ascend910B3",
                         op_select_implmode="high_performance", optypelist_for_implmode=("Gelu", "Sigmoid"),
                         other={"output": "unet", "input_format": "NCHW", "log": "error"})
    assert parse_atc_command(atc_command_text(f), "w") == f
    assert atc_command_text(f).startswith("atc --model=unet.onnx --framework=5 --soc_version=Ascend910B3 ")


def test_command_spellings_continuations_and_quoting():
    text = ("/usr/local/Ascend/bin/atc \\\n  --model 'my model.onnx' \\\n  -framework=5 "
            "--precision-mode allow_mix_precision --modify-mixlist=m.json --keep_dtype= "
            "--optypelist_for_implmode=' Gelu , ,Sigmoid' --help "
            "--op_select_implmode=high_precision  # trailing comment")
    f = parse_atc_command(text, "w")
    assert (f.model, f.framework, f.precision_mode, f.modify_mixlist) == ("my model.onnx", "5", "allow_mix_precision",
                                                                           "m.json")
    assert f.keep_dtype is None and f.optypelist_for_implmode == ("Gelu", "Sigmoid") and f.other == {"help": None}
    out = atc_command_text(f)
    assert "'my model.onnx'" in out and "\n" not in out
    assert parse_atc_command(out, "w") == f
    assert parse_atc_command("atc --precision_mode=force_fp16 --precision_mode=force_fp32", "w").precision_mode == \
        "force_fp32"  # getopt: the last wins


@pytest.mark.parametrize("cmd,patterns", [
    ("atc --precision_mode=force_fp61", [r"^mk:3: --precision_mode 'force_fp61'", "nearest: force_fp16"]),
    ("atc --precision_mode=force_fp16 --precision_mode_v2=fp16", ["atc refuses --precision_mode together with"]),
    ("atc --precision_mode_v2=mixed_hif8", ["Ascend 950"]),
    ("atc --precision_mode_v2=cube_hif8", ["Ascend 950"]),
    ("atc --precision_mode_v2=mixed_fp16", ["nearest: mixed_float16"]),
    ("atc --op_select_implmode=high_precison", ["--op_select_implmode 'high_precison'", "nearest: high_precision"]),
    ("atc --op_select_implmode=enable_float_32_execution", ["does not model"]),
    ("atc --modify_mixlist=m.json", ["atc refuses --modify_mixlist"]),
    ("atc --modify_mixlist=m.json --precision_mode=force_fp16", ["atc refuses --modify_mixlist"]),
    ("atc --model", ["missing its value"]),
    ("atc --model=a.onnx extra", ["'extra' is not a --flag"]),
    ("atc --model='a.onnx", ["cannot split"]),
])
def test_command_errors(cmd, patterns):
    _refused(lambda t: parse_atc_command(t, "mk:3"), cmd, *patterns)


def test_command_v2_and_mixlist_accepted():
    f = parse_atc_command("atc --precision_mode_v2=mixed_bfloat16 --modify_mixlist=m.json", "w")
    assert f.precision_mode_v2 == "mixed_bfloat16" and f.precision_mode is None
    assert parse_atc_command(atc_command_text(f), "w") == f


# ------------------------------------------------------------------------------------------------ round trips
_NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
_names = st.text(_NAME_CHARS, min_size=1, max_size=40)
_words = st.sampled_from(sorted(atc.CUSTOM_DTYPES) + [None])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(entries=st.lists(st.tuples(_names.filter(lambda n: not atc_expressible(n, "customize_dtypes")), st.booleans(),
                                  st.lists(_words, max_size=3), st.lists(_words, max_size=3)), max_size=5))
def test_customize_round_trip(tmp_path, entries):
    objs = {}
    for name, is_type, ins, outs in entries:
        if is_type:
            name = "T" + "".join(c for c in name if c.isascii() and c.isalnum())
        e = CustomDtype(name, is_type, tuple(ins), tuple(outs))
        objs.setdefault(e.key, e)
    p = _file(tmp_path, customize_dtypes_text(objs.values()), "c.cfg")
    assert parse_customize_dtypes_with_notes(p) == (list(objs.values()), [])
    for e in objs.values():
        assert parse_customize_line(e.text(), "w") == e


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(names=st.lists(_names.filter(lambda n: not atc_expressible(n, "keep_dtype")), max_size=6, unique=True))
def test_keep_dtype_round_trip(tmp_path, names):
    assert parse_keep_dtype(_file(tmp_path, keep_dtype_text(names), "k.cfg")) == names


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(by_type=st.dictionaries(_names.filter(lambda n: not atc_expressible(n, "op_precision")),
                               st.sampled_from(atc.INI_MODES), max_size=4),
       by_node=st.dictionaries(_names.filter(lambda n: not atc_expressible(n, "op_precision")),
                               st.sampled_from(atc.INI_MODES), max_size=4))
def test_ini_round_trip(tmp_path, by_type, by_node):
    got = parse_op_precision_ini_with_notes(_file(tmp_path, op_precision_text(by_type, by_node), "o.ini"))
    assert got == (by_type, by_node, [])


# ------------------------------------------------------------------------------------------------ realistic bugs
def test_lines_split_only_on_newline_and_trim_only_c_whitespace(tmp_path):
    """What a Python parser would get wrong while every test above still passes: str.splitlines() also splits on
    \\x0c, \\x1c, \\u2028 (C++ getline does not), and str.strip() also trims NBSP / ideographic spaces (C isspace
    does not): a name holding them is one name to atc."""
    name = "a\u2028b\x1cc"
    assert parse_keep_dtype(_file(tmp_path, name + "\n")) == [name]
    assert parse_customize_dtypes(_file(tmp_path, name + "::InputDtype:float32\n"))[0].name == name
    assert parse_keep_dtype(_file(tmp_path, "conv\u00a0\n")) == ["conv\u00a0"]
    assert parse_customize_line("conv\u3000:InputDtype:float32", "w").name == "conv\u3000"
    assert atc_expressible("conv\u00a0", "keep_dtype") is None
    assert parse_op_precision_ini(_file(tmp_path, "[ByNodeName]\nn\u2028m=high_precision\n")) == (
        {}, {"n\u2028m": "high_precision"})


def test_a_byte_order_mark_is_refused(tmp_path):
    """Notepad's BOM: atc reads it into the first name (or hides the first section header)."""
    for reader in (parse_keep_dtype, parse_customize_dtypes, parse_op_precision_ini):
        _refused(reader, _file(tmp_path, "\ufeff[ByNodeName]\n"), r"f\.cfg:1: .*byte-order mark")


def test_unreadable_inputs_are_one_line_errors(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for reader in (parse_keep_dtype, parse_customize_dtypes, parse_op_precision_ini, parse_modify_mixlist):
        _refused(reader, tmp_path / "missing", "does not exist")
        _refused(reader, d, "directory")
        _refused(reader, fifo, "FIFO")
        _refused(reader, _file(tmp_path, b'{"a\xff": 1}\n'), "not UTF-8")
