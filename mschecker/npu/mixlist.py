"""ATC's mixed-precision lists: which ops an fp32 graph runs in fp16/bf16 under --precision_mode allow_mix_precision
(== allow_mix_precision_fp16, --precision_mode_v2 mixed_float16) and allow_mix_precision_bf16 (mixed_bfloat16).

Colours. Each AI Core op's ops-info entry may carry `precision_reduce.flag`: "true" -> WHITE (the op is lowered),
"false" -> BLACK (it keeps its original dtype), no flag -> GRAY (it follows its predecessor); GE's op store
defaults the policy to GRAY and maps "true"/"false" with kStrPrecisionPolicyMap (hicann/ge
compiler/engines/nn_engine/opskernel/ops_store/ops_kernel_constants.h:113-114, op_kernel_info_constructor.cc:55-56).
AscendC ops declare it per chip in `op_host/*_def.cpp`: `OpAICoreConfig::PrecisionReduceFlag(b)`; a bare
`AICore().AddConfig("<soc>")` gets precision_reduce.flag=true (hicann/metadef base/asc/opdef/op_def_impl.cc:1325-1333,
1438-1442) and an OpAICoreConfig built without PrecisionReduceFlag carries no flag (gray).

- 910B: the colours of mschecker.npu.device_table (`_MIXLIST`, from hicann/ge's 910B ops-info test fixture); not
  duplicated here.
- 310P: `_MIXLIST_310P` below, from the 310P ops-info of the canndev 2022-06-30 snapshot (TBE ops) and the
  `AddConfig("ascend310p", ...)` of hicann/ops-nn, ops-math, ops-transformer (AscendC ops); rows with no 310P source
  fall back to the 910B colour and say so (`colour_source(...).note` starts with "assumption:").
- An IR type absent from the chip's AI Core ops-info (GE-internal op, AI-CPU op, or an op the public ops-info does
  not list) is GRAY by this module's rule (`in_opsinfo` tells which). GE itself does not judge such a node at all
  (OpFormatDtypeJudge::IsNoNeedJudge: no FE imply type -> its tensors keep their original dtype); `MixState(absent=
  "keep")` models that instead.

modify_mixlist: `apply_updates` is GE's ModifyMixlistConfigParser::GetPrecisionPolicy on a per-op-type bitmap
(the GE constants below; mschecker.npu.atc.mixlist_updates must build the same bitmaps).

The gray rule (GE's OpFormatDtypeJudge + OpDtypeSelectionStrategyAllowMixPrecisionBase, see MixState): nodes are
judged in topological order; a gray node's inputs are visited non-constant inputs first (index order), then inputs
fed by Const/Constant/Variable; each float input narrows the kernel's dtype candidates to its producer's *current*
output dtype (exact, else a higher-precision float, else a lower one), so the first non-constant float input decides;
a producer that is a non-black Cast from the low dtype to fp32 is looked through. A graph input (Data) is an ordinary
producer with its own dtype (fp32 in an fp32 model), so a gray op fed by the graph input stays fp32.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from mschecker.npu.device_table import (_MIXLIST, CHIPS, COMMITS, Source, _opsinfo_source,  # noqa: F401 (re-exported)
                           ir_types)

COLOURS = ("white", "black", "gray")
LOW_DTYPES = ("fp16", "bf16")

# ------------------------------------------------------------------------------------------------ GE bitmaps
# hicann/ge compiler/engines/nn_engine/utils/common/config_parser/modify_mixlist_config_parser.cc:29-60. AddMixList
# (:208-231) ORs, per op type, 1 ("to-add") or 2 ("to-remove") shifted by 0 (gray-list), 2 (white-list) or
# 4 (black-list). mschecker.npu.atc.mixlist_updates must produce exactly these values.
kPrecisionReduceToAddGrayList = 0b00000001
kPrecisionReduceToRemoveGrayList = 0b00000010
kPrecisionReduceToAddWhiteList = 0b00000100
kPrecisionReduceToRemoveWhiteList = 0b00001000
kPrecisionReduceToAddBlackList = 0b00010000
kPrecisionReduceToRemoveBlackList = 0b00100000
# the only combinations VerifyMixlist accepts (:46-60); any other bitmap fails the whole ATC run
kPrecisionReduceUpdateTemplate = frozenset({
    kPrecisionReduceToRemoveBlackList,
    kPrecisionReduceToRemoveWhiteList,
    kPrecisionReduceToAddGrayList,
    kPrecisionReduceToAddGrayList | kPrecisionReduceToRemoveBlackList,
    kPrecisionReduceToAddGrayList | kPrecisionReduceToRemoveWhiteList,
    kPrecisionReduceToAddWhiteList,
    kPrecisionReduceToAddWhiteList | kPrecisionReduceToRemoveGrayList,
    kPrecisionReduceToAddWhiteList | kPrecisionReduceToRemoveBlackList,
    kPrecisionReduceToAddBlackList,
    kPrecisionReduceToAddBlackList | kPrecisionReduceToRemoveGrayList,
    kPrecisionReduceToAddBlackList | kPrecisionReduceToRemoveWhiteList,
})
# list key ("gray-list" | "white-list" | "black-list") -> shift; update key ("to-add" | "to-remove") -> base bit
LIST_SHIFT: Mapping[str, int] = {"gray-list": 0, "white-list": 2, "black-list": 4}
UPDATE_BIT: Mapping[str, int] = {"to-add": 1, "to-remove": 2}


def bitmap(list_type: str, update_type: str) -> int:
    """The bit AddMixList sets for one entry of `list_type` -> `update_type` (e.g. "black-list", "to-add")."""
    return UPDATE_BIT[update_type] << LIST_SHIFT[list_type]


# ------------------------------------------------------------------------------------------------ 310P data
_CD = "dengguojie/vue-element-admin"
_CD_310P = "ops/built-in/tbe/op_info_cfg/ai_core/ascend310p/aic-ascend310p-ops-info.ini"
_EXTRA_COMMITS = {"hicann/metadef": "786891c02e5a7f509c6ffffd854e33ddefe3527c"}


def _commit(repo: str) -> str:
    return COMMITS.get(repo) or _EXTRA_COMMITS[repo]


# IR type -> line of its "[IRType]" section in the canndev 310P ini; the white ones carry precision_reduce.flag=true
# (the line after the colon), the others no flag. No IR type of the device table is black there.
_CD310P_GRAY: Mapping[str, int] = {
    "InstanceNorm": 8739, "INTrainingUpdateV2": 17687, "GroupNorm": 21160, "LayerNorm": 3014, "BatchNorm": 10079,
    "SoftmaxV2": 8637, "Gelu": 3733, "Sigmoid": 11429, "Swish": 3761, "Exp": 6611, "Erf": 7356, "Tanh": 3698,
    "Sin": 8174, "Cos": 6599, "Sqrt": 3570, "Log": 11441, "Pow": 7926, "RealDiv": 3554, "Reciprocal": 4066,
    "Mish": 18174, "Softplus": 4193, "Softsign": 4256, "Elu": 11162, "Selu": 4342, "Celu": 20697,
    "HardSigmoid": 18693, "HardSwish": 3747, "PRelu": 14546, "LeakyRelu": 14452, "LRN": 15991, "ReduceSum": 10466,
    "ReduceMean": 2666, "ReduceMeanD": 2692, "ReduceProd": 10669, "ReduceProdD": 10694, "ReduceMax": 2828,
    "ReduceMaxD": 2850, "ReduceMin": 2784, "ReduceMinD": 2806, "AccumulateNV2": 11412, "AvgPoolV2": 8338,
    "Add": 3335, "Sub": 4078, "Mul": 11483, "Mod": 7433, "Cast": 4174, "Resize": 20988,
    "ResizeNearestNeighborV2": 6118, "Threshold": 15342, "GatherV2": 2926, "ScatterNdUpdate": 4871,
    "ScatterNdAdd": 7624, "Relu": 4771, "Abs": 4112, "Neg": 3615, "Floor": 8146, "Ceil": 8200, "Round": 8262,
    "Sign": 4126, "Equal": 6282, "Greater": 6301, "GreaterEqual": 3522, "Less": 3538, "LessEqual": 10714,
    "LogicalAnd": 12033, "LogicalOr": 4727, "LogicalNot": 6491, "Identity": 17444, "SelectV2": 12534, "Tile": 2982,
    "Expand": 342, "BitwiseXor": 8129, "Reshape": 17566, "Flatten": 7655, "Squeeze": 17590, "Unsqueeze": 17609,
    "Transpose": 2890, "ConcatD": 6505, "GatherNd": 8860, "Fill": 5189, "OneHot": 416, "PadV3": 18479,
    "Split": 7709, "SplitV": 7748, "DepthToSpace": 11948, "SpaceToDepth": 11926, "ArgMaxV2": 4785, "ArgMin": 4978,
    "NonZero": 19232, "MaxPoolV3": 6735, "ClipByValue": 6085, "Maximum": 4032, "Minimum": 4049,
}
_CD310P_WHITE: Mapping[str, tuple[int, int]] = {  # IR type -> (section line, flag line)
    "MatMulV2": (3898, 3938), "BatchMatMulV2": (3985, 3991), "Conv2D": (9355, 9356),
    "Conv2DTranspose": (9275, 9353),
}
# AscendC ops with an AddConfig("ascend310p", cfg): (repo, path, colour, what the def says)
_DEF_310P: Mapping[str, tuple[str, str, str, str]] = {
    "GeGluV2": ("hicann/ops-nn", "activation/ge_glu_v2/op_host/ge_glu_v2_def.cpp", "white",
                'config310p.PrecisionReduceFlag(true); AddConfig("ascend310p", config310p) (lines 51-72)'),
    "GroupNormSilu": ("hicann/ops-nn", "norm/group_norm_silu/op_host/group_norm_silu_def.cpp", "gray",
                      "ascend310p_config has no PrecisionReduceFlag; AddConfig(\"ascend310p\", ascend310p_config) "
                      "(lines 56-63)"),
    "IsInf": ("hicann/ops-math", "math/is_inf/op_host/is_inf_def.cpp", "white",
              'config310P.PrecisionReduceFlag(true); AddConfig("ascend310p", config310P) (lines 49-65)'),
    "PromptFlashAttention": ("hicann/ops-transformer",
                             "attention/prompt_flash_attention/op_host/prompt_flash_attention_def.cpp", "white",
                             'config_310p...PrecisionReduceFlag(true); AddConfig("ascend310p", config_310p) '
                             "(lines 116-192)"),
}
# IR types of the table with no public 310P source: ops-info names the canndev 310P ini lacks and no AscendC def
# configures for ascend310p. They take the 910B colour, marked as an assumption.
_NO_310P_SOURCE = frozenset({"Cumsum", "IsNan", "Range", "Shape", "ScatterElements", "Trilu", "GatherElements"})
# FlashAttentionScore's def (hicann/ops-transformer attention/flash_attention_score/op_host/
# flash_attention_score_def.cpp) configures ascend910b but not ascend310p: not an AI Core op on 310P.
_NOT_ON_310P = frozenset({"FlashAttentionScore"})

_MIXLIST_310P: dict[str, tuple[str, Source]] = {}
for _ir, _line in _CD310P_GRAY.items():
    _MIXLIST_310P[_ir] = ("gray", Source(_CD, _CD_310P, _commit(_CD),
                                         f"[{_ir}] at line {_line}: no precision_reduce flag (gray)"))
for _ir, (_line, _fline) in _CD310P_WHITE.items():
    _MIXLIST_310P[_ir] = ("white", Source(_CD, _CD_310P, _commit(_CD),
                                          f"[{_ir}] at line {_line}: precision_reduce.flag=true at line {_fline} "
                                          "(white)"))
for _ir, (_repo, _path, _colour, _what) in _DEF_310P.items():
    _MIXLIST_310P[_ir] = (_colour, Source(_repo, _path, _commit(_repo), f"{_what} ({_colour})"))
del _ir, _line, _fline, _repo, _path, _colour, _what


# ------------------------------------------------------------------------------------------------ lookups
def _check_chip(chip: str) -> None:
    if chip not in CHIPS:
        raise KeyError(f"unknown chip {chip!r} (mixlists known: {', '.join(CHIPS)})")


def in_opsinfo(chip: str, ir_type: str) -> bool:
    """Whether the public sources list `ir_type` in the chip's AI Core ops-info (with or without a flag)."""
    _check_chip(chip)
    if chip == "ascend910b":
        return ir_type in _MIXLIST
    return ir_type in _MIXLIST_310P


def colour(chip: str, ir_type: str) -> str:
    """"white", "black" or "gray": the chip's precision_reduce flag for `ir_type` before any modify_mixlist.
    An IR type absent from the chip's ops-info is "gray" (module docstring)."""
    _check_chip(chip)
    if chip == "ascend910b":
        return _MIXLIST.get(ir_type, ("gray", ""))[0]
    if ir_type in _MIXLIST_310P:
        return _MIXLIST_310P[ir_type][0]
    if ir_type in _NO_310P_SOURCE:
        return _MIXLIST.get(ir_type, ("gray", ""))[0]
    return "gray"


def colour_source(chip: str, ir_type: str) -> Source:
    """Where `colour(chip, ir_type)` comes from; for a fallback, the note starts with "assumption:"."""
    _check_chip(chip)
    if chip == "ascend910b":
        return _opsinfo_source(ir_type)
    if ir_type in _MIXLIST_310P:
        return _MIXLIST_310P[ir_type][1]
    if ir_type in _NO_310P_SOURCE:
        base = _opsinfo_source(ir_type)
        return Source(base.repo, base.path, base.commit,
                      f"assumption: {ir_type} is in neither the canndev 310P ops-info ({_CD_310P}) nor an AscendC "
                      f"def with an ascend310p config; the 910B colour ({colour('ascend910b', ir_type)}) is used")
    if ir_type in _NOT_ON_310P:
        return Source("hicann/ops-transformer",
                      "attention/flash_attention_score/op_host/flash_attention_score_def.cpp",
                      _commit("hicann/ops-transformer"),
                      f"{ir_type}: AddConfig for ascend910b only, none for ascend310p: absent from the 310P AI Core "
                      "ops-info, gray by rule")
    return Source(_CD, _CD_310P, _commit(_CD), f"{ir_type} is absent from the 310P ops-info (GE-internal or AI-CPU "
                                               "op, or not public): gray by rule")


def apply_updates(chip: str, ir_type: str, updates: Mapping[str, int]) -> str:
    """The colour of `ir_type` after --modify_mixlist: GE's GetPrecisionPolicy (modify_mixlist_config_parser.cc:
    265-294). `updates`: op type -> GE bitmap (kPrecisionReduce*). A "to-remove" of the list the op is in resets it
    to gray (a remove of another list only warns in GE); then any "to-add" of black-list makes it black, else any
    "to-add" of white-list makes it white; "to-add" of gray-list alone changes nothing. A bitmap outside
    kPrecisionReduceUpdateTemplate is refused (ValueError), as VerifyMixlist fails ATC."""
    base = colour(chip, ir_type)
    bits = updates.get(ir_type)
    if bits is None:
        return base
    if bits not in kPrecisionReduceUpdateTemplate:
        raise ValueError(f"modify_mixlist: bitmap {bits:#010b} for op type {ir_type!r} is not a combination ATC "
                         "accepts (VerifyMixlist)")
    out = base
    if ((bits & kPrecisionReduceToRemoveBlackList and base == "black")
            or (bits & kPrecisionReduceToRemoveWhiteList and base == "white")
            or (bits & kPrecisionReduceToRemoveGrayList and base == "gray")):
        out = "gray"
    if bits & kPrecisionReduceToAddBlackList:
        out = "black"
    elif bits & kPrecisionReduceToAddWhiteList:
        out = "white"
    return out


def remove_mismatches(chip: str, updates: Mapping[str, int]) -> list[str]:
    """GE's warnings: op types whose "to-remove" names a list the op is not in (no effect)."""
    out = []
    for ir, bits in sorted(updates.items()):
        base = colour(chip, ir)
        for bit, name in ((kPrecisionReduceToRemoveBlackList, "black"), (kPrecisionReduceToRemoveWhiteList, "white"),
                          (kPrecisionReduceToRemoveGrayList, "gray")):
            if bits & bit and base != name:
                out.append(f"{ir}: to-remove from {name}-list, but {ir} is {base} on {chip}: ignored")
    return out


# ------------------------------------------------------------------------------------------------ the gray rule
_FLOATS = ("float32", "float16", "bfloat16")
_PRIO = {"float32": 100000, "bfloat16": 200000, "float16": 200001}  # DATATYPE_PRIORITY_MAP_AMPLIFIED
_CROSS, _HIGH = 100, 1000000                                         # CROSS_GAP_AMPLIFIED, HIGH_GAP_AMPLIFIED
_LOW_NAME = {"fp16": "float16", "bf16": "bfloat16"}
_CONST_TYPES = frozenset({"Const", "Constant", "Variable"})
_ALIASES = {"float": "float32", "fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def _norm(dtype: str) -> str:
    d = str(dtype).lower()
    return _ALIASES.get(d, d)


def _rise(cands: list[str], expected: str) -> list[str]:
    """OpDtypeRiseMatcher on float candidates: exact match, else higher-precision floats (closest first)."""
    exact = [d for d in cands if d == expected]
    if exact:
        return exact
    ups = [d for d in cands if _CROSS < _PRIO[expected] - _PRIO[d] < _HIGH]
    return sorted(ups, key=lambda d: _PRIO[expected] - _PRIO[d])


def _reduce(cands: list[str], expected: str) -> list[str]:
    """OpDtypeReduceMatcher on float candidates: lower-precision floats, smallest priority gap first."""
    downs = [d for d in cands if 0 < _PRIO[d] - _PRIO[expected] < _HIGH]
    return sorted(downs, key=lambda d: _PRIO[d] - _PRIO[expected])


@dataclass
class _Tensor:
    orig: str            # original dtype
    current: str         # dtype after the producer's judgement
    producer: str = ""   # "" for graph inputs and constants
    const: bool = False  # produced by Const/Constant/Variable (or an initializer)


@dataclass
class MixState:
    """GE's mixed-precision dtype judgement, streamed over a graph in topological order.

    chip: "ascend910b" | "ascend310p"; low: "fp16" (allow_mix_precision[_fp16], mixed_float16) or "bf16"
    (allow_mix_precision_bf16, mixed_bfloat16; 910B only); updates: modify_mixlist bitmaps (op type -> bits);
    absent: what a node whose IR type is not in the chip's AI Core ops-info does: "gray" (this module's rule:
    follow the predecessor) or "keep" (GE's IsNoNeedJudge: not judged, original dtypes).

    Register graph inputs with `graph_input` and initializers with `constant`, then call `decide` per node in
    topological order; it returns True when the node's float tensors run in the low dtype and records its outputs.

    Not modelled: per-kernel dtype support beyond the `low_ok`/`fp32_ok` flags of `decide` (a kernel's ops-info
    dtype list), fp16_op_type_list, customize_dtypes (OpName/OpType rows), the `_inherit_dtype_from_predecessor`
    attribute fusions set, promote-type ops, and the opFile=Null ops that GE judges with its fp16 strategy object
    even in bf16 mode (their white entries could pick fp16 there)."""

    chip: str
    low: str = "fp16"
    updates: Mapping[str, int] = field(default_factory=dict)
    absent: str = "gray"
    tensors: dict[str, _Tensor] = field(default_factory=dict)
    decisions: dict[str, bool] = field(default_factory=dict)
    colours: dict[str, str] = field(default_factory=dict)
    # Cast node name -> (its input tensor, that tensor's original dtype, the Cast's output original dtype)
    _cast_in: dict[str, tuple[str, str, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _check_chip(self.chip)
        if self.low not in LOW_DTYPES:
            raise ValueError(f"low dtype {self.low!r}: one of {', '.join(LOW_DTYPES)}")
        if self.low == "bf16" and self.chip == "ascend310p":
            # docs/zh/user_guides/atc_tools/CLI_options/--precision_mode.md:54-56: bf16 only on A2/A3 products
            raise ValueError("allow_mix_precision_bf16 / mixed_bfloat16: the 310P has no bfloat16 (ATC supports "
                             "bfloat16 on Atlas A2/A3 only)")
        if self.absent not in ("gray", "keep"):
            raise ValueError(f"absent={self.absent!r}: 'gray' or 'keep'")
        for ir, bits in self.updates.items():
            if bits not in kPrecisionReduceUpdateTemplate:
                raise ValueError(f"modify_mixlist: bitmap {bits:#010b} for op type {ir!r} is not a combination "
                                 "ATC accepts (VerifyMixlist)")

    @property
    def low_dtype(self) -> str:
        return _LOW_NAME[self.low]

    # ---- registration
    def graph_input(self, name: str, dtype: str = "float32") -> None:
        """A graph input (GE Data node): an ordinary producer whose output keeps `dtype`."""
        d = _norm(dtype)
        self.tensors[name] = _Tensor(d, d)

    def constant(self, name: str, dtype: str = "float32") -> None:
        """An initializer or Constant node output (GE Const): visited after the non-constant inputs."""
        d = _norm(dtype)
        self.tensors[name] = _Tensor(d, d, const=True)

    def colour_of(self, ir_type: str) -> str:
        return apply_updates(self.chip, ir_type, self.updates)

    # ---- the judgement
    def _forbidden(self, orig: str) -> str | None:
        # RunStrategyWithPrecisionMode (op_format_dtype_strategy_manager.cc:26-45)
        if self.low == "fp16":
            return None if orig == "bfloat16" else "bfloat16"
        return None if orig == "float16" else "float16"

    def _candidates(self, orig: str, low_ok: bool, fp32_ok: bool) -> list[str]:
        forb = self._forbidden(orig)
        out = []
        for d in _FLOATS:
            if d == forb or (d == "float32" and not fp32_ok) or (d != "float32" and not low_ok):
                continue
            out.append(d)
        return out

    def _father_dtype(self, name: str) -> str:
        """The producer's current output dtype, looking through a non-black Cast low -> fp32 (or low -> the other
        16-bit type): IsOpFp16Bf16Fp32Cast (allow_mix_precision_base.cc:30-64, 226-238)."""
        t = self.tensors[name]
        prod = t.producer
        if prod and self._cast_in.get(prod) is not None:
            src_name, src_orig, dst_orig = self._cast_in[prod]
            lowname = self.low_dtype
            other = "bfloat16" if lowname == "float16" else "float16"
            if (self.colour_of("Cast") != "black" and src_orig == lowname
                    and dst_orig in ("float32", other) and src_name in self.tensors):
                return self.tensors[src_name].current
        return t.current

    def decide(self, name: str, ir_type: str | None, inputs: Sequence[str], outputs: Sequence[str] = (), *,
               out_dtypes: Sequence[str] | None = None, keep_dtype: bool = False, low_ok: bool = True,
               fp32_ok: bool = True) -> bool:
        """Judge one node (topological order) and record its outputs; True = its float tensors run in the low dtype.

        inputs: tensor names in input-index order ("" = an absent optional input); they must have been produced
        by earlier nodes or registered with graph_input/constant. out_dtypes: the outputs' original dtypes (default
        float32). ir_type None = no Ascend IR type (treated as absent from the ops-info). keep_dtype: the node is
        named by --keep_dtype (GE runs allow_fp32_to_fp16 on it: original dtypes). low_ok / fp32_ok: the kernel
        supports the low dtype / fp32 for its float tensors (default both)."""
        outs = list(outputs)
        odt = [_norm(d) for d in (out_dtypes or ["float32"] * len(outs))]
        if len(odt) != len(outs):
            raise ValueError(f"{name}: {len(outs)} outputs but {len(odt)} out_dtypes")
        ins = [i for i in inputs]
        for i in ins:
            if i and i not in self.tensors:
                raise KeyError(f"{name}: input {i!r} was not produced by an earlier node nor registered as a graph "
                               "input or constant (nodes must come in topological order)")
        if ir_type in _CONST_TYPES:
            for o, d in zip(outs, odt):
                self.tensors[o] = _Tensor(d, d, producer=name, const=True)
            self.decisions[name] = False
            return False
        known = ir_type is not None and in_opsinfo(self.chip, ir_type)
        col = self.colour_of(ir_type) if ir_type is not None else "gray"
        self.colours[name] = col if (known or self.absent == "gray") else "absent"
        float_ins = [i for i in ins if i and self.tensors[i].orig in _FLOATS]
        orig = self.tensors[float_ins[0]].orig if float_ins else (odt[0] if odt else "float32")
        if ir_type == "Cast" and ins and ins[0]:
            self._cast_in[name] = (ins[0], self.tensors[ins[0]].orig, odt[0] if odt else "float32")
        if not known and self.absent == "keep":
            chosen = None
        elif keep_dtype or ir_type == "Cast" or col == "black":
            # keep_dtype / IsDtypeSensitiveOp(Cast) -> allow_fp32_to_fp16 (strategy_manager.cc:229-233); black ->
            # RunForOpInBlackList (default mode): the original dtypes
            chosen = None
        elif not float_ins and not any(d in _FLOATS for d in odt):
            chosen = None
        elif col == "white":
            # RunForOpInWhiteList: OpDtypeMixPrecisionMatcher keeps fp16/bf16 entries (minus the forbidden one);
            # none -> warning, the kernel's other dtypes stay
            cands = [d for d in self._candidates(orig, low_ok, fp32_ok) if d != "float32"]
            chosen = cands[0] if cands else None
        else:
            chosen = self._gray(ins, orig, low_ok, fp32_ok)
        lowered = chosen is not None and chosen != "float32" and chosen == self.low_dtype
        for o, d in zip(outs, odt):
            cur = chosen if (chosen is not None and d in _FLOATS) else d
            self.tensors[o] = _Tensor(d, cur, producer=name)
        self.decisions[name] = lowered
        return lowered

    def _gray(self, ins: Sequence[str], orig: str, low_ok: bool, fp32_ok: bool) -> str | None:
        """RunForOpInGrayList over the inputs in SortInputBySequence order (op_format_dtype_judge.cc:674-713)."""
        cands = self._candidates(orig, low_ok, fp32_ok)
        order = [i for i in ins if i and not self.tensors[i].const] + [i for i in ins if i and self.tensors[i].const]
        for i in order:
            if self.tensors[i].orig not in _FLOATS:
                continue  # a non-float input matches its own (integer/bool) entries and leaves the float choice
            expected = self._father_dtype(i)
            if expected not in _PRIO:
                continue
            got = _rise(cands, expected) or _reduce(cands, expected)  # MatchForGray (base.cc:161-184)
            if got:
                cands = got
        if not cands:
            return None
        if len(cands) > 1:
            # no float input decided: outputs run allow_fp32_to_fp16 (or _bf16) on their original dtype (fp32):
            # exact match first (has_no_father branch, base.cc:197-215)
            got = _rise(cands, orig if orig in _PRIO else "float32") or _reduce(cands, "float32")
            cands = got or cands
        return cands[0]


def lowered(chip: str, nodes: Iterable[tuple], *, graph_inputs: Mapping[str, str] | Iterable[str] = (),
            constants: Mapping[str, str] | Iterable[str] = (), low: str = "fp16",
            updates: Mapping[str, int] | None = None, absent: str = "gray") -> dict[str, bool]:
    """Batch form of MixState: nodes = (name, ir_type, inputs, outputs) tuples in topological order (an optional
    fifth item: the outputs' original dtypes); graph_inputs / constants: names, or name -> dtype. Returns
    node name -> True when the node runs in the low dtype."""
    st = MixState(chip, low=low, updates=dict(updates or {}), absent=absent)
    for src, add in ((graph_inputs, st.graph_input), (constants, st.constant)):
        items = src.items() if isinstance(src, Mapping) else ((n, "float32") for n in src)
        for n, d in items:
            add(n, d)
    for node in nodes:
        name, ir, ins, outs = node[:4]
        st.decide(name, ir, ins, outs, out_dtypes=node[4] if len(node) > 4 else None)
    return dict(st.decisions)
