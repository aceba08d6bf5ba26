"""The knobs of a device profile speak ATC's language: checked against the device kernel table before a run.

ATC's --op_precision_mode / --optypelist_for_implmode and --keep_dtype `OpType::T` take Ascend IR op types
(InstanceNorm, SoftmaxV2, Gelu), not ONNX ones (InstanceNormalization, Softmax), and an implmode exists only for
the ops listed in CANN's all_ops_impl_mode.ini (docs/DEVICE_KERNELS.md cites both). A profile with a `device`
refuses what the device would not accept, in one line that names what to write instead; a generic profile
(device "") keeps ONNX op types, since it models no device.
"""
from __future__ import annotations

from ..errors import InputError
from .device_table import CHIPS, has_implmode, ir_type_of, ir_types


def ir_type_advice(name: str) -> str | None:
    """Why `name` is not an Ascend IR op type the table knows, and what to write instead; None when it is one."""
    if name in ir_types():
        return None
    ir = ir_type_of(name)
    if ir is not None:
        return f"{name} is an ONNX op type; ATC takes the Ascend IR op type {ir}"
    known = ", ".join(sorted(ir_types()))
    return f"{name} is not an Ascend IR op type of the device table (known: {known})"


def implmode_advice(ir_type: str) -> str | None:
    """Why an implmode cannot be set for the IR op `ir_type`; None when the op has one."""
    if has_implmode(ir_type):
        return None
    fused = " (OpType::GroupNorm where GE fused it with its Reshapes, Mul and Add: SD's GroupNorm export)" \
        if ir_type == "InstanceNorm" else ""
    return (f"{ir_type} has no implmode on the device (it is not in CANN's all_ops_impl_mode.ini; "
            f"docs/DEVICE_KERNELS.md gives each op's implmodes); to change its precision keep it in fp32 with "
            f"--keep-dtype OpType::{ir_type}{fused} or a node name (a fused op answers to its device name, as "
            f"`mschecker plan` prints it)")


def check_device_knobs(profile, where: str) -> None:
    """InputError (one line) for the first knob of `profile` the device would refuse (module docstring)."""
    if profile.device not in CHIPS:
        raise InputError(f"{where}: device {profile.device!r} is not a chip of the device kernel table "
                         f"({', '.join(CHIPS)})")
    for op_type in profile.implmode_by_op_type:
        why = ir_type_advice(op_type)
        if why is None:
            why = implmode_advice(op_type)
        elif ir_type_of(op_type) is not None and implmode_advice(ir_type_of(op_type)):
            why += ", which " + implmode_advice(ir_type_of(op_type)).split(" ", 1)[1]
        if why:
            raise InputError(f"{where}: op_precision_mode {op_type}: {why}")
    for entry in profile.keep_dtype:
        if entry.startswith("OpType::"):
            why = ir_type_advice(entry[len("OpType::"):])
            if why:
                raise InputError(f"{where}: keep_dtype {entry}: {why}")
    if profile.fusion:
        from .fusion import pass_names

        known = pass_names()
        for name in profile.fusion:
            if name not in known and name != "ALL":  # ALL: every modelled GE pass (npu.fusion.resolve_switches)
                raise InputError(f"{where}: fusion switch {name!r} is not a fusion pass (passes: {', '.join(known)}, "
                                 "or ALL)")
