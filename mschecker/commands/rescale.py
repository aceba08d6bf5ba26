"""`mschecker rescale --model M --input I --tensor T[,T...] [--k K] --out FILE.onnx [--profile P]`: the exact
power-of-two rescale of a region that overflows fp16 (mschecker/bisect/rescale.py, docs/BISECT.md "Exact
rescaling"), on request.

The tensors' producing linear ops are scaled by 2^-k (weights and biases), the norms that end the region get
epsilon * 2^-2k, other contributors to a residual sum the same factor; the patched fp32 model is proven equal to
the original on the float64 reference for every input set (within 1e-12 relative) and written to --out with
FILE.txt beside it listing every change. Without --k the smallest k that brings the tensors' reference peak under
fp16's range with a 4x margin (more for a LayerNorm region). The emulated device's error before and after is
printed for the profile (default ascend910b). Exit 0 written; 2 (one line) for bad input, including a region
that is not scale invariant (naming the op that breaks it) and an output that would be overwritten partially;
3 for an internal error (a patched model that is not exact).
"""
from __future__ import annotations

from mschecker.errors import InputError
from mschecker.npu.knobs import add_npu_arguments, npu_options_from_args
from mschecker.commands._args import Parser, bounded_int, check_writable
from mschecker.fsio import write_file_set
from mschecker.tensors.meta import tensor_meta


def build_parser(prog: str = "mschecker rescale") -> Parser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="ONNX model (.onnx)")
    p.add_argument("--input", required=True, action="append", help="input tensors (as for run; repeat for more sets)")
    p.add_argument("--tensor", required=True, action="append", metavar="T[,T...]",
                   help="the overflowing activation tensor(s) the region starts from")
    p.add_argument("--k", type=bounded_int("--k", 1, 60), default=None, help="scale by 2^-k (default: chosen)")
    p.add_argument("--out", required=True, metavar="FILE.onnx", help="the rescaled model (and FILE.txt, the changes)")
    add_npu_arguments(p)
    return p


def main(argv: list[str]) -> int:
    import numpy as np

    # lazy: start-up (mschecker._fastfp16, mschecker.bisect, mschecker.devdump)
    from mschecker.bisect import Sample, read_samples
    from mschecker.bisect.lockstep import reference_executor
    from mschecker.bisect.policy import npu_policy
    from mschecker.bisect.rescale import apply_rescale, choose_k, plan_rescale, prove, relative_difference
    from mschecker.bisect.writers import serialize
    from mschecker.graph.executor import Executor
    from mschecker.graph.loader import load_model
    args = build_parser().parse_args(argv)
    out = check_writable(args.out, "--out")
    report_path = check_writable(str(out.with_suffix("")) + ".txt", "--out")
    tensors = [t.strip() for v in args.tensor for t in v.split(",") if t.strip()]
    model = load_model(args.model)
    produced = {o for n in model.graph.node for o in n.output}
    missing = [t for t in tensors if t not in produced]
    if missing:
        raise InputError(f"--tensor {missing[0]!r}: no node of {args.model} produces it")
    samples = read_samples(args.input, [tensor_meta(i) for i in model.graph.input if i.name not in model.initializers])
    reference = reference_executor(model)
    peak = 0.0
    for s in samples:
        captured = {}
        reference.run(s.feeds, capture=lambda node, name, value: captured.__setitem__(name, value))
        peak = max([peak] + [float(np.nanmax(np.abs(captured[t]))) for t in tensors if t in captured])
    k = args.k or choose_k(model.proto, tensors, peak)
    plan = plan_rescale(model.proto, tensors, k)  # InputError (exit 2) names the op that breaks the invariance
    patched = apply_rescale(model.proto, plan)
    diff = max(prove(model.proto, patched, s.feeds) for s in samples)
    if not diff <= 1e-12:
        raise RuntimeError(f"the rescaled model's float64 outputs differ by {diff:.3g} relative: not exact")
    profile = npu_options_from_args(args).profile_for()
    before, after = Executor(model, npu_policy(profile)), Executor(patched, npu_policy(profile))
    errs = []
    for s in samples:
        ref = reference.run(s.feeds)
        b, a = before.run(s.feeds), after.run(s.feeds)
        errs.append((max(relative_difference(np.asarray(b[n], np.float64), ref[n]) for n in ref),
                     max(relative_difference(np.asarray(a[n], np.float64), ref[n]) for n in ref)))
    # the model and its report as one set: both or neither
    write_file_set(out.parent, {out.name: serialize(patched),
                                report_path.name: ("\n".join(plan.report().lines()) + "\n").encode("utf-8")},
                   flag="--out", prefix=".mschecker-rescale-")
    worst_b, worst_a = max(e[0] for e in errs), max(e[1] for e in errs)
    print(f"rescaled {len(tensors)} tensor(s) by 2^-{k} (peak {peak:.6g}): float64 outputs within {diff:.3g} "
          f"relative; on {profile.name} worst output error {worst_b:.3g} -> {worst_a:.3g} (relative to the "
          f"largest reference value); wrote {out} and {report_path}")
    return 0
