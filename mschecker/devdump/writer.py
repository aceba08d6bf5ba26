"""Write the emulator's tensors as a device would dump them, so msprobe's own compare can put the emulated NPU
beside a real one, and so the readers are tested on files an independent writer made.

`--dump-format acl`: one ACL dump file per device op, in the device's folder tree
`{DIR}/{time}/0/{model_name}/1/0/{op_type}.{op_name}.{task_id}.0.{timestamp}` (the tree the ait compare README
describes: {time}/{device}/{model_name}/{model_id}/{iteration}), named after the device plan's ops (GE's names for
fused ops), every input (weights too: ACL dumps hold them) and output, with each output's original ONNX op. Layouts
as GE feeds the cube unit: a 2-D convolution's feature maps NC1HWC0 and its filter FRACTAL_Z, a 3-D convolution's
NDC1HWC0 and FRACTAL_Z_3D; everything else ND (a simplification: the device also picks 5-D layouts for ops next
to convolutions, which the reader converts the same way).
`--dump-format msprobe`: msprobe's dump.json + dump_tensor_data/*.npy (devdump.msprobe.write).
Both are written into a temporary folder beside DIR and renamed into place: all or nothing.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from mschecker import fsio
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.devdump.model import OpTensors

FORMATS = ("acl", "msprobe")
CONV2D_TYPES = {"Conv2D", "Conv2DTranspose", "Conv2DTransposeD", "DepthwiseConv2D", "Conv2DBackpropInputD"}
CONV3D_TYPES = {"Conv3D", "Conv3DTranspose", "Conv3DTransposeD"}


def emulator_ops(executor, feeds, source, op_type_of=None) -> Iterator[OpTensors]:
    """The device ops of one emulated run with the values they read and wrote (host-folded nodes are not device
    ops and are left out). `source`: the ONNX model as given (each output's original op). One op's tensors at a
    time: the caller writes and drops them."""
    covers_of = _covers_table(source)
    for step, args, produced in executor.walk(feeds):
        if getattr(step, "folded", None) is not None or step.ctx.description.startswith("host-folded"):
            continue
        node = step.node
        names = [o for o in node.output if o and isinstance(produced.get(o), np.ndarray)]
        yield OpTensors(node.name or step.label, op_type_of(node) if op_type_of else node.op_type,
                        [a if isinstance(a, np.ndarray) else None for a in args],
                        [produced[o] for o in names], [covers_of.get(o) for o in names], names)


def run_and_dump(runner, feeds, source, folder, *, fmt: str, model_name: str = "model") -> tuple[dict, Path]:
    """One walk of a graph runner's executor writes the dump and collects the graph outputs (no second run, unless
    a graph output is no device op's: a host-folded constant or an input fed through). Returns (outputs, the
    folder holding the files)."""
    executor = runner.executor
    wanted = set(executor.output_names)
    outputs: dict = {}

    def ops():
        for op in emulator_ops(executor, feeds, source, getattr(executor.policy, "op_type_of", None)):
            outputs.update((n, v) for n, v in zip(op.output_names, op.outputs) if n in wanted)
            yield op
    where = write_dump(folder, ops(), fmt=fmt, model_name=model_name)
    if any(n not in outputs for n in executor.output_names):
        outputs = runner.run(feeds)
    return {n: outputs[n] for n in executor.output_names}, where


def _covers_table(source) -> dict[str, tuple[str, int]]:
    """Tensor -> (ONNX node, output index) for every node of the ONNX graph the plan was made from (a fused op's
    outputs are its last covered node's outputs under the same tensor names)."""
    table: dict[str, tuple[str, int]] = {}
    for node in source.proto.graph.node:
        for i, o in enumerate(node.output):
            if o and node.name:
                table[o] = (node.name, i)
    return table


def acl_layout(op_type: str):
    """The layout chooser for encode(): which tensors of an op the device keeps in a blocked layout."""
    def layout(io: str, index: int, a: np.ndarray) -> str:
        if op_type in CONV2D_TYPES and a.ndim == 4:
            return "FRACTAL_Z" if (io, index) == ("input", 1) else \
                "NC1HWC0" if index == 0 else "ND"
        if op_type in CONV3D_TYPES and a.ndim == 5:
            return "FRACTAL_Z_3D" if (io, index) == ("input", 1) else \
                "NDC1HWC0" if index == 0 else "ND"
        return "ND"
    return layout


def write_dump(folder, ops: Iterable[OpTensors], *, fmt: str, model_name: str = "model") -> Path:
    """Write `ops` as a dump folder of `fmt` at `folder` (which must not exist or be empty); returns the folder
    holding the files."""
    if fmt not in FORMATS:
        raise InputError(f"--dump-format {plain(fmt)}: one of {', '.join(FORMATS)}")
    folder = Path(folder)
    check_dump_target(folder)
    if fmt == "msprobe":
        from mschecker.devdump import msprobe  # lazy: start-up (ml_dtypes, mschecker.dtypes)

        return msprobe.write(folder, ops)
    return _write_acl(folder, ops, model_name)


def check_dump_target(folder: Path) -> None:
    """Refused before any work: a path that exists and is not an empty directory."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"--dump {plain(folder)}: exists and is not an empty directory (dumps never mix runs)")


def _write_acl(folder: Path, ops: Iterable[OpTensors], model_name: str) -> Path:
    from mschecker.devdump import acl  # lazy: start-up (ml_dtypes, mschecker.dtypes)

    parent = folder.parent
    created = fsio.make_directory(parent)
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    try:
        tmp = parent / f".{folder.name}.{uuid.uuid4().hex[:12]}.tmp"  # beside the target: the rename is atomic
        tmp.mkdir()
    except OSError as exc:
        fsio.remove_directories(created)
        raise InputError(f"--dump {plain(folder)}: {fsio.os_reason(exc)}") from None
    leaf = tmp / stamp / "0" / fsio.safe_component(model_name, "model") / "1" / "0"
    try:
        leaf.mkdir(parents=True)
        base = int(time.time() * 1e6)
        for task, op in enumerate(ops):
            name = acl.file_name(op, task, base + task)
            (leaf / name).write_bytes(acl.encode(op, acl_layout(op.op_type), dump_time=base + task))
        if folder.exists():
            folder.rmdir()
        tmp.rename(folder)
    except OSError as exc:
        _remove_tree(tmp)
        fsio.remove_directories(created)
        raise InputError(f"--dump {plain(folder)}: {fsio.os_reason(exc)}") from None
    except BaseException:
        _remove_tree(tmp)
        raise
    return folder / stamp / "0" / fsio.safe_component(model_name, "model") / "1" / "0"


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
