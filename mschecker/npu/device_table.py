"""The device kernel table: what the Ascend kernel behind each IR op computes for fp16 input, and which registry
variant the emulator runs for it.

Why a table: an emulated NPU is only as good as its per-op model, and those models used to be chosen by the
implmode alone (high_performance -> fp16-accumulating variants). What a real part computes is decided by the
kernel that ATC binds to the Ascend IR op, read from public source: the ONNX parser plugins decide the IR type
(`*/framework/*onnx_plugin.cpp` in hicann/ops-nn and hicann/ops-math), `all_ops_impl_mode.ini` decides whether an
implmode exists at all, the 910B ops-info decides the mixlist colour, and the kernel source decides the
algorithm. One declarative `DeviceKernel` per IR op (OpInfo style) records that, with `Source(repo, path,
commit)` citations of the versions read; the policy, the device plan and the docs read this one table.

Status. "source": the kernel is public and the row says what it computes (where the named registry variant does
not implement every detail, `algorithm` says "Not modelled: ..."). "assumption": the numerics are not settled
by public source -- the kernel is closed (e.g. the CANN 8.x 910B GroupNorm), or they rest on the accuracy of
fp16 hardware instructions (vexp, vrec, vlog, vdiv in fp16) or on an undocumented accumulation order, or the
ONNX op has no parser plugin; `assumption` says what is assumed and `brackets` give an "optimistic" (more
accurate) and a "pessimistic" (less accurate) choice of registry variants around the modelled one.
Premises for every row: fp16 add/sub/mul/max/min and fp32 arithmetic on the vector unit round to nearest even;
cube (matrix) ops multiply fp16 exactly and accumulate in fp32 (L0C).

Caveat: the 910B/310P TBE/TIK kernels cited are the 2022-06 canndev snapshot (GitHub mirror
dengguojie/vue-element-admin); hicann/ops-nn and ops-math carry AscendC successors only for ascend950 for most
of these ops. Current CANN 8.x may run rewritten kernels; docs/DEVICE_KERNELS.md lists what a device run settles.

`ir_type_of` gives the IR type the device runs for an ONNX node: the plugin's type after GE's one-to-one
retyping passes (ConstToAttrPass: ReduceMean with constant axes -> ReduceMeanD; Globalavgpoolpass:
GlobalAveragePool -> ReduceMeanD), but before multi-node fusions (those are mschecker.npu.fusion's business).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

CHIPS = ("ascend910b", "ascend310p")
STATUSES = ("source", "assumption")
MIXLISTS = ("white", "black", "gray")
BRACKETS = ("optimistic", "pessimistic")

# The versions read (full commits), one per repository.
COMMITS: Mapping[str, str] = {
    "hicann/ops-nn": "e5c3fa9327ea95ba26d06227e746923580d10921",
    "hicann/ops-math": "c41933244c31e44fd496e3bb3212164f8c48c214",
    "hicann/ops-transformer": "c29bc1069d3252c641e2aa059ec88f392d3f05ac",
    "hicann/ge": "ffdcbc9f7496c17a98c1d12762c61ed608ef3503",
    "dengguojie/vue-element-admin": "7d77ce32d0541475052616d118df360baf50a5f5",  # canndev 2022-06-30 mirror
    "Ascend/ModelZoo-PyTorch": "f2a6898cfa96a8dac17f82d8da7b30c772f17fd4",  # SD recipe, 2023-10-10
}
KNOWN_REPOS = tuple(COMMITS)
REPO_ROLES: Mapping[str, str] = {
    "hicann/ops-nn": "AscendC nn ops, ONNX plugins, all_ops_impl_mode.ini",
    "hicann/ops-math": "AscendC math ops, ONNX plugins (similar_opp_onnx_plugin.cpp), all_ops_impl_mode.ini",
    "hicann/ops-transformer": "FlashAttentionScore, PromptFlashAttention",
    "hicann/ge": "ONNX parser, 910B ops-info fixture (mixlist flags)",
    "dengguojie/vue-element-admin": "canndev 2022-06 snapshot: 910B/310P TBE/TIK kernels and GE fusion passes",
    "Ascend/ModelZoo-PyTorch": "Huawei's Stable Diffusion ATC recipe (ACL_PyTorch/built-in/foundation_models/"
                               "stable_diffusion)",
}


@dataclass(frozen=True)
class Source:
    """One file read, at one commit."""

    repo: str
    path: str
    commit: str
    note: str = ""

    def __str__(self) -> str:
        return f"{self.repo}:{self.path}@{self.commit}"


@dataclass(frozen=True)
class DeviceKernel:
    """What the kernel behind one Ascend IR op computes for fp16 input (module docstring)."""

    ir_type: str                 # Ascend IR op type ("InstanceNorm", "GroupNorm", "SoftmaxV2", "Gelu", ...)
    onnx_types: tuple[str, ...]  # ONNX op types the ONNX parser plugins map to it (unfused); () for fusion-only
    algorithm: str               # what the device computes for fp16 input
    internal: str                # internal precision for fp16 input ("fp32 statistics", "fp16", "exact", ...)
    implmodes: tuple[str, ...]   # () when the op is not in all_ops_impl_mode.ini (no implmode exists)
    implmode_effect: str         # what each mode changes ("" when none)
    mixlist: str                 # "white" | "black" | "gray" (precision_reduce flag of the 910B ops-info)
    variants: Mapping[str, Mapping[str, str]]  # registry kernel -> {"any" | implmode: variant}; {} = no kernel
    sources: tuple[Source, ...]
    status: str                  # "source" | "assumption"
    assumption: str = ""         # where status == "assumption": what is assumed and why
    brackets: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)
    chips: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per-chip field overrides


# ------------------------------------------------------------------------------------------------ sources
_OPSINFO_DIR = ("tests/engines/nn_engine/depends/CANN_910b_stub/cann/opp/built-in/op_impl/ai_core/tbe/config/"
                "ascend910b/aic-ascend910b-ops-info-")
_INI = "scripts/kernel/binary_config/all_ops_impl_mode.ini"
_SIMILAR = "common/src/framework/similar_opp_onnx_plugin.cpp"
_TBE = "ops/built-in/tbe/impl/"
_DYN = _TBE + "dynamic/"
_PASS = "ops/built-in/fusion_pass/graph_fusion/ai_core/"
_SD = "ACL_PyTorch/built-in/foundation_models/stable_diffusion/"


def _src(repo: str, path: str, note: str = "") -> Source:
    return Source(repo, path, COMMITS[repo], note)


def _nn(path: str, note: str = "") -> Source:
    return _src("hicann/ops-nn", path, note)


def _math(path: str, note: str = "") -> Source:
    return _src("hicann/ops-math", path, note)


def _tf(path: str, note: str = "") -> Source:
    return _src("hicann/ops-transformer", path, note)


def _ge(path: str, note: str = "") -> Source:
    return _src("hicann/ge", path, note)


def _cd(path: str, note: str = "") -> Source:
    """canndev (2022-06 snapshot, mirrored in dengguojie/vue-element-admin)."""
    return _src("dengguojie/vue-element-admin", path, note)


def _zoo(path: str, note: str = "") -> Source:
    return _src("Ascend/ModelZoo-PyTorch", _SD + path, note)


def _similar(onnx: str, ir: str) -> Source:
    return _math(_SIMILAR, f"REGISTER_CUSTOM_ONNX_OP(ai.onnx::<opset>::{onnx}, {ir}, ...)")


# all_ops_impl_mode.ini of hicann/ops-nn and hicann/ops-math at COMMITS (op types are Ascend IR types): the union,
# modes in file order. The two files agree where both list an op; MatMul, MatMulV2, BatchMatMul, BatchMatMulV2,
# INInferV2 and a few others are in the ops-math file only, ThresholdV2 and Conv3D*V2 in the ops-nn file only.
IMPLMODE_INI: Mapping[str, tuple[str, ...]] = {
    "AvgPoolV2": ("high_performance", "high_precision"),
    "BasicLSTMCellV2": ("high_performance", "high_precision"),
    "BasicRNN": ("high_performance", "high_precision"),
    "BatchMatMul": ("high_performance", "high_precision", "enable_float_32_execution",
                    "enable_hi_float_32_execution"),
    "BatchMatMulV2": ("high_performance", "high_precision", "enable_float_32_execution",
                      "enable_hi_float_32_execution"),
    "BatchMultiClassNonMaxSuppression": ("high_performance", "high_precision"),
    "ChamferDistanceGrad": ("optional",),
    "CombinedNonMaxSuppression": ("high_performance", "high_precision"),
    "Conv2D": ("high_performance", "high_precision", "enable_float_32_execution", "enable_hi_float_32_execution"),
    "Conv2DBackpropFilter": ("high_performance", "high_precision", "enable_float_32_execution",
                             "enable_hi_float_32_execution"),
    "Conv2DBackpropFilterD": ("high_performance", "high_precision", "enable_float_32_execution",
                              "enable_hi_float_32_execution"),
    "Conv2DBackpropInput": ("high_performance", "high_precision", "enable_float_32_execution",
                            "enable_hi_float_32_execution"),
    "Conv2DBackpropInputD": ("high_performance", "high_precision", "enable_float_32_execution",
                             "enable_hi_float_32_execution"),
    "Conv2DTranspose": ("high_performance", "high_precision", "enable_float_32_execution",
                        "enable_hi_float_32_execution"),
    "Conv2DTransposeD": ("high_performance", "high_precision", "enable_float_32_execution",
                         "enable_hi_float_32_execution"),
    "Conv3D": ("high_performance", "high_precision", "enable_float_32_execution", "enable_hi_float_32_execution"),
    "Conv3DBackpropFilterV2": ("high_performance", "enable_hi_float_32_execution"),
    "Conv3DBackpropInputV2": ("high_performance", "enable_hi_float_32_execution"),
    "Conv3DTransposeV2": ("high_performance", "enable_hi_float_32_execution"),
    "DepthwiseConv2D": ("high_performance", "high_precision", "enable_float_32_execution",
                        "enable_hi_float_32_execution"),
    "DepthwiseConv2DBackpropFilter": ("high_performance", "high_precision", "enable_float_32_execution",
                                      "enable_hi_float_32_execution"),
    "DepthwiseConv2DBackpropFilterD": ("high_performance", "high_precision", "enable_float_32_execution",
                                       "enable_hi_float_32_execution"),
    "DepthwiseConv2DBackpropInput": ("high_performance", "high_precision", "enable_float_32_execution",
                                     "enable_hi_float_32_execution"),
    "DepthwiseConv2DBackpropInputD": ("high_performance", "high_precision", "enable_float_32_execution",
                                      "enable_hi_float_32_execution"),
    "Dot": ("high_performance", "high_precision"),
    "DynamicLSTMV2": ("high_performance", "high_precision"),
    "EmbeddingDenseGrad": ("high_performance", "high_precision"),
    "Exp": ("high_performance", "high_precision"),
    "FastGelu": ("high_performance", "high_precision"),
    "FastGeluGrad": ("high_performance", "high_precision"),
    "FastGeluV2": ("high_performance", "high_precision"),
    "FloorMod": ("high_performance", "high_precision"),
    "FullyConnection": ("high_performance", "high_precision", "enable_float_32_execution",
                        "enable_hi_float_32_execution"),
    "GEMM": ("high_performance", "high_precision", "enable_float_32_execution", "enable_hi_float_32_execution"),
    "Gather": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "GatherV2": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "Gelu": ("high_performance", "high_precision"),
    "GeluGrad": ("high_performance", "high_precision"),
    "GeluGradV2": ("high_performance", "high_precision"),
    "GeluV2": ("high_performance", "high_precision"),
    "INInferV2": ("high_performance", "high_precision"),
    "KMeansCentroids": ("high_performance", "high_precision"),
    "LNDropoutGrad": ("high_performance", "high_precision"),
    "LRN": ("high_performance", "high_precision"),
    "LayerNorm": ("high_performance", "high_precision", "keep_fp16"),
    "LayerNormV3": ("high_performance", "high_precision", "keep_fp16"),
    "Lerp": ("high_performance", "high_precision"),
    "LogSoftmaxV2": ("high_performance", "high_precision"),
    "LogSpaceD": ("high_performance", "high_precision"),
    "MatMul": ("high_performance", "high_precision", "enable_float_32_execution", "enable_hi_float_32_execution"),
    "MatMulV2": ("high_performance", "high_precision", "enable_float_32_execution", "enable_hi_float_32_execution"),
    "Mish": ("high_performance", "high_precision", "super_performance"),
    "MishGrad": ("high_performance", "high_precision"),
    "Pooling": ("high_performance", "high_precision"),
    "ROIAlign": ("high_performance", "high_precision"),
    "RealDiv": ("high_performance", "high_precision"),
    "ReduceLogSum": ("high_performance", "high_precision"),
    "ReduceLogSumExp": ("high_performance", "high_precision"),
    "ReduceMean": ("high_performance", "high_precision"),
    "ReduceMeanWithCount": ("high_performance", "high_precision"),
    "ReluGradV2": ("high_performance", "high_precision"),
    "ScatterAdd": ("high_precision", "support_out_of_bound_index"),
    "ScatterNd": ("high_precision", "support_out_of_bound_index"),
    "ScatterNdAdd": ("high_precision", "support_out_of_bound_index"),
    "ScatterNdSub": ("high_precision", "support_out_of_bound_index"),
    "ScatterNdUpdate": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "ScatterSub": ("high_precision", "support_out_of_bound_index"),
    "ScatterUpdate": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "SegmentSum": ("high_performance", "high_precision"),
    "Sigmoid": ("high_performance", "high_precision"),
    "SigmoidFocalLoss": ("high_performance", "high_precision"),
    "SoftShrink": ("high_performance", "high_precision"),
    "SoftmaxCrossEntropyWithLogits": ("high_performance", "high_precision"),
    "SoftmaxFocalLoss": ("high_performance", "high_precision"),
    "SoftmaxGrad": ("high_performance", "high_precision"),
    "SoftmaxV2": ("high_performance", "high_precision"),
    "Sqrt": ("high_performance", "high_precision"),
    "SquareSumV1": ("high_performance", "high_precision"),
    "Tanh": ("high_performance", "high_precision"),
    "Threshold": ("high_performance", "high_precision"),
    "ThresholdV2": ("high_performance", "high_precision"),
    "TransData": ("optional",),
    "UnsortedSegmentMax": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "UnsortedSegmentMin": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "UnsortedSegmentProd": ("high_performance", "high_precision", "support_out_of_bound_index"),
    "UnsortedSegmentSum": ("high_performance", "high_precision", "support_out_of_bound_index"),
}
IMPLMODE_OPS = frozenset(IMPLMODE_INI)
_INI_ONLY_IN_MATH = frozenset({"MatMul", "MatMulV2", "BatchMatMul", "BatchMatMulV2", "INInferV2"})

# precision_reduce flags of the 910B ops-info fixture (hicann/ge), IR type -> (colour, file); IR types absent from
# the fixture (GE-internal or AI-CPU ops) are gray: no flag means "follow the predecessor".
_MIXLIST: Mapping[str, tuple[str, str]] = {
    **{ir: ("gray", "legacy") for ir in (
        "InstanceNorm", "INTrainingReduceV2", "INTrainingUpdateV2", "GroupNorm", "LayerNorm", "SoftmaxV2", "Gelu",
        "Sigmoid", "Swish", "Exp", "Erf", "Tanh", "Sin", "Cos", "Sqrt", "RealDiv", "Reciprocal", "ReduceMean",
        "ReduceMax", "ReduceMaxD", "ReduceMin", "ReduceMinD", "Mish", "LRN", "Softplus", "Softsign", "Elu", "Selu",
        "Celu", "HardSigmoid", "HardSwish", "PRelu", "LeakyRelu", "Relu", "Abs", "Neg", "Add", "Sub", "Mul",
        "Cast", "AccumulateNV2", "Resize", "ResizeNearestNeighborV2", "AvgPoolV2", "BatchNorm", "ClipByValue",
        "Maximum", "Minimum", "Floor", "Ceil", "Round", "Sign", "Equal", "Greater", "GreaterEqual", "Less",
        "LessEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "BitwiseXor", "IsNan", "Reshape", "Flatten",
        "Squeeze", "Unsqueeze", "Transpose", "ConcatD", "GatherV2", "GatherElements", "GatherNd", "Shape", "Tile",
        "Expand", "Range", "Identity", "SelectV2", "Fill", "OneHot", "PadV3", "Split", "SplitV", "DepthToSpace",
        "SpaceToDepth", "ArgMaxV2", "ArgMin", "Cumsum", "ScatterNdUpdate", "ScatterNdAdd", "ScatterElements",
        "NonZero", "Mod", "Trilu", "Threshold")},
    **{ir: ("black", "legacy") for ir in ("Log", "Pow", "ReduceSum", "ReduceMeanD", "ReduceProd", "ReduceProdD")},
    **{ir: ("white", "legacy") for ir in ("BatchMatMulV2", "MatMulV2", "Conv2D", "Conv2DTranspose", "MaxPoolV3")},
    "IsInf": ("white", "math"),
    "GroupNormSilu": ("gray", "nn"),
    "GeGluV2": ("white", "nn"),
    "FlashAttentionScore": ("white", "transformer"),
    "PromptFlashAttention": ("white", "transformer"),
}

# ONNX op types with no public parser plugin (no REGISTER_CUSTOM_OP for them in hicann/ops-nn, ops-math,
# ops-transformer, and GE's ONNX parser only builds ai.onnx::<opset>::<type> names that the plugins register for
# opsets 8..18): ATC would reject them. The emulator still runs them; the row named is the nearest device op.
NO_PLUGIN: Mapping[str, str] = {
    "Gelu": "Gelu",                              # ai.onnx::20::Gelu
    "GroupNormalization": "GroupNorm",           # ai.onnx::18/21::GroupNormalization
    "Attention": "Attention",                    # ai.onnx::23::Attention
}


# ------------------------------------------------------------------------------------------------ row builder
def _expand(spec: Mapping[str, Any], modes: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """variants shorthand: kernel -> variant name (the same for every mode, or "any" without implmodes) or an
    explicit {mode: variant} mapping."""
    out: dict[str, dict[str, str]] = {}
    for kernel, v in spec.items():
        if isinstance(v, str):
            out[kernel] = {m: v for m in modes} if modes else {"any": v}
        else:
            out[kernel] = dict(v)
    return out


def _ini_sources(ir: str) -> tuple[Source, ...]:
    modes = IMPLMODE_INI.get(ir)
    if modes is None:
        note = f"does not list {ir}: no implmode"
        return _nn(_INI, note), _math(_INI, note)
    listed = f"{ir}={','.join(modes)}"
    if ir in _INI_ONLY_IN_MATH:
        return _nn(_INI, f"does not list {ir}"), _math(_INI, listed)
    return _nn(_INI, listed), _math(_INI, listed)


def _opsinfo_source(ir: str) -> Source:
    colour, file = _MIXLIST.get(ir, ("gray", None))
    if file is None:
        return _ge(_OPSINFO_DIR + "legacy.json", f"{ir} is absent from the 910B ops-info fixture (GE-internal or "
                                                 "AI-CPU op): no precision_reduce flag, gray")
    flag = {"white": "precision_reduce.flag=true", "black": "precision_reduce.flag=false",
            "gray": "no precision_reduce flag"}[colour]
    return _ge(_OPSINFO_DIR + f"{file}.json", f"{ir}: {flag} ({colour})")


_ROWS: dict[str, DeviceKernel] = {}
_FIELDS = {f.name for f in dataclasses.fields(DeviceKernel)}


def _k(ir: str, onnx: tuple[str, ...] = (), *, algorithm: str, internal: str, variants: Mapping[str, Any] = None,
       sources: tuple[Source, ...] = (), status: str = "source", assumption: str = "", implmode_effect: str = "",
       brackets: Mapping[str, Mapping[str, Any]] = None, chips: Mapping[str, Mapping[str, Any]] = None,
       cite_ini: bool = True) -> None:
    """Declare one row: implmodes come from IMPLMODE_INI, the mixlist from the ops-info, and the ini/ops-info
    citations are appended."""
    if ir in _ROWS:
        raise ValueError(f"device table: IR type {ir!r} declared twice")
    modes = IMPLMODE_INI.get(ir, ())
    extra = (_ini_sources(ir) if cite_ini or modes else ()) + (_opsinfo_source(ir),)
    overrides = {}
    for chip, o in (chips or {}).items():
        if chip not in CHIPS:
            raise ValueError(f"device table: {ir}: unknown chip {chip!r} (chips: {', '.join(CHIPS)})")
        bad = sorted(set(o) - _FIELDS - {"ir_type", "chips"} | (set(o) & {"ir_type", "chips"}))
        if bad:
            raise ValueError(f"device table: {ir}: chip override of {bad}")
        o = dict(o)
        if "variants" in o:
            o["variants"] = _expand(o["variants"], modes)
        if "brackets" in o:
            o["brackets"] = {b: _expand(m, modes) for b, m in o["brackets"].items()}
        if "sources" in o:
            o["sources"] = tuple(o["sources"]) + extra
        overrides[chip] = o
    _ROWS[ir] = DeviceKernel(
        ir_type=ir, onnx_types=tuple(onnx), algorithm=algorithm, internal=internal, implmodes=modes,
        implmode_effect=implmode_effect, mixlist=_MIXLIST.get(ir, ("gray", ""))[0],
        variants=_expand(variants or {}, modes), sources=tuple(sources) + extra, status=status,
        assumption=assumption, brackets={b: _expand(m, modes) for b, m in (brackets or {}).items()},
        chips=overrides)


def _exact(ir: str, onnx: tuple[str, ...], plugin: Source, algorithm: str = "data movement: copies values",
           *, internal: str = "exact", implmode_effect: str = "", sources: tuple[Source, ...] = ()) -> None:
    """A row whose values are copied or compared, never rounded: no registry kernel, nothing to model."""
    _k(ir, onnx, algorithm=algorithm, internal=internal, sources=(plugin,) + tuple(sources),
       implmode_effect=implmode_effect, cite_ini=False)


# ------------------------------------------------------------------------------------------------ rows: norms
_k("InstanceNorm", ("InstanceNormalization",),
   algorithm="TBE instance_norm (static; opFile instance_norm): fp16 -> fp32; two-pass: mean = sum(x*(1/n)), "
             "var = sum((x-mean)^2*(1/n)) (the multiply by 1/n before each sum); rstd = 1/sqrt(var+eps) (vsqrt "
             "then vdiv); y = gamma*((x-mean)*rstd) + beta in fp32; one cast to fp16. This kernel runs for "
             "ND-format input (SD's 3-D (N, G, H*W) case); for NCHW/NCDHW-format input GE's "
             "SingleInstanceNormFusion replaces the node by INTrainingReduceV2 + INTrainingUpdateV2 (row "
             "INTrainingUpdateV2).",
   internal="fp32 two-pass statistics",
   variants={"group_norm": "fp16_tbe_instance"},
   sources=(_nn("norm/instance_norm_v3/framework/instancenormalization_onnx_plugin.cpp",
                "REGISTER_CUSTOM_OP(\"InstanceNorm\") for ai.onnx::8..18::InstanceNormalization"),
            _cd(_TBE + "instance_norm.py", "instance_norm_compute"),
            _cd(_PASS + "single_instance_norm_fusion_pass.cc", "FORMAT_ND -> NOT_CHANGED"),
            _nn("norm/instance_norm/op_host/instance_norm_def.cpp", "current AscendC InstanceNorm: ascend950 only")))

_k("INTrainingUpdateV2", (),
   algorithm="SingleInstanceNormFusion's replacement of a lone non-ND InstanceNorm: INTrainingReduceV2 casts "
             "fp16 -> fp32 and sums x and x*x in one pass (tuple_sum); INTrainingUpdateV2: mean = sum*(1/n), "
             "var = sumsq*(1/n) - mean^2 (no clamp), y = x*(gamma/sqrt(var+eps)) + (beta - "
             "gamma/sqrt(var+eps)*mean) in fp32, one cast. Not modelled: the scale/shift output form and sqrt "
             "then divide instead of a high-precision rsqrt (fp32-level differences).",
   internal="fp32 one-pass statistics",
   variants={"group_norm": "fp16_ge_onepass"},
   sources=(_cd(_PASS + "single_instance_norm_fusion_pass.cc", "InstanceNorm -> INTrainingReduceV2 + "
                                                               "INTrainingUpdateV2 unless FORMAT_ND"),
            _cd(_DYN + "in_training_reduce_v2.py", "in_training_reduce_v2_compute"),
            _cd(_DYN + "in_training_update_v2.py", "in_training_update_v2_compute")))

_GROUPNORM_ASSUMPTION = (
    "The only public GroupNorm kernel for 910B/310P is the 2022 TIK one (canndev dynamic/group_norm.py); "
    "hicann/ops-nn's group_norm is registered for ascend950 only, so the kernel current CANN 8.x runs for the "
    "fused node is not public. Huawei's Atlas 300I A2 SD recipe forces fp32 InputDtype on six VAE-decoder "
    "GroupNorm nodes (custom_precision.cfg), which hints that the kernel it ran was not safe in fp16 -- worse "
    "than fp32 statistics, or fed activations beyond 65504 in INF_NAN mode.")
_k("GroupNorm", (),
   algorithm="GE's GroupNormFusionPass fuses Reshape -> InstanceNorm -> Reshape -> Mul -> Add (torch's GroupNorm "
             "export) into one GroupNorm named '<Mul>/GroupNorm'; TIK GroupNorm (5HD and ND classes): fp16 -> fp32 "
             "while moving to UB; one pass: sum(x) and sum(x*x) in fp32 (per UB chunk a halving tree of vec_add "
             "then vcadd, chunks added in order); mean = sum*(1/n), var = sumsq*(1/n) - mean^2 (no clamp: "
             "var+eps < 0 gives NaN under INF_NAN); rstd = vec_rsqrt_high_preci(var+eps); y = ((x-mean)*rstd)*gamma + beta in "
             "fp32; one cast to fp16.",
   internal="fp32 one-pass statistics",
   variants={"group_norm": "fp16_ge_onepass"},
   status="assumption", assumption=_GROUPNORM_ASSUMPTION,
   brackets={"optimistic": {"group_norm": "fp16_fp32stats_twopass"},
             "pessimistic": {"group_norm": "fp16_fp16stats"}},
   sources=(_cd(_DYN + "group_norm.py", "GroupNorm5HD/GroupNormND.get_mean_var, calc_out"),
            _cd(_PASS + "group_norm_fusion_pass.cc", "GroupNormFusionPass"),
            _nn("norm/group_norm/op_host/group_norm_def.cpp", "AddConfig(\"ascend950\") only"),
            _zoo("custom_precision.cfg", "/up_blocks.{2,3}/resnets.*/norm*/Mul/GroupNorm:InputDtype:float32"),
            _zoo("README.md", "A2 vae: atc --customize_dtypes custom_precision.cfg; Duo vae: none")),
   chips={"ascend310p": {
       "assumption": _GROUPNORM_ASSUMPTION + " The same recipe builds the Duo (310P, saturation-only) VAE "
                                             "without customize_dtypes."}})

_k("LayerNorm", ("LayerNormalization",),
   algorithm="TBE dynamic layer_norm (dynamicCompileStatic): fp16 -> fp32 when impl_mode is high_precision, or "
             "high_performance on parts with fp32 vexp (910B, 310P); two-pass: mean = sum(x*(1/n)), then mean "
             "rounded to fp16 and back; var = sum((x-mean)^2*(1/n)), rounded to fp16 and back (a variance >= "
             "65520 becomes inf: rstd 0, y = beta); y = ((x-mean)*rstd)*gamma + beta in fp32; one cast. The ONNX "
             "plugin (opset 17/18) emits LayerNorm plus Adds/Rsqrt nodes for the optional mean/inv_std outputs; "
             "opset < 17 decompositions are fused by LayerNormONNXFusionPass.",
   internal="fp32 two-pass statistics, mean and variance rounded through fp16",
   implmode_effect="high_precision: rstd = 1/sqrt(var+eps) (vsqrt, vdiv); high_performance: rstd = "
                   "exp(-0.5*log(var+eps)) (vlog, vexp in fp32); keep_fp16 (any other mode in the 2022 code): no "
                   "cast, the same two-pass formulas and sqrt/divide in fp16 arithmetic -- modelled by "
                   "fp16_fp16stats, which uses one-pass fp16 sums instead (not modelled exactly).",
   variants={"layer_norm": {"high_precision": "fp16_tbe_hprec", "high_performance": "fp16_tbe_hperf",
                            "keep_fp16": "fp16_fp16stats"}},
   sources=(_nn("common/src/framework/layer_normalization_onnx_plugin.cpp",
                "PartitionedCall: LayerNorm + Adds + Rsqrt, ai.onnx::17/18::LayerNormalization"),
            _cd(_DYN + "layer_norm.py", "layer_norm_compute: is_cast, mean_16/variance_16, vlog/vexp branch"),
            _cd(_PASS + "layer_norm_onnx_fusion_pass.cc", "LayerNormONNXFusionPass"),
            _nn("norm/layer_norm/op_host/layer_norm_def.cpp", "current AscendC LayerNorm: ascend950 only")))

_k("BatchNorm", ("BatchNormalization",),
   algorithm="TBE batch_norm inference: fp16 -> fp32 (fp32 vdiv exists on 910B/310P), (x-mean)/sqrt(var+eps)*"
             "scale + offset in fp32, one cast. Not modelled: the executor computes BatchNormalization in the "
             "node dtype (fp16 arithmetic, pessimistic).",
   internal="fp32",
   sources=(_nn("norm/batch_norm/framework/batch_normalization_onnx_plugin.cpp", "BatchNorm"),
            _cd(_TBE + "batch_norm.py", "inference: is_cast -> cast_to float32")))

# ------------------------------------------------------------------------------------------------ rows: softmax
_SOFTMAX_ALGO = ("TBE dynamic softmax_v2: max over the axis and x - max in fp16; cast to fp32; exp, sum and the "
                 "divide (vdiv) in fp32; one cast to fp16. The FRACTAL_NZ fp16 path on Ascend910/610/615/310P "
                 "(or parts with tik.vgatherb) multiplies by vrec(sum) instead of dividing.")
_k("SoftmaxV2", ("Softmax",),
   algorithm=_SOFTMAX_ALGO,
   internal="fp16 max and subtract; fp32 exp, sum and divide",
   implmode_effect="Only the NZ path's reciprocal: vrec(sum, 'high_precision') under high_precision (and for a "
                   "few special shapes), plain vrec under high_performance; the ND path divides in both modes.",
   variants={"softmax": "fp16_v2"},
   sources=(_nn("activation/softmax_v2/framework/softmax_onnx_plugin.cpp", "SoftmaxV2 for ai.onnx::8..18::Softmax"),
            _cd(_DYN + "softmax_v2.py", "softmax_v2_compute"),
            _nn("activation/softmax_v2/op_host/softmax_v2_def.cpp", "current AscendC SoftmaxV2: ascend950 only")),
   chips={"ascend310p": {
       "status": "assumption",
       "assumption": "On 310P an NZ-format fp16 SoftmaxV2 (e.g. after a matmul whose output stays FRACTAL_NZ) "
                     "takes the vrec path; the accuracy of fp32 vrec without the high_precision flag is "
                     "unpublished, and no registry variant models an approximate reciprocal (both brackets are "
                     "the exact divide).",
       "brackets": {"optimistic": {"softmax": "fp16_v2"}, "pessimistic": {"softmax": "fp16_v2"}}}})

# ------------------------------------------------------------------------------------------------ rows: activations
_k("Gelu", (),
   algorithm="GE's GeluONNXFusionPass fuses the exact-erf export RealDiv(x, 1.41421) -> Erf -> Add(1) -> Mul(x) "
             "-> Mul(0.5) into Gelu. TBE dynamic gelu, high_precision (and impl_mode None): fp16 -> fp32, tanh "
             "form y = x/(1+exp(-|u|))*exp(min(u,0)), u = 1.5957691*(x + 0.044715*x^3), one cast. "
             "high_performance: no cast, i-GELU in fp16 instructions: y = x*(sgn*[-0.1444*(min(|0.7071x|, 1.769) "
             "- 1.769)^2 + 0.5] + 0.5), sgn = (x+1e-12)*vrec(|x+1e-12|); if the fp32 constant 1e-12 is applied as "
             "an fp16 scalar (it rounds to 0), x = 0 gives 0*vrec(0) = NaN under INF_NAN.",
   internal="high_precision: fp32; high_performance: fp16",
   implmode_effect="high_precision: tanh-form GELU in fp32 (max abs error of the tanh form ~4.7e-4 against erf "
                   "GELU); high_performance: the i-GELU polynomial (a/2 = -0.1444, b = -1.769, c = 0.7071) "
                   "evaluated in fp16 with vrec for the sign.",
   variants={"gelu": {"high_precision": "fp16_ascend_tanh", "high_performance": "fp16_ascend_igelu_sat"}},
   status="assumption",
   assumption="high_performance rests on the accuracy of the hardware fp16 vrec and fp16 vector arithmetic, "
              "which is unpublished (modelled as correctly rounded fp16 operations); the high_precision path is "
              "fp32 and public. With an IEEE vrec the sign x*vrec(|x|) is NaN at x = 0 and inf for "
              "0 < |x| <= 2^-16 (the pessimistic bracket, fp16_ascend_igelu), which would put NaN into every SD "
              "UNet GEGLU (millions of gate values, some that small) -- yet Huawei ships exactly this mode for "
              "its SD UNet on the A2 (INF_NAN) part. The modelled variant therefore takes vrec's overflow to "
              "the fp16 maximum (fp16_ascend_igelu_sat: y = x*(...) stays tiny and finite there), the only "
              "reading of the source consistent with that recipe. ONNX Gelu (opset 20) has no parser plugin "
              "(NO_PLUGIN); the executor's gelu_tanh kernel (ONNX approximate='tanh') has no Ascend variant.",
   brackets={"optimistic": {"gelu": {"high_precision": "fp16_ascend_tanh", "high_performance": "fp16_poly"}},
             "pessimistic": {"gelu": {"high_precision": "fp16_ascend_tanh",
                                      "high_performance": "fp16_ascend_igelu"}}},
   sources=(_cd(_DYN + "gelu.py", "gelu_compute, high_performance_compute"),
            _cd(_PASS + "gelu_onnx_fusion_pass.cc", "GeluONNXFusionPass"),
            _zoo("README.md", "unet: --optypelist_for_implmode=\"Gelu,Sigmoid\" --op_select_implmode="
                              "high_performance"),
            _nn("activation/gelu/op_host/gelu_def.cpp", "current AscendC Gelu: ascend950 only")))

_k("Sigmoid", ("Sigmoid",),
   algorithm="TBE dynamic sigmoid; fp16 input stays fp16: e = vexp(-x) in fp16 (inf for x < -11.09, so y = 0 "
             "there under INF_NAN), t = e + 1, y = vrec(t, impl_mode); no exp(-|x|) rewrite.",
   internal="fp16",
   implmode_effect="Only the reciprocal: vrec(t, 'high_precision') vs vrec(t, 'high_performance'); the kernel's "
                   "own default is high_precision.",
   variants={"sigmoid": "fp16_vexp"},
   status="assumption",
   assumption="Hardware fp16 vexp and vrec accuracy is unpublished (both modes); fp16_vexp models both as "
              "correctly rounded fp16 operations.",
   brackets={"optimistic": {"sigmoid": "fp16_fp32acc"}, "pessimistic": {"sigmoid": "fp16_fast"}},
   sources=(_similar("Sigmoid", "Sigmoid"), _cd(_DYN + "sigmoid.py", "sigmoid_compute"),
            _zoo("README.md", "--optypelist_for_implmode=\"Gelu,Sigmoid\"")))

_k("Swish", (),
   algorithm="Fusion-only (no public GE pass produces it from ONNX). TBE dynamic swish, non-Ascend910 branch "
             "(910B, 310P): -scale*x in fp16, clamped to <= 11.089 (ln 65504 cut to 3 decimals; 11.0859375 in "
             "fp16), cast to fp32, exp, +1, y = x/(1+e) in fp32, one cast. Not modelled: the clamp -- for "
             "scale*x < -11.086 the device returns x/(1+e^11.086) ~ x/65300 instead of ~x*e^x (error up to "
             "|x|/65300: -1.0 at x = -65504).",
   internal="fp32 (clamp in fp16)",
   variants={"silu": "fp16_fp32acc"},
   sources=(_cd(_DYN + "swish.py", "swish_normal"),
            _zoo("README.md", "--optypelist_for_implmode=\"Gelu,Sigmoid\": SiLU stays Sigmoid + Mul")))

_k("Exp", ("Exp",),
   algorithm="TBE dynamic exp: high_precision: fp16 -> fp32, vexp, one cast; high_performance (the kernel's "
             "default impl_mode): hardware vexp in fp16.",
   internal="high_precision: fp32; high_performance: fp16 (hardware vexp)",
   implmode_effect="high_precision casts to fp32; high_performance keeps fp16 vexp.",
   variants={"exp": {"high_precision": "fp16_fp32acc", "high_performance": "fp16_fast"}},
   status="assumption",
   assumption="The accuracy of the hardware fp16 vexp is unpublished; exp:fp16_fast (2^n * degree-4 polynomial "
              "in fp16) is a guess.",
   brackets={"optimistic": {"exp": "fp16_fp32acc"},
             "pessimistic": {"exp": {"high_precision": "fp16_fp32acc", "high_performance": "fp16_fast"}}},
   sources=(_similar("Exp", "Exp"), _cd(_DYN + "exp.py", "exp_compute")))

_k("Erf", ("Erf",),
   algorithm="TBE dynamic erf: fp16 -> fp32; Abramowitz-Stegun 7.1.26: erf|x| = 1 - (0.3480242t - 0.0958798t^2 + "
             "0.7478556t^3)*exp(-x^2), t = 1/(1 + 0.47047|x|), sign from round(32768x/(32768|x| + 2^-15)); one "
             "cast. Not modelled: the approximation (<= 2.5e-5 absolute; ~6e-4 relative near 0, and the fp32 "
             "cancellation in 1 - (...) grows the relative error below |x| ~ 1e-4) -- erf:fp16_fp32acc is an "
             "accurate fp32 erf, so the emulator is optimistic for a standalone Erf.",
   internal="fp32",
   variants={"erf": "fp16_fp32acc"},
   sources=(_similar("Erf", "Erf"), _cd(_DYN + "erf.py", "erf_compute")))

_k("Tanh", ("Tanh",),
   algorithm="TBE dynamic tanh (the 2022 kernel takes no impl_mode): fp16 -> fp32; e = exp(-2|x|); y = (x - x*e)"
             "/((1 + e)*(|x| + 2^-126)); one cast. Not modelled: the cancellation in x - x*e, relative error "
             "~2^-24/(2|x|), over half an fp16 ulp for |x| < ~6e-5.",
   internal="fp32",
   implmode_effect="Listed in all_ops_impl_mode.ini, but the 2022 kernel has no impl_mode parameter; what the "
                   "modes change in the current kernel is not public.",
   variants={"tanh": "fp16_fp32acc"},
   status="assumption",
   assumption="The current Tanh kernel takes an implmode the 2022 source does not have; both modes are assumed "
              "to compute the 2022 fp32 formula. No registry variant computes tanh in fp16 (both brackets fp32).",
   brackets={"optimistic": {"tanh": "fp16_fp32acc"}, "pessimistic": {"tanh": "fp16_fp32acc"}},
   sources=(_similar("Tanh", "Tanh"), _cd(_DYN + "tanh.py", "tanh_compute")))

_k("Sin", ("Sin",),
   algorithm="TBE dynamic sin: fp16 -> fp32; k = round(x/pi), r = x - k*pi (pi as an fp32 constant), Taylor "
             "series to the x^11 term on r, sign from the parity of k; one cast. The fp32 pi makes the reduced "
             "argument off by ~k*8.7e-8 (3e-5 absolute at |x| = 1000).",
   internal="fp32",
   sources=(_similar("Sin", "Sin"), _cd(_DYN + "sin.py", "sin_compute, _sin")))

_k("Cos", ("Cos",),
   algorithm="TBE dynamic cos: fp16 -> fp32; r = x - round(x/(2pi))*2pi, cos Taylor series to the r^14 term "
             "(truncation <= 4.3e-6 at |r| = pi); one cast.",
   internal="fp32",
   sources=(_similar("Cos", "Cos"), _cd(_DYN + "cos.py", "cos_compute")))

_k("Sqrt", ("Sqrt",),
   algorithm="TBE dynamic sqrt: fp16 -> fp32 (fp32 vsqrt exists); vsqrt(x) under high_performance, vsqrt(x, 1) "
             "(the high-precision priority flag) under high_precision; one cast.",
   internal="fp32",
   implmode_effect="Selects the fp32 vsqrt variant (priority flag 0 vs 1).",
   status="assumption",
   assumption="The accuracy of fp32 vsqrt without the priority flag is unpublished; the emulator's numpy fp16 "
              "sqrt (correctly rounded) is the optimistic end. No registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_similar("Sqrt", "Sqrt"), _cd(_DYN + "sqrt.py", "sqrt_compute")))

_k("Log", ("Log",),
   algorithm="TBE dynamic log: fp16 input stays fp16 -- hardware vlog in fp16 (fp32 only for fp32 input).",
   internal="fp16 (hardware vlog)",
   status="assumption",
   assumption="The accuracy of the fp16 vlog instruction is unpublished; the emulator's numpy fp16 log (fp32 "
              "evaluation, one rounding) is the optimistic end. No registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_similar("Log", "Log"), _cd(_DYN + "log.py", "log_compute")))

_k("Pow", ("Pow",),
   algorithm="TBE dynamic pow: fp16 -> fp32 (fp32 vdiv exists); x > 0: exp(y*ln x); x < 0: (1 - 2*(|y| mod 2))*"
             "exp(y*ln|x|); 0^0 = 1, 0^y = 0; one cast (relative error ~|y*ln x|*2^-24 before it).",
   internal="fp32 (exp/log)",
   sources=(_similar("Pow", "Pow"), _cd(_DYN + "pow.py", "pow_compute")))

_k("RealDiv", ("Div",),
   algorithm="TBE dynamic real_div: high_precision: fp16 -> fp32, vdiv, one cast; high_performance (the kernel's "
             "default impl_mode): vdiv in fp16.",
   internal="high_precision: fp32; high_performance: fp16 (hardware vdiv)",
   implmode_effect="high_precision casts to fp32; high_performance divides in fp16.",
   status="assumption",
   assumption="Whether the fp16 vdiv of high_performance is correctly rounded is unpublished; numpy's fp16 "
              "divide (correctly rounded) is the optimistic end. No registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_similar("Div", "RealDiv"), _cd(_DYN + "real_div.py", "real_div_compute")))

_k("Reciprocal", ("Reciprocal",),
   algorithm="TBE dynamic reciprocal: fp16 -> fp32, 1/x by vdiv, one cast.",
   internal="fp32",
   sources=(_similar("Reciprocal", "Reciprocal"), _cd(_DYN + "reciprocal.py", "reciprocal_compute")))

_k("Mish", ("Mish",),
   algorithm="TBE mish (static): fp16 stays fp16: y = x*(1 - 2/((1+e^x)^2 + 1)) with fp16 vexp and vrec "
             "(priority flag 0 under high_performance, 1 under high_precision); super_performance replaces e^x "
             "by (1 + x/64)^64 (six squarings).",
   internal="fp16",
   implmode_effect="high_performance/high_precision: the vrec priority flag; super_performance: the (1+x/64)^64 "
                   "approximation of e^x.",
   variants={"mish": "fp16_fp32acc"},
   status="assumption",
   assumption="fp16 vexp/vrec accuracy is unpublished and no registry variant computes Mish in fp16 arithmetic: "
              "the emulator (fp32 then one rounding) is optimistic in every mode.",
   brackets={"optimistic": {"mish": "fp16_fp32acc"}, "pessimistic": {"mish": "fp16_fp32acc"}},
   sources=(_nn("activation/mish/framework/mish_onnx_plugin.cpp", "Mish for ai.onnx::18::Mish"),
            _cd(_TBE + "mish.py", "mish_compute")))

_k("Softplus", ("Softplus",),
   algorithm="TBE dynamic softplus: fp16 -> fp32; (max(x,0) + log(1 + exp(-max(x,0)))) + log(1 + exp(min(x,0)))"
             " - ln 2 in fp32; one cast.",
   internal="fp32", variants={"softplus": "fp16_fp32acc"},
   sources=(_similar("Softplus", "Softplus"), _cd(_DYN + "softplus.py", "softplus_compute")))

_k("Softsign", ("Softsign",),
   algorithm="TBE dynamic softsign: fp16 -> fp32; x * vrec(1 + |x|, 'high_precision'); one cast.",
   internal="fp32", variants={"softsign": "fp16_fp32acc"},
   sources=(_similar("Softsign", "Softsign"), _cd(_DYN + "softsign.py", "softsign_compute")))

_k("Elu", ("Elu",),
   algorithm="TBE dynamic elu: fp16 -> fp32 (fp32 vexp exists); alpha*(exp(min(x,0)) - 1) + max(x,0) via vaxpy "
             "in fp32; one cast -- the exp(x) - 1 form, not expm1.",
   internal="fp32", variants={"elu": "fp16_exp_minus_1"},
   sources=(_nn("activation/elu/framework/elu_onnx_plugin.cpp", "Elu"), _cd(_DYN + "elu.py", "elu_compute")))

_k("Selu", ("Selu",),
   algorithm="TBE dynamic selu: fp16 -> fp32; scale*(max(x,0) + alpha*(exp(min(x,0)) - 1)) in fp32; one cast.",
   internal="fp32", variants={"selu": "fp16_fp32acc"},
   sources=(_nn("activation/selu/framework/selu_onnx_plugin.cpp", "Selu"), _cd(_DYN + "selu.py", "selu_compute")))

_k("Celu", ("Celu",),
   algorithm="TBE celu (static): fp16 -> fp32 (fp32 vexp exists); max(x,0) + min(0, alpha*(exp(x/alpha) - 1)) "
             "in fp32; one cast.",
   internal="fp32", variants={"celu": "fp16_fp32acc"},
   sources=(_nn("activation/celu/framework/celu_onnx_plugin.cpp", "Celu"), _cd(_TBE + "celu.py", "celu_compute")))

_k("HardSigmoid", ("HardSigmoid",),
   algorithm="TBE dynamic hard_sigmoid: fp16 -> fp32 (fp32 vmuls exists); clip(alpha*x + beta, 0, 1); one cast.",
   internal="fp32", variants={"hard_sigmoid": "fp16_fp32acc"},
   sources=(_nn("activation/hard_sigmoid/framework/hard_sigmoid_onnx_plugin.cpp", "HardSigmoid"),
            _cd(_DYN + "hard_sigmoid.py", "hard_sigmoid_compute")))

_k("HardSwish", ("HardSwish",),
   algorithm="TBE dynamic hard_swish: fp16 -> fp32; x*relu6(x+3)/6 in fp32; one cast.",
   internal="fp32", variants={"hard_swish": "fp16_fp32acc"},
   sources=(_similar("HardSwish", "HardSwish"), _cd(_DYN + "hard_swish.py", "hard_swish_compute")))

_k("PRelu", ("PRelu",),
   algorithm="TBE dynamic prelu: fp16 arithmetic, y = x >= 0 ? x : slope*x (one rounded multiply, the same bits "
             "as fp32 compute and one rounding).",
   internal="fp16 (one multiply)", variants={"prelu": "fp16_fp32acc"},
   sources=(_similar("PRelu", "PRelu"), _cd(_DYN + "prelu.py", "prelu_compute")))

_k("LeakyRelu", ("LeakyRelu",),
   algorithm="TBE dynamic leaky_relu: fp16 arithmetic, y = x >= 0 ? x : alpha*x (one rounded multiply).",
   internal="fp16 (one multiply)",
   sources=(_nn("activation/leaky_relu/framework/leaky_relu_onnx_plugin.cpp", "LeakyRelu"),
            _cd(_DYN + "leaky_relu.py", "leaky_relu_compute")))

_k("LRN", ("LRN",),
   algorithm="TIK lrn: sum of squares over the channel window, then (bias + alpha/size*sum)^beta via vln/vexp; "
             "high_precision takes the fp32 vln path where tik.vln supports fp32. The rest of the kernel was not "
             "read for this table.",
   internal="mixed (not traced)",
   implmode_effect="high_precision: fp32 vln where supported; high_performance: fp16.",
   status="assumption",
   assumption="Kernel not traced beyond the impl_mode switch; the emulator's numpy LRN is not a model of it. No "
              "registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_nn("common/src/framework/lrn_onnx_plugin.cpp", "LRN"), _cd(_TBE + "lrn.py", "impl_mode, vln")))

# ------------------------------------------------------------------------------------------------ rows: reductions
_REDUCE_ORDER = ("The order in which tbe.reduce_sum accumulates (vector lanes, vcadd trees, UB chunks) is not "
                 "documented; fp32 recursive summation is modelled, pairwise is the optimistic bracket.")
_k("ReduceSum", ("ReduceSum",),
   algorithm="TBE dynamic reduce_sum: fp16 -> fp32 on every part but Ascend310 (so 910B and 310P), sum in fp32, "
             "one cast. No ConstToAttr rewrite exists for ReduceSum (it stays ReduceSum with constant axes).",
   internal="fp32 accumulation",
   variants={"reduce_sum": "fp16_fp32acc"},
   status="assumption", assumption=_REDUCE_ORDER,
   brackets={"optimistic": {"reduce_sum": "fp16_fp32acc_pairwise"}, "pessimistic": {"reduce_sum": "fp16_fp32acc"}},
   sources=(_math("math/reduce_sum/framework/reduce_sum_onnx_plugin.cpp",
                  "PartitionedCall (opset 8-12, axes attribute -> Const) / ReduceSum (13-18)"),
            _cd(_DYN + "reduce_sum.py", "reduce_sum_compute")))

_REDUCE_MEAN_ALGO = ("TBE dynamic reduce_mean{d}: get_calc_dtype gives fp16 only where fp32 sum is missing or on "
                     "Ascend310 (the original, not 310P) with high_performance, so 910B and 310P accumulate in fp32 "
                     "in both modes: y = sum(x*(1/n)) in fp32, one cast. Not modelled: the multiply by 1/n before "
                     "the sum (the registry divides the sum once).")
_k("ReduceMean", ("ReduceMean",),
   algorithm=_REDUCE_MEAN_ALGO.format(d="") + " This IR type remains only when the axes input is computed at run "
                                              "time (constant axes become ReduceMeanD).",
   internal="fp32 accumulation",
   implmode_effect="None on 910B/310P (get_calc_dtype picks fp32 in both modes); fp16 accumulation only on the "
                   "original Ascend310 under high_performance.",
   variants={"reduce_mean": "fp16_fp32acc"},
   status="assumption", assumption=_REDUCE_ORDER,
   brackets={"optimistic": {"reduce_mean": "fp16_fp32acc_pairwise"},
             "pessimistic": {"reduce_mean": "fp16_fp32acc"}},
   sources=(_math("math/reduce_mean/framework/reduce_mean_onnx_plugin.cpp",
                  "ReduceMean with a Const axes input (attribute) or a Data input"),
            _cd(_DYN + "reduce_mean.py", "get_calc_dtype, reduce_mean_compute")))

_k("ReduceMeanD", ("ReduceMean", "GlobalAveragePool"),
   algorithm=_REDUCE_MEAN_ALGO.format(d="_d") + " GE's ConstToAttrPass turns ReduceMean with constant axes "
                                                "(attribute, initializer or none) into ReduceMeanD; "
                                                "Globalavgpoolpass retypes GlobalAveragePool to ReduceMeanD.",
   internal="fp32 accumulation",
   variants={"reduce_mean": "fp16_fp32acc"},
   status="assumption", assumption=_REDUCE_ORDER,
   brackets={"optimistic": {"reduce_mean": "fp16_fp32acc_pairwise"},
             "pessimistic": {"reduce_mean": "fp16_fp32acc"}},
   sources=(_math("math/reduce_mean/framework/reduce_mean_onnx_plugin.cpp", "ReduceMean + Const axes"),
            _cd(_PASS + "const2attr/const2attr_fusion_pass.cc",
                "REGISTER_CONST2ATTR(\"ReduceMeanD\").OriginOpType(\"ReduceMean\")"),
            _cd(_PASS + "globalavgpool_fusion_pass.cc", "SetType(\"ReduceMeanD\")"),
            _similar("GlobalAveragePool", "GlobalAveragePool"),
            _cd(_DYN + "reduce_mean_d.py", "reduce_mean_d_compute (get_calc_dtype from reduce_mean)")))

_REDUCE_PROD_ALGO = ("TBE dynamic reduce_prod{d}: fp16 stays fp16 (only int8/uint8 are cast, to fp16); running "
                     "product in fp16; black-listed.")
for _ir, _d, _note in (("ReduceProd", "", "axes computed at run time"),
                       ("ReduceProdD", "_d", "ConstToAttrPass: constant axes")):
    _k(_ir, ("ReduceProd",),
       algorithm=_REDUCE_PROD_ALGO.format(d=_d) + f" ({_note}).",
       internal="fp16 accumulation",
       variants={"reduce_prod": "fp16_fp16acc"},
       status="assumption", assumption="The order of the fp16 product (lanes, trees, chunks) is not documented.",
       brackets={"optimistic": {"reduce_prod": "fp16_fp32acc"}, "pessimistic": {"reduce_prod": "fp16_fp16acc"}},
       sources=(_math("math/reduce_prod/framework/reduce_prod_onnx_plugin.cpp", "ReduceProd + axes"),
                _cd(_DYN + f"reduce_prod{_d}.py", f"reduce_prod{_d}_compute"),
                _cd(_PASS + "const2attr/const2attr_fusion_pass.cc",
                    "REGISTER_CONST2ATTR(\"ReduceProdD\").OriginOpType(\"ReduceProd\")")))

for _ir, _onnx, _note in (("ReduceMax", "ReduceMax", "axes computed at run time"),
                          ("ReduceMaxD", "ReduceMax", "ConstToAttrPass: constant axes"),
                          ("ReduceMin", "ReduceMin", "axes computed at run time"),
                          ("ReduceMinD", "ReduceMin", "ConstToAttrPass: constant axes")):
    _exact(_ir, (_onnx,), _math(f"math/{_onnx.lower().replace('reduce', 'reduce_')}/framework/"
                                f"{_onnx.lower().replace('reduce', 'reduce_')}_onnx_plugin.cpp", f"{_onnx} + axes"),
           f"max/min over axes: exact ({_note})",
           sources=(_cd(_PASS + "const2attr/const2attr_fusion_pass.cc",
                        f"REGISTER_CONST2ATTR(\"{_onnx}D\").OriginOpType(\"{_onnx}\")"),))

_k("AccumulateNV2", ("Sum", "Mean"),
   algorithm="TBE dynamic accumulate_nv2: fp16 inputs -> fp32, added left to right in fp32, one cast. ONNX Mean "
             "is AccumulateNV2 then Muls(1/n) in fp16 (a second rounding).",
   internal="fp32 accumulation",
   sources=(_math("math/accumulate_nv2/framework/sum_onnx_plugin.cpp", "AccumulateNV2 for Sum"),
            _math("math/accumulate_nv2/framework/mean_onnx_plugin.cpp", "PartitionedCall: AccumulateNV2 + Muls"),
            _cd(_DYN + "accumulate_nv2.py", "_accumulate_nv2_compute")))

_k("Cumsum", ("CumSum",),
   algorithm="TBE cumsum: not read for this table.",
   internal="not traced",
   status="assumption",
   assumption="Kernel not read; the emulator's numpy cumulative sum in the node dtype is not a model of it. No "
              "registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_math("math/cumsum/framework/cumsum_onnx_plugin.cpp", "Cumsum"),))

# ------------------------------------------------------------------------------------------------ rows: cube ops
_CUBE_MODES = ("fp16 inputs: none (the modes choose fp32/HF32 execution for fp32 inputs: "
               "enable_float_32_execution, enable_hi_float_32_execution).")
_k("BatchMatMulV2", ("MatMul",),
   algorithm="Cube: fp16 operands, exact products, fp32 accumulation in L0C, one cast to fp16. The ONNX plugin "
             "emits BatchMatMulV2 for every MatMul, 2-D included (canndev's BatchMatMulFusionPass rewrites only "
             "type BatchMatMul, not V2, to MatMul); ops-nn's MatMulToMatmulV3FusionPass turns it into "
             "BatchMatMulV3 on parts with the L1->BT bf16 path. With MatMulBiasAddFusionPass (MatMul followed by "
             "Add/BiasAdd of a 1-D bias of length N) the bias is the kernel's third input and enters the fp32 "
             "accumulator: one rounding (kernel matmul_bias).",
   internal="fp32 accumulation (cube)",
   implmode_effect=_CUBE_MODES,
   variants={"matmul": "fp16_fp32acc", "matmul_bias": "fp16_fp32acc"},
   sources=(_nn("matmul/mat_mul_v3/framework/matmul_onnx_plugin.cpp", "REGISTER_CUSTOM_OP(\"BatchMatMulV2\") for "
                                                                       "ai.onnx::8..18::MatMul"),
            _cd(_PASS + "batch_matmul_fusion_pass.cc", "CheckIsNeedFusion: type BatchMatMul only"),
            _nn("matmul/mat_mul_v3/op_graph/fusion_pass/matmul_biasadd_fusion_pass.cpp", "MatMulBiasAddFusionPass"),
            _nn("matmul/mat_mul_v3/op_graph/fusion_pass/matmul_to_matmul_v3_fusion_pass.cpp",
                "MatMulToMatmulV3FusionPass"),
            _cd(_DYN + "batch_matmul_v2.py", "fp16 in / fp16 or fp32 out formats")))

_k("MatMulV2", ("Gemm",),
   algorithm="ONNX Gemm -> MatMulV2 (transpose_x1/x2) followed by Add(C) (alpha = beta = 1) or Muls(alpha), "
             "Muls(beta) and Add, all in fp16. Cube as BatchMatMulV2: fp32 accumulation, one cast. The Add becomes "
             "the kernel's bias (one rounding) only when MatMulBiasAddFusionPass matches. Not modelled: the "
             "executor's gemm kernel adds beta*C inside fp32 in every case (one rounding fewer than the device "
             "when the Add is not fused or alpha/beta != 1).",
   internal="fp32 accumulation (cube)",
   implmode_effect=_CUBE_MODES,
   variants={"gemm": "fp16_fp32acc", "matmul_bias": "fp16_fp32acc"},
   sources=(_nn("common/src/framework/gemm_onnx_plugin.cpp", "PartitionedCall: MatMulV2 + Add / Muls + Add"),
            _nn("matmul/mat_mul_v3/op_graph/fusion_pass/matmul_biasadd_fusion_pass.cpp", "MatMulBiasAddFusionPass"),
            _cd(_DYN + "mat_mul.py", "fp16 in / fp16 or fp32 out formats")))

_k("Conv2D", ("Conv",),
   algorithm="Cube: fp16 in, fp32 accumulation, bias inside the kernel, fp16 out. The ONNX plugin unsqueezes 1-D "
             "convolutions to Conv2D (3-D ones go to Conv3D).",
   internal="fp32 accumulation (cube)",
   implmode_effect=_CUBE_MODES,
   variants={"conv2d": "fp16_fp32acc"},
   sources=(_nn("common/src/framework/conv_onnx_plugin.cpp", "PartitionedCall: Conv2D / Conv3D"),
            _cd(_DYN + "conv2d.py", "impl_mode from get_op_precision_mode(\"Conv2D\")")))

_k("Conv2DTranspose", ("ConvTranspose",),
   algorithm="Cube: fp16 in, fp32 accumulation, fp16 out (the kernel itself was not traced beyond the cube "
             "premise).",
   internal="fp32 accumulation (cube)",
   implmode_effect=_CUBE_MODES,
   variants={"conv_transpose2d": "fp16_fp32acc_scatter"},
   sources=(_nn("common/src/framework/conv_transpose_onnx_plugin.cpp", "PartitionedCall: Conv2DTranspose / "
                                                                        "Conv3DTranspose"),))

_k("Einsum", ("Einsum",),
   algorithm="GE's EinsumFusionPass rewrites Einsum into Transpose/Reshape + (Batch)MatMul: cube products with "
             "fp32 accumulation, one cast per matmul.",
   internal="fp32 accumulation (cube)",
   sources=(_math("common/src/framework/einsum_onnx_plugin.cpp", "Einsum"),
            _cd(_PASS + "einsum_fusion_pass.cc", "Einsum -> BatchMatMul(V2) + Transpose/Reshape")))

_k("AvgPoolV2", ("AveragePool",),
   algorithm="TBE avg_pool_v2 runs as a depthwise Conv2D on the cube against an assist filter supplied by GE "
             "(fp16 in, fp32 accumulation); 3-D pooling goes to AvgPool3D.",
   internal="fp32 accumulation (cube)",
   implmode_effect="Passed to the conv2d path (what it changes for fp16 was not traced).",
   status="assumption",
   assumption="The assist filter's values (1/area rounded to fp16, or ones and a separate scale) and the "
              "impl_mode effect were not traced. No registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_nn("common/src/framework/average_pool_onnx_plugin.cpp", "PartitionedCall: AvgPoolV2 / AvgPool3D"),
            _cd(_TBE + "avg_pool_v2.py", "conv2d_compute with filter")))

# ------------------------------------------------------------------------------------------------ rows: attention
_k("Attention", (),
   algorithm="No device op: ONNX Attention (opset 23) has no parser plugin. A device reaches fused attention only "
             "through a graph edit to PromptFlashAttention/FlashAttentionScore or a vendor op (Huawei's SD "
             "recipe inserts FlashAttentionTik / UnpadFlashAttentionMix from the inference-engine package).",
   internal="as the fused op chosen",
   variants={"attention": "fp16_naive"},
   status="assumption",
   assumption="Modelled like PromptFlashAttention at its 910B default (logits rounded to fp16); a graph edit to "
              "FlashAttentionScore would give the fp32-softmax optimistic end.",
   brackets={"optimistic": {"attention": "flash_fp16_fp32acc"}, "pessimistic": {"attention": "fp16_naive"}},
   sources=(_ge("parser/parser/onnx/onnx_parser.cc", "op type = domain::opset::type, matched against plugin "
                                                     "registrations"),
            _zoo("modify_onnx.py", "add_flash_attention: FlashAttentionTik (Duo), UnpadFlashAttentionMix (A2)")))

_k("FlashAttentionScore", (),
   algorithm="Opt-in graph edit. AscendC FlashAttentionScore, fp16 instantiated as <half, float>: Q*K^T on the "
             "cube with fp32 output, online softmax per block in fp32, P cast to fp16 for P*V with fp32 "
             "accumulation, fp16 out. The tiling fixes implMode to AA_HIGH_PRECISION (the attribute only selects "
             "the invalid-line variant).",
   internal="fp32 scores and softmax; P in fp16",
   variants={"attention": "flash_fp16_fp32acc"},
   sources=(_tf("attention/flash_attention_score/op_kernel/flash_attention_score.cpp", "half, float template args"),
            _tf("attention/flash_attention_score/op_host/flash_attention_score_tiling_general.cpp",
                "implMode = AA_HIGH_PRECISION"),
            _tf("attention/flash_attention_score/op_host/flash_attention_score_def.cpp",
                "AddConfig ascend910b, ascend910_93")),
   chips={"ascend310p": {
       "algorithm": "Not available on 310P: flash_attention_score_def.cpp registers ascend910b and ascend910_93 "
                    "only (Huawei's Duo recipe uses the vendor FlashAttentionTik instead).",
       "internal": "n/a", "variants": {}}})

_PFA_ASSUMPTION = ("innerPrecise (an op attribute, not an implmode) defaults to 1 = high performance on 910B "
                   "(tiling: '910B defaults to high-performance'), which instantiates TypeTraits<half, "
                   "HighPerformance>: mmOutputType = half and softmaxType = half, i.e. Q*K^T rounded to fp16 and "
                   "the online softmax in fp16 arithmetic; innerPrecise 0 gives float/float. attention:fp16_naive "
                   "rounds the logits to fp16 like the kernel but evaluates the softmax in fp32, and the fp16 "
                   "exp/reciprocal accuracy is unpublished; flash_fp16_fp32acc is the innerPrecise 0 behaviour.")
_k("PromptFlashAttention", (),
   algorithm="Opt-in graph edit. AscendC PromptFlashAttention: TypeTraits<half, HighPerformance> (default): Q*K^T "
             "output in fp16, softmax in fp16, P*V on the cube; TypeTraits<half, HighPrecision> (innerPrecise 0, "
             "compiled for __CCE_AICORE__ > 200): fp32 scores and softmax.",
   internal="innerPrecise 1 (default): fp16 scores and softmax; 0: fp32",
   implmode_effect="The innerPrecise attribute (0 high precision, 1 high performance) selects the precision "
                   "instead.",
   variants={"attention": "fp16_naive"},
   status="assumption", assumption=_PFA_ASSUMPTION,
   brackets={"optimistic": {"attention": "flash_fp16_fp32acc"}, "pessimistic": {"attention": "fp16_naive"}},
   sources=(_tf("attention/prompt_flash_attention/op_kernel/prompt_flash_attention_base.h",
                "PromptFlashAttentionTypeTraits<half, HighPerformance / HighPrecision>"),
            _tf("attention/prompt_flash_attention/op_host/prompt_flash_attention_tiling.cpp",
                "innerPrecise default HIGH_PERFORMANCE"),
            _tf("attention/prompt_flash_attention/op_host/prompt_flash_attention_def.cpp",
                "AddConfig ascend910b, ascend910_93, ascend310p")),
   chips={"ascend310p": {
       "assumption": _PFA_ASSUMPTION + " On 310P (__CCE_AICORE__ 200) the HighPrecision traits are not compiled; "
                                       "the tiling's comment says 310P's 'high performance refers to high "
                                       "accuracy (without approximate calculations)' -- which kernel path that "
                                       "means for the softmax was not traced."}})

# ------------------------------------------------------------------------------------------------ rows: fused norms
_k("GroupNormSilu", (),
   algorithm="Opt-in (torch_npu/graph edit; ONNX sees it only as the custom npu::1::NPUGroupNormSilu). AscendC "
             "GroupNormSilu, b16 kernel: fp16 -> fp32; one pass: sum(x), sum(x*x) in fp32 (ReduceSum); mean = "
             "sum/n, rstd = 1/sqrt(sumsq/n - mean^2 + eps) (no clamp); per channel scale = rstd*gamma, shift = "
             "beta - scale*mean; y = x*scale + shift, SiLU y/(1+exp(-y)) in fp32; one cast. Not modelled: the "
             "emulator runs group_norm then silu with an fp16 rounding in between, and (x-mean)*rstd instead of "
             "x*scale + shift.",
   internal="fp32 one-pass statistics and SiLU",
   variants={"group_norm": "fp16_ge_onepass", "silu": "fp16_fp32acc"},
   sources=(_nn("norm/group_norm_silu/op_kernel/group_norm_silu_b16.h", "GroupNormSiluB16"),
            _nn("norm/group_norm_silu/framework/npu_group_norm_silu_onnx_plugin.cpp", "npu::1::NPUGroupNormSilu"),
            _nn("norm/group_norm_silu/op_host/group_norm_silu_def.cpp", "AICore configs")),
   chips={"ascend310p": {
       "algorithm": "Opt-in. AscendC GroupNormSilu on 310P: for N = 1, 32 groups, fp16, H*W > 1 the 'SD' tiling "
                    "(key 109, GroupNormSiluSD): fp16 -> fp32, per-lane fp32 partial sums of x and x*x across UB "
                    "chunks, then ReduceSum; mean = sum/n, rstd = 1/sqrt(sumsq/n - mean^2 + eps) (no clamp); y = "
                    "x*scale + shift, SiLU in fp32; one cast. Other shapes: the b16 kernel. Not modelled: as on "
                    "910B.",
       "sources": (_nn("norm/group_norm_silu/op_kernel/group_norm_silu_sd.h", "GroupNormSiluSD"),
                   _nn("norm/group_norm_silu/op_host/group_norm_silu_tiling.cpp", "is310P -> SetTilingSD"),
                   _nn("norm/group_norm_silu/op_kernel/group_norm_silu_b16.h", "GroupNormSiluB16"),
                   _nn("norm/group_norm_silu/op_host/group_norm_silu_def.cpp", "AICore configs"))}})

_k("GeGluV2", (),
   algorithm="Opt-in graph edit. AscendC GeGluV2: the input split in two halves along dim; GELU of one half in "
             "fp32 -- approximate=1 (default): tanh form; approximate=0: x/(1+exp(P(x^2)*x)) with a "
             "7-coefficient polynomial P -- cast to fp16 (CAST_RINT), then Mul with the other half in fp16 (a "
             "second rounding). 310P has its own kernel file with the same structure.",
   internal="fp32 GELU, fp16 product",
   variants={"gelu": "fp16_erf_hp", "gelu_tanh": "fp16_fp32acc"},
   sources=(_nn("activation/ge_glu_v2/op_kernel/erf/ge_glu_v2_fp16_align_erf.h", "ComputeGelu, ComputeMul"),
            _nn("activation/ge_glu_v2/op_kernel/ge_glu_v2_base.h", "ComputeGeluErf, ERF_PARAM21..27"),
            _nn("activation/ge_glu_v2/op_kernel/ge_glu_v2_fp16_stride_310p.h", "310P"),
            _nn("activation/ge_glu_v2/op_host/ge_glu_v2_def.cpp", "approximate default 1; ascend910b, ascend310p")))

# ------------------------------------------------------------------------------------------------ rows: elementwise
for _onnx, _ir in (("Add", "Add"), ("Sub", "Sub"), ("Mul", "Mul")):
    _k(_ir, (_onnx,),
       algorithm=f"TBE dynamic {_ir.lower()}: elementwise in fp16 (one rounding per element).",
       internal="fp16",
       sources=(_similar(_onnx, _ir), _cd(_DYN + f"{_ir.lower()}.py", f"{_ir.lower()}_compute")))

_k("Mod", ("Mod",),
   algorithm="TBE dynamic mod = truncate_mod: x - trunc(x/y)*y, the quotient in fp32 for fp16 input. The plugin "
             "ignores ONNX's fmod attribute (it warns): for integer inputs with fmod=0 ONNX asks floor-mod, so "
             "results differ in sign for mixed-sign operands.",
   internal="fp32 quotient",
   sources=(_math("math/mod/framework/mod_onnx_plugin.cpp", "REGISTER_CUSTOM_OP(\"Mod\"); fmod not supported"),
            _cd(_DYN + "mod.py", "mod_compute")))

_k("Cast", ("Cast",),
   algorithm="Conversion; fp32 -> fp16 rounds to nearest even; under force_fp16 GE rewrites fp32 targets to fp16.",
   internal="exact (one rounding on narrowing)",
   sources=(_math("math/cast/framework/cast_onnx_plugin.cpp", "Cast"), _cd(_DYN + "cast.py", "cast_compute"),
            _ge("compiler/engines/nn_engine/optimizer/graph_optimizer/op_judge/format_and_dtype/strategy/"
                "dtype_strategy/op_dtype_selection_strategy_force_fp16.cc", "DT_FLOAT/DT_BF16 -> DT_FLOAT16")))

_k("CastLike", ("CastLike",),
   algorithm="Conversion to the second input's dtype (registered by the plugin; not in the 910B ops-info).",
   internal="exact (one rounding on narrowing)",
   sources=(_similar("CastLike", "CastLike"),))

_k("Resize", ("Resize",),
   algorithm="mode linear/cubic: TIK resize (ResizeBilinearV2 machinery) with inner dtype fp32: weights and "
             "blend in fp32, one cast (cubic not traced).",
   internal="fp32",
   sources=(_nn("common/src/framework/resize_onnx_plugin.cpp", "BuildInterpolatingResize -> Resize"),
            _cd(_DYN + "resize.py", "ResizeModeBilinear inner_dtype float32")))

_exact("ResizeNearestNeighborV2", ("Resize",),
       _nn("common/src/framework/resize_onnx_plugin.cpp", "BuildNearestResize -> ResizeNearestNeighborV2"),
       "mode nearest: copies source pixels (output size from Shape * scales in the plugin's subgraph)")

_exact("Threshold", ("ThresholdedRelu",),
       _nn("activation/threshold/framework/threshold_relu_onnx_plugin.cpp", "PartitionedCall: Threshold + Mul"),
       "ThresholdedRelu = x * Threshold(x, alpha) (a 0/1 mask): exact",
       implmode_effect="Listed in all_ops_impl_mode.ini; a comparison either way.")

_exact("GatherV2", ("Gather",), _nn("index/gather_v2/framework/gather_onnx_plugin.cpp", "PartitionedCall: GatherV2"),
       implmode_effect="support_out_of_bound_index and the two precision modes concern index handling; values are "
                       "copied in every mode.")

_exact("ScatterNdUpdate", ("ScatterND",),
       _nn("common/src/framework/scatter_nd_onnx_plugin.cpp", "reduction none: TensorMove + ScatterNdUpdate"),
       "reduction none: copies updates into a copy of data (ops-math's similar_opp plugin also registers "
       "ai.onnx::8..18::ScatterND -> TensorScatterUpdate; which registration wins is not in the sources)",
       implmode_effect="Index handling only; values are copied.",
       sources=(_similar("ScatterND", "TensorScatterUpdate"),))

_k("ScatterNdAdd", ("ScatterND",),
   algorithm="reduction add: TensorMove + ScatterNdAdd, adds updates into data in fp16; the order for duplicate "
             "indices was not read.",
   internal="fp16",
   implmode_effect="Index handling (support_out_of_bound_index).",
   status="assumption",
   assumption="Accumulation order for duplicate indices not read. No registry kernel: brackets empty.",
   brackets={"optimistic": {}, "pessimistic": {}},
   sources=(_nn("common/src/framework/scatter_nd_onnx_plugin.cpp", "reduction add: ScatterNdAdd"),))

for _ir, _red in (("ScatterNdMax", "max"), ("ScatterNdMin", "min")):
    _exact(_ir, ("ScatterND",), _nn("common/src/framework/scatter_nd_onnx_plugin.cpp", f"reduction {_red}: {_ir}"),
           f"reduction {_red}: elementwise {_red} into a copy of data: exact")

_exact("Const", ("Constant",), _ge("parser/parser/onnx/onnx_constant_parser.cc", "ONNX Constant -> Const"),
       "a constant tensor (folded on the host)")

for _onnx, _ir, _what in (
        ("Relu", "Relu", "max(x, 0): exact"), ("Abs", "Abs", "exact"), ("Neg", "Neg", "exact"),
        ("Floor", "Floor", "exact"), ("Ceil", "Ceil", "exact"), ("Round", "Round", "round half to even: exact"),
        ("Sign", "Sign", "exact"), ("Equal", "Equal", "comparison"), ("Greater", "Greater", "comparison"),
        ("GreaterOrEqual", "GreaterEqual", "comparison"), ("Less", "Less", "comparison"),
        ("LessOrEqual", "LessEqual", "comparison"), ("And", "LogicalAnd", "logical"), ("Or", "LogicalOr", "logical"),
        ("Not", "LogicalNot", "logical"), ("IsNaN", "IsNan", "classification"), ("Identity", "Identity", "copy"),
        ("Dropout", "Dropout", "identity at inference"), ("Where", "SelectV2", "select: copies"),
        ("Tile", "Tile", "copy"), ("Expand", "Expand", "broadcast copy"),
        ("Range", "Range", "start + i*delta (usually folded on the host)")):
    _exact(_ir, (_onnx,), _similar(_onnx, _ir), _what)

_PLUGINS_EXACT = (
    # (ONNX, IR, repo helper, plugin path, note, what)
    ("Xor", "BitwiseXor", _math, "math/bitwise_xor/framework/xor_onnx_plugin.cpp",
     "PartitionedCall: Cast(int32) + BitwiseXor + Cast(bool)", "logical"),
    ("IsInf", "IsInf", _math, "math/is_inf/framework/isinf_onnx_plugin.cpp", "IsInf", "classification"),
    ("Reshape", "Reshape", _math, "conversion/reshape/framework/reshape_onnx_plugin.cpp", "Reshape", "copy"),
    ("Flatten", "Flatten", _math, "conversion/flatten/framework/flatten_onnx_plugin.cpp", "Flatten", "copy"),
    ("Squeeze", "Squeeze", _math, "conversion/squeeze/framework/squeeze_onnx_plugin.cpp",
     "Squeeze (opset 8-12, axes attribute)", "copy"),
    ("Squeeze", "SqueezeV3", _math, "conversion/squeeze/framework/squeeze_onnx_plugin.cpp",
     "SqueezeV3 (opset 13-18, axes input)", "copy"),
    ("Unsqueeze", "Unsqueeze", _math, "conversion/unsqueeze/framework/unsequeeze_onnx_plugin.cpp",
     "Unsqueeze (opset 8-12, axes attribute)", "copy"),
    ("Unsqueeze", "UnsqueezeV3", _math, "conversion/unsqueeze/framework/unsequeeze_onnx_plugin.cpp",
     "UnsqueezeV3 (opset 13-18, axes input)", "copy"),
    ("Transpose", "Transpose", _math, "conversion/transpose/framework/transpose_onnx_plugin.cpp",
     "PartitionedCall: Transpose + Const perm", "copy"),
    ("Concat", "ConcatD", _math, "conversion/concat/framework/concat_onnx_plugin.cpp", "PartitionedCall: ConcatD",
     "copy"),
    ("GatherElements", "GatherElements", _nn, "index/gather_elements/framework/gather_elements_onnx_plugin.cpp",
     "GatherElements", "copy"),
    ("GatherND", "GatherNd", _nn, "index/gather_nd/framework/gather_nd_onnx_plugin.cpp", "GatherNd", "copy"),
    ("Slice", "StridedSliceV2", _math, "conversion/strided_slice_v2/framework/slice_onnx_plugin.cpp",
     "StridedSliceV2 (opset 8-9 through PartitionedCall)", "copy"),
    ("Shape", "Shape", _math, "math/shape/framework/shape_onnx_plugin.cpp", "Shape", "shape metadata"),
    ("Size", "Size", _nn, "common/src/framework/size_onnx_plugin.cpp", "Size", "shape metadata"),
    ("ConstantOfShape", "Fill", _nn, "common/src/framework/constantofshape_onnx_plugin.cpp",
     "PartitionedCall: Fill", "fills a constant"),
    ("OneHot", "OneHot", _math, "math/one_hot/framework/onehot_onnx_plugin.cpp", "PartitionedCall: OneHot",
     "writes on/off values"),
    ("Pad", "PadV3", _math, "conversion/pad_v3/framework/pad_onnx_plugin.cpp",
     "PadV3 (opset 11-18; 8-10 through PartitionedCall, MirrorPad for reflect)", "copy / constant fill"),
    ("Split", "Split", _math, "conversion/split_d/framework/split_onnx_plugin.cpp", "Split (equal parts)", "copy"),
    ("Split", "SplitV", _math, "conversion/split_d/framework/split_onnx_plugin.cpp", "SplitV (sizes given)", "copy"),
    ("DepthToSpace", "DepthToSpace", _math, "conversion/depth_to_space/framework/depth_to_space_onnx_plugin.cpp",
     "DepthToSpace", "copy"),
    ("SpaceToDepth", "SpaceToDepth", _math, "conversion/space_to_depth/framework/space_to_depth_onnx_plugin.cpp",
     "SpaceToDepth", "copy"),
    ("TopK", "TopK", _nn, "common/src/framework/topk_onnx_plugin.cpp", "TopK (opset 8-9 through PartitionedCall)",
     "selection: copies"),
    ("ArgMax", "ArgMaxV2", _math, "math/arg_max_v2/framework/argmax_onnx_plugin.cpp", "PartitionedCall: ArgMaxV2",
     "index selection"),
    ("ArgMin", "ArgMin", _math, "math/arg_min/framework/argmin_onnx_plugin.cpp", "PartitionedCall: ArgMin",
     "index selection"),
    ("ScatterElements", "ScatterElements", _nn,
     "index/scatter_elements/framework/scatter_elements_onnx_plugin.cpp", "ScatterElements", "copy"),
    ("NonZero", "NonZero", _nn, "index/non_zero/framework/non_zero_onnx_plugin.cpp", "PartitionedCall: NonZero",
     "index selection"),
    ("Trilu", "Trilu", _math, "conversion/trilu/framework/trilu_onnx_plugin.cpp", "PartitionedCall: Trilu", "copy"),
    ("MaxPool", "MaxPoolV3", _nn, "common/src/framework/max_pool_onnx_plugin.cpp",
     "PartitionedCall: MaxPoolV3 (AI-CPU MaxPool for large kernels, MaxPool3D for 3-D)", "max over windows: exact"),
    ("Clip", "ClipByValue", _math, "conversion/clip_by_value/framework/clip_onnx_plugin.cpp",
     "PartitionedCall: ClipByValue (Minimum / Maximum when one bound is absent)", "min/max: exact"),
    ("Max", "Maximum", _math, "math/maximum/framework/max_onnx_plugin.cpp", "PartitionedCall: Maximum chain",
     "exact"),
    ("Min", "Minimum", _math, "math/minimum/framework/min_onnx_plugin.cpp", "PartitionedCall: Minimum chain",
     "exact"),
)
for _onnx, _ir, _repo, _path, _note, _what in _PLUGINS_EXACT:
    if _ir in _ROWS:
        continue
    _onnxes = tuple(dict.fromkeys(o for o, i, *_ in _PLUGINS_EXACT if i == _ir))
    _exact(_ir, _onnxes, _repo(_path, _note), _what)
del _onnx, _ir, _repo, _path, _note, _what, _onnxes, _d, _red


# ------------------------------------------------------------------------------------------------ ONNX -> IR
def _mode(attrs: Mapping[str, Any], name: str, default: str) -> str:
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _reduce_d(plain: str) -> Callable[[Mapping[str, Any]], str]:
    """ReduceMean/Max/Min/Prod: ConstToAttrPass makes the D type when the axes are constant (an attribute, an
    initializer/Constant input, or absent). Pass attrs["_axes_runtime"] = True for an axes input computed at run
    time."""
    return lambda attrs: plain if attrs.get("_axes_runtime") else plain + "D"


def _resize(attrs: Mapping[str, Any]) -> str:
    return "ResizeNearestNeighborV2" if _mode(attrs, "mode", "nearest") == "nearest" else "Resize"


def _scatter_nd(attrs: Mapping[str, Any]) -> str | None:
    return {"none": "ScatterNdUpdate", "add": "ScatterNdAdd", "max": "ScatterNdMax",
            "min": "ScatterNdMin"}.get(_mode(attrs, "reduction", "none"))  # mul: the plugin has no IR op


def _v3_unless_attr(old: str, new: str) -> Callable[[Mapping[str, Any]], str]:
    """Squeeze/Unsqueeze: axes as an attribute is opset < 13 (the old op), as an input opset >= 13 (V3)."""
    return lambda attrs: old if "axes" in attrs else new


_ONNX_RULES: dict[str, str | Callable[[Mapping[str, Any]], str | None]] = {
    "Resize": _resize,
    "ReduceMean": _reduce_d("ReduceMean"), "ReduceMax": _reduce_d("ReduceMax"), "ReduceMin": _reduce_d("ReduceMin"),
    "ReduceProd": _reduce_d("ReduceProd"),
    "GlobalAveragePool": "ReduceMeanD",
    "ScatterND": _scatter_nd,
    "Squeeze": _v3_unless_attr("Squeeze", "SqueezeV3"), "Unsqueeze": _v3_unless_attr("Unsqueeze", "UnsqueezeV3"),
    # Split: sizes given (attribute before opset 13, second input after: pass attrs["_split_sizes"] = True) -> SplitV
    "Split": lambda attrs: "SplitV" if ("split" in attrs or attrs.get("_split_sizes")) else "Split",
    # MatMul: the plugin emits BatchMatMulV2 for 2-D and batched operands alike (row BatchMatMulV2).
}
for _ir, _row in _ROWS.items():
    for _onnx in _row.onnx_types:
        _ONNX_RULES.setdefault(_onnx, _ir)
for _onnx, _ir in NO_PLUGIN.items():
    _ONNX_RULES.setdefault(_onnx, _ir)
del _ir, _row, _onnx


def ir_type_of(onnx_op_type: str, attrs: Mapping[str, Any] | None = None) -> str | None:
    """The Ascend IR type the device runs for an ONNX node (plugin + one-to-one retyping passes, before fusions);
    None for an op type the table does not know (or ScatterND reduction='mul', which no plugin maps).

    attrs: the node's attributes (strings or bytes), plus two optional facts about inputs that attributes cannot
    carry: "_axes_runtime" (Reduce*: the axes input is computed at run time, so ConstToAttrPass leaves the plain
    type) and "_split_sizes" (Split, opset >= 13: a split-sizes input is present)."""
    rule = _ONNX_RULES.get(onnx_op_type)
    if rule is None:
        return None
    return rule(attrs or {}) if callable(rule) else rule


# ------------------------------------------------------------------------------------------------ lookups
def ir_types() -> tuple[str, ...]:
    """Every IR type with a row, in declaration order."""
    return tuple(_ROWS)


def _check_chip(chip: str) -> None:
    if chip not in CHIPS:
        raise KeyError(f"unknown chip {chip!r} (the device table knows: {', '.join(CHIPS)})")


def table(chip: str) -> dict[str, DeviceKernel]:
    """All rows for `chip`, by IR type, with the chip's overrides applied."""
    _check_chip(chip)
    return {ir: dataclasses.replace(row, **row.chips.get(chip, {})) for ir, row in _ROWS.items()}


def kernel_row(chip: str, ir_type: str) -> DeviceKernel:
    _check_chip(chip)
    row = _ROWS.get(ir_type)
    if row is None:
        raise KeyError(f"no device-table row for IR type {ir_type!r} (known: {', '.join(sorted(_ROWS))})")
    return dataclasses.replace(row, **row.chips.get(chip, {}))


def has_implmode(ir_type: str) -> bool:
    """Whether all_ops_impl_mode.ini lists the IR type (whether an implmode setting can change it at all)."""
    return ir_type in IMPLMODE_OPS


#: The implmode a kernel runs when ATC gives it none: the `impl_mode=` default of its TBE entry function (canndev
#: 2022: dynamic/exp.py, gelu.py -- None, which takes the high_precision branch --, layer_norm.py, sigmoid.py,
#: softmax_v2.py, sqrt.py, real_div.py; see the rows' sources). Assumption, stated in docs/DEVICE_KERNELS.md: ATC's
#: own default (--op_select_implmode=high_performance) acts only on the ops of CANN's built-in
#: high_performance.ini, which is not public; Huawei's SD recipe lists Gelu and Sigmoid explicitly to get
#: high_performance, so they are not in it. Ops with an implmode not listed here take ATC's default value.
KERNEL_DEFAULT_IMPLMODE = {"Exp": "high_performance", "Gelu": "high_precision", "LayerNorm": "high_performance",
                           "Sigmoid": "high_precision", "SoftmaxV2": "high_performance", "Sqrt": "high_performance",
                           "RealDiv": "high_performance"}
ATC_DEFAULT_IMPLMODE = "high_performance"  # hicann/ge op_impl_mode_config_parser.cc: kOpSelectImplModeDefaultValue


def default_implmode(chip: str, ir_type: str) -> str:
    """The implmode the IR op runs on `chip` when no implmode flag names it ("none" when it has no implmode)."""
    kernel_row(chip, ir_type)  # KeyError for an unknown chip or type
    if not has_implmode(ir_type):
        return "none"
    return KERNEL_DEFAULT_IMPLMODE.get(ir_type, ATC_DEFAULT_IMPLMODE)


def variant_for(chip: str, ir_type: str, kernel: str, implmode: str | None,
                bracket: str = "modelled") -> str | None:
    """The registry variant of `kernel` the emulator runs for this IR op's fp16 path.

    Rows without implmode map "any" and ignore `implmode`; rows with implmodes need one of them. bracket
    "optimistic"/"pessimistic" takes the row's bracket mapping where it has one for the kernel, else the modelled
    one. None when the row runs no registry kernel at all (numpy in the op); KeyError for an unknown chip, IR
    type, bracket, a kernel the row does not run, or an implmode the op does not have."""
    row = kernel_row(chip, ir_type)
    if bracket not in ("modelled",) + BRACKETS:
        raise KeyError(f"unknown bracket {bracket!r} (modelled, {', '.join(BRACKETS)})")
    if not row.variants:
        return None
    mapping = row.variants
    if bracket != "modelled" and kernel in row.brackets.get(bracket, {}):
        mapping = row.brackets[bracket]
    if kernel not in mapping:
        raise KeyError(f"{ir_type} ({chip}) does not run registry kernel {kernel!r} (runs: "
                       f"{', '.join(sorted(row.variants))})")
    by_mode = mapping[kernel]
    if not row.implmodes:
        return by_mode["any"]
    if implmode not in by_mode:
        raise KeyError(f"{ir_type} has implmodes {', '.join(row.implmodes)}; got {implmode!r}")
    return by_mode[implmode]


# ------------------------------------------------------------------------------------------------ markdown
DOC_BEGIN = "<!-- BEGIN GENERATED: python -m mschecker.npu.device_table docs/DEVICE_KERNELS.md -->"
DOC_END = "<!-- END GENERATED -->"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _variants_md(variants: Mapping[str, Mapping[str, str]]) -> str:
    if not variants:
        return "(none: numpy in the op)"
    parts = []
    for kernel, by_mode in variants.items():
        names = set(by_mode.values())
        if len(names) == 1:
            parts.append(f"`{kernel}:{next(iter(names))}`")
        else:
            parts.append(", ".join(f"{m}: `{kernel}:{v}`" for m, v in by_mode.items()))
    return "; ".join(parts)


def _onnx_md(ir: str, row: DeviceKernel) -> str:
    unplugged = [op for op, target in NO_PLUGIN.items() if target == ir]
    text = ", ".join(row.onnx_types) or "(fusion / graph edit)"
    return text + (f"; without a plugin: {', '.join(unplugged)}" if unplugged else "")


def _changed(chip_row: DeviceKernel, base: DeviceKernel) -> list[str]:
    return [f.name for f in dataclasses.fields(DeviceKernel)
            if f.name != "chips" and getattr(chip_row, f.name) != getattr(base, f.name)]


def render_markdown() -> str:
    """The generated part of docs/DEVICE_KERNELS.md: source versions, the summary table, per-row details."""
    base = table(CHIPS[0])
    out = [DOC_BEGIN, "", "### Source versions", "", "| repository | commit | what was read |", "|---|---|---|"]
    out += [f"| {repo} | `{commit}` | {REPO_ROLES[repo]} |" for repo, commit in COMMITS.items()]
    out += ["", f"### Summary ({CHIPS[0]}; rows that differ on other chips are marked)", "",
            "| IR type | ONNX types | internal (fp16 input) | implmode | mixlist | emulator variants | status |",
            "|---|---|---|---|---|---|---|"]
    for ir, row in base.items():
        onnx = _onnx_md(ir, row)
        marks = [c for c in CHIPS[1:] if _changed(kernel_row(c, ir), row)]
        status = row.status + (f" ({'; '.join(c + ' differs' for c in marks)})" if marks else "")
        out.append(f"| {ir} | {_md(onnx)} | {_md(row.internal)} | {', '.join(row.implmodes) or '-'} | "
                   f"{row.mixlist} | {_md(_variants_md(row.variants))} | {status} |")
    out += ["", "### Rows", ""]
    for ir, row in base.items():
        if row.internal == "exact" and not row.chips:
            continue
        out += [f"#### {ir}", ""]
        out.append(f"- ONNX: {_onnx_md(ir, row)}")
        out.append(f"- Algorithm: {_md(row.algorithm)}")
        out.append(f"- Internal precision: {_md(row.internal)}")
        out.append(f"- implmode: {', '.join(row.implmodes) or 'none (not in all_ops_impl_mode.ini)'}"
                   + (f" -- {_md(row.implmode_effect)}" if row.implmode_effect else ""))
        out.append(f"- Mixlist (910B ops-info): {row.mixlist}")
        out.append(f"- Emulator: {_md(_variants_md(row.variants))}")
        out.append(f"- Status: {row.status}" + (f" -- {_md(row.assumption)}" if row.assumption else ""))
        for b in BRACKETS:
            if b in row.brackets:
                out.append(f"- Bracket {b}: {_md(_variants_md(row.brackets[b]))}")
        for chip in CHIPS[1:]:
            chip_row = kernel_row(chip, ir)
            for name in _changed(chip_row, row):
                val = getattr(chip_row, name)
                if name == "variants" or name in ("brackets",):
                    val = "; ".join(f"{b}: {_variants_md(m)}" for b, m in val.items()) if name == "brackets" \
                        else _variants_md(val)
                elif name == "sources":
                    val = ", ".join(f"`{s}`" for s in val if s not in row.sources) or "(subset)"
                out.append(f"- {chip} {name}: {_md(str(val))}")
        out.append("- Sources:")
        out += [f"  - `{s}`" + (f" -- {_md(s.note)}" if s.note else "") for s in row.sources]
        out.append("")
    out += ["### Exact rows", "",
            "Data movement, comparisons and selections: values are copied or compared, never rounded, so the "
            "emulator needs no model. Sources at the commits of the version table:", ""]
    for ir, row in base.items():
        if row.internal == "exact" and not row.chips:
            srcs = ", ".join(f"`{s.repo}:{s.path}`" for s in row.sources
                             if not s.path.startswith(_OPSINFO_DIR))
            out.append(f"- {ir} ({', '.join(row.onnx_types)}): {_md(row.algorithm)}"
                       + (f" -- {_md(row.implmode_effect.rstrip('.'))}" if row.implmode_effect else "")
                       + f"; {srcs}")
    out += ["", DOC_END]
    return "\n".join(out) + "\n"


def update_doc(path: str) -> bool:
    """Rewrite the generated section of `path` in place; True when it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(re.escape(DOC_BEGIN) + r".*?" + re.escape(DOC_END) + r"\n?", text, re.S)
    if m is None:
        raise ValueError(f"{path} has no generated section ({DOC_BEGIN} ... {DOC_END})")
    new = text[:m.start()] + render_markdown() + text[m.end():]
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


if __name__ == "__main__":  # pragma: no cover
    import sys

    for _p in sys.argv[1:] or ["docs/DEVICE_KERNELS.md"]:
        print(f"{_p}: {'updated' if update_doc(_p) else 'current'}")
