"""The knobs of a device profile speak ATC's language: checked against the device kernel table before a run.

ATC's --op_precision_mode / --optypelist_for_implmode and --keep_dtype `OpType::T` take Ascend IR op types
(InstanceNorm, SoftmaxV2, Gelu), not ONNX ones (InstanceNormalization, Softmax), and an implmode exists only for
the ops listed in CANN's all_ops_impl_mode.ini (docs/DEVICE_KERNELS.md cites both). A profile with a `device`
refuses what the device would not accept, in one line that names what to write instead; a generic profile
(device "") keeps ONNX op types, since it models no device.
"""
from __future__ import annotations

from mschecker.errors import InputError
from mschecker.npu.atc import nearest, parse_customize_line
from mschecker.npu.device_table import CHIPS, IMPLMODE_INI, has_implmode, ir_type_of, ir_types, kernel_row


def ir_type_advice(name: str) -> str | None:
    """Why `name` is not an Ascend IR op type the table knows, and what to write instead; None when it is one."""
    if name in ir_types():
        return None
    ir = ir_type_of(name)
    if ir is not None:
        return f"{name} is an ONNX op type; ATC takes the Ascend IR op type {ir}"
    close = nearest(name, ir_types())
    hint = f"nearest: {', '.join(close)}" if close else "docs/DEVICE_KERNELS.md lists them"
    return f"{name} is not an Ascend IR op type of the device table ({hint})"


def implmode_advice(ir_type: str) -> str | None:
    """Why an implmode cannot be set for the IR op `ir_type`; None when the op has one."""
    if has_implmode(ir_type):
        return None
    fused_only = ir_type in ir_types() and not kernel_row(CHIPS[0], ir_type).onnx_types
    keep = (f"--customize-dtypes 'OpType::{ir_type}:InputDtype:float32' or a device op's name (a {ir_type} is "
            "always made by a GE fusion, after atc applies keep_dtype)" if fused_only else
            f"--keep-dtype OpType::{ir_type} or a node name where the op is not fused, --customize-dtypes "
            "'NAME::InputDtype:float32,...' with the device op's name where it is")
    return (f"{ir_type} has no implmode on the device (it is not in CANN's all_ops_impl_mode.ini; "
            f"docs/DEVICE_KERNELS.md gives each op's implmodes); to change its precision keep it in fp32: {keep} "
            "(`mschecker plan` prints the device ops)")


def mode_advice(ir_type: str, mode: str) -> str | None:
    """Why `mode` cannot be set for the IR op (its all_ops_impl_mode.ini entry lacks it); None when it can."""
    modes = IMPLMODE_INI.get(ir_type, ())
    if mode == "enable_hi_float_32_execution":
        return "enable_hi_float_32_execution is not supported by the current ATC (--op_precision_mode.md)"
    if mode in modes:
        return None
    return (f"{ir_type} implements {', '.join(modes)} (all_ops_impl_mode.ini); atc does not accept {mode} for it"
            if modes else implmode_advice(ir_type))


def _implmode_target(op_type: str, mode: str | None) -> str | None:
    """Why an implmode setting for `op_type` is refused: not an IR type, no implmode, not this mode."""
    why = ir_type_advice(op_type)
    if why is None:
        return implmode_advice(op_type) or (mode_advice(op_type, mode) if mode else None)
    ir = ir_type_of(op_type)
    if ir is not None and implmode_advice(ir):
        why += ", which " + implmode_advice(ir).split(" ", 1)[1]
    return why


def check_device_knobs(profile, where: str) -> None:
    """InputError (one line) for the first knob of `profile` the device would refuse (module docstring)."""
    if profile.device not in CHIPS:
        raise InputError(f"{where}: device {profile.device!r} is not a chip of the device kernel table "
                         f"({', '.join(CHIPS)})")
    if profile.precision_mode == "allow_mix_precision_bf16" and profile.device == "ascend310p":
        raise InputError(f"{where}: {profile.precision_mode_v2 or profile.precision_mode}: the 310P has no bfloat16 "
                         "(atc supports bfloat16 on Atlas A2/A3 parts only, --precision_mode.md)")
    for op_type, mode in profile.implmode_by_op_type.items():
        why = _implmode_target(op_type, mode)
        if why:
            raise InputError(f"{where}: op_precision_mode {op_type}={mode}: {why}")
    for name, mode in profile.implmode_by_node.items():
        if mode == "enable_hi_float_32_execution":
            raise InputError(f"{where}: op_precision_mode [ByNodeName] {name}: {mode_advice('', mode)}")
    for op_type in profile.optypelist_for_implmode:
        why = _implmode_target(op_type, None)
        if why:
            raise InputError(f"{where}: optypelist_for_implmode {op_type}: {why}")
    for entry in profile.keep_dtype:
        if entry.startswith("OpType::"):
            why = ir_type_advice(entry[len("OpType::"):])
            if why:
                raise InputError(f"{where}: keep_dtype {entry}: {why}")
    for k, line in enumerate(profile.customize_dtypes):
        e = parse_customize_line(line, f"{where}: customize_dtypes[{k}]")
        why = ir_type_advice(e.name) if e.is_type else None
        if why:
            raise InputError(f"{where}: customize_dtypes OpType::{e.name}: {why}")
    for table in profile.modify_mixlist.values():
        for op_types in table.values():
            for op_type in op_types:
                why = ir_type_advice(op_type)
                if why:
                    raise InputError(f"{where}: modify_mixlist {op_type}: {why}")
    if profile.fusion:
        from mschecker.npu.fusion import pass_names  # lazy: start-up (google.protobuf, ml_dtypes, numpy)

        known = pass_names()
        for name in profile.fusion:
            if name not in known and name != "ALL":  # ALL: every modelled GE pass (npu.fusion.resolve_switches)
                raise InputError(f"{where}: fusion switch {name!r} is not a fusion pass (passes: {', '.join(known)}, "
                                 "or ALL)")
