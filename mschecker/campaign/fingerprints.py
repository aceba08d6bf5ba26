"""Per-node fingerprints: a few numbers per device op output, so that a cell that got worse names the first node
whose values moved between two runs without running anything again.

A fingerprint (`fingerprint`) is four numbers per float output tensor:
- norm: the L2 norm of the finite values, accumulated in float64 (stored as float32). It moves with almost any
  change of the values, in proportion to it, so a tolerance can ignore noise and still see a real drift.
- maxabs: the largest |x| over the finite values (stored as float32). It sees what the norm dilutes: one
  element that blew up in a tensor of millions.
- nonfinite: how many elements are inf or NaN. Counted on their own so that one overflow neither poisons the
  two numbers above (a NaN norm compares unequal to everything) nor hides in them.
- hash: 64 bits of blake2b over the dtype, the shape and the exact bytes (C order). On a bit-exact device
  (reference, npu: the same inputs give the same bits) any change of any bit -- a -0.0 that became 0.0, one ulp
  in one element, the same values in another dtype, another shape -- changes it, which no tolerance on the
  numbers above can promise. 64 bits: a chance collision among 2,000 nodes x 500 cells is ~5e-14.

What is recorded (`Recorder`, a capture callback for mschecker.graph.executor.Executor.run): in execution order,
one fingerprint per float output of every node the run computes, keyed "<device op name>:<output index>" (the
device op name is the node's name in the graph the executor runs: for an npu device profile the device graph,
GE's fusions applied, the names `mschecker plan` prints; an unnamed node gets the executor's label
"#<index>:<op type>"). Nodes folded to constants at plan time (shape arithmetic, weight preprocessing: not device
ops, mschecker/npu/plan.py counts them as host-folded) are skipped: their values are computed once, not by the
run. Integer and bool outputs are skipped (shapes, indices: they do not drift). Memory: a fingerprint is made as
the tensor is produced and the tensor is never kept.

The other cell kinds (mschecker.campaign.cells, whose docstring says why each choice): an sd cell records its
judged NPU run with one Recorder per stage run, in `graph_inputs` mode (the SD check's hook sees the nodes, not
the executors: a node that reads no graph input is the host-folded one) and with a key prefix naming the stage,
the UNet step and the image, "<stage>[@<step>][#<run>]/" (text_encoder/..., unet@1/..., unet@10/...,
vae_decoder/...): the UNet at its first and last step only. A kernels cell has no graph: one fingerprint per
(variant, case group, output), "<kernel>/<variant>/<group>:<output>", over the group's outputs taken as one
tensor (FingerprintSum). Either way the keys are unique and in run order, so first_moved works unchanged.

Storage (mschecker.campaign.store, schema version 3): one row per (run, cell, repeat) pointing at two interned
blobs, the list of keys (shared by every cell that runs the same graph) and the packed array (FP_DTYPE, 20 bytes a
node; shared by every cell sample whose fingerprints are identical, as a bit-exact cell's are from one night to
the next when nothing changed). `first_moved_node` reads both runs' and walks them (`first_moved`).
"""
from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass

import numpy as np

from mschecker.dtypes import is_float

# One node output's fingerprint, packed (little-endian, no padding): 20 bytes.
FP_DTYPE = np.dtype([("norm", "<f4"), ("maxabs", "<f4"), ("nonfinite", "<u4"), ("hash", "<u8")])
# rtol for cells on devices that are not bit-exact (norm and max |x| compared relatively)
DEFAULT_RTOL = 1e-3


@dataclass(frozen=True)
class Fingerprint:
    norm: float       # L2 norm of the finite values (float64 accumulation)
    maxabs: float     # max |x| over the finite values (0.0 when there is none)
    nonfinite: int    # count of inf and NaN elements
    hash: int         # 64-bit blake2b of dtype, shape and bytes

    def describe(self) -> str:
        return (f"norm={self.norm:.7g} max|x|={self.maxabs:.7g} nonfinite={self.nonfinite} "
                f"hash={self.hash:016x}")


CHUNK = 1 << 20   # elements per float64 scratch block: a fingerprint of a 268M-element tensor stays at 8 MB extra


def fingerprint(value: np.ndarray) -> Fingerprint:
    """The fingerprint of one tensor (see the module docstring for why each field). Any dtype is hashed; norm and
    max |x| are of the values as float64 (0.0 for a tensor with no finite element), in blocks of CHUNK elements."""
    c = np.ascontiguousarray(np.asarray(value))
    flat = c.reshape(-1)
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{c.dtype.str}|{c.dtype.name}|{c.shape}|".encode())
    h.update(flat.view(np.uint8) if c.size else b"")
    digest = int.from_bytes(h.digest(), "little")
    sumsq, maxabs, nonfinite = 0.0, 0.0, 0
    with np.errstate(all="ignore"):
        for lo in range(0, flat.size, CHUNK):
            f = flat[lo:lo + CHUNK].astype(np.float64)
            finite = np.isfinite(f)
            bad = f.size - int(np.count_nonzero(finite))
            if bad:
                nonfinite += bad
                f = f[finite]
            if f.size:
                sumsq += float(np.dot(f, f))
                maxabs = max(maxabs, float(np.max(np.abs(f))))
        norm = math.sqrt(sumsq)
        if not math.isfinite(norm) and maxabs > 0:  # the squares overflowed float64: again, scaled by the max
            scaled = 0.0
            for lo in range(0, flat.size, CHUNK):
                f = flat[lo:lo + CHUNK].astype(np.float64)
                f = f[np.isfinite(f)] / maxabs
                scaled += float(np.dot(f, f))
            norm = maxabs * math.sqrt(scaled)
    return Fingerprint(norm, maxabs, nonfinite, digest)


@dataclass(frozen=True)
class NodeFingerprint:
    """A fingerprint of output `output` (its index among the node's outputs) of device op `node`."""

    node: str
    output: int
    fp: Fingerprint

    @property
    def key(self) -> str:
        return f"{self.node}:{self.output}"


@dataclass(frozen=True)
class Moved:
    """The first node (in the run's execution order) whose fingerprint differs between a baseline and a run.

    kind: "moved" (the node is in both; `reason` says which field) or "graph changed" (the node is in one run
    only: base or run is None). index: its position in the run's list (the baseline's for a removed node)."""

    kind: str
    node: str
    output: int
    index: int
    reason: str
    base: Fingerprint | None
    run: Fingerprint | None

    def short(self) -> str:
        """One phrase for a report's reason column."""
        if self.kind == "graph changed":
            return f"graph changed at {self.node}:{self.output} (#{self.index}, {self.reason})"
        return f"first node that moved: {self.node}:{self.output} (#{self.index}, {self.reason.split(' (')[0]})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "output": self.output, "index": self.index,
                "reason": self.reason}

    def describe(self) -> str:
        if self.kind == "graph changed":
            where = "only in the baseline" if self.run is None else "only in this run"
            return f"graph changed at {self.node}:{self.output} (#{self.index}, {where})"
        return (f"first moved node {self.node}:{self.output} (#{self.index}): {self.reason}; "
                f"baseline {self.base.describe()}; this run {self.run.describe()}")


class Recorder:
    """Capture callback for Executor.run / GraphRunner.run_captured recording one sample's fingerprints.

    executor: the Executor that will run (its plan gives each node its label and tells the folded nodes); without
    it a node is named by its own name (or "#?:<op type>") and none is skipped, unless `graph_inputs` is given.
    graph_inputs: for a hook that sees the nodes but not the executor (the SD check's capture: its stage runners
    are built inside the pipeline), the names of the run's graph inputs: a node is then host-folded when it reads
    none of them, directly or through other nodes (the executor folds exactly such nodes, mschecker.graph.executor
    Executor._fold, except a constant of more than FOLD_MAX_BYTES or one whose folding failed, which it computes
    on every run: a function of the weights alone either way), and an unnamed node is "#<position>:<op type>"
    (its position among the run's nodes: unique, the same in every run of the graph). Use one such Recorder per
    executor run (it tells the nodes apart by identity, and reads them as they come).
    prefix: prepended to every node key (the SD cells' "<stage>@<step>/"). Keeps only fingerprints."""

    def __init__(self, executor=None, *, prefix: str = "", graph_inputs=None):
        self.entries: list[NodeFingerprint] = []
        self.prefix = prefix
        self._labels: dict[int, tuple[str, bool, dict[str, int]]] = {}
        self._graph_inputs = None if graph_inputs is None else frozenset(graph_inputs)
        self._data: set[str] = set()   # graph_inputs mode: the tensors that depend on a graph input
        if executor is not None:
            for step in executor.steps:
                outputs = {n: k for k, n in enumerate(step.node.output) if n}
                self._labels[id(step.node)] = (step.label, step.folded is not None, outputs)

    def __call__(self, node, name: str, value) -> None:
        info = self._labels.get(id(node))
        if info is None:
            if self._graph_inputs is not None:
                label, folded, outputs = self._streamed(node)
            else:
                label, folded = node.name or f"#?:{node.op_type}", False
                outputs = {n: k for k, n in enumerate(node.output) if n}
        else:
            label, folded, outputs = info
        if folded:
            return
        value = np.asarray(value)
        if not is_float(value.dtype):
            return
        self.entries.append(NodeFingerprint(self.prefix + label if self.prefix else label, outputs.get(name, 0),
                                            fingerprint(value)))

    def _streamed(self, node) -> tuple[str, bool, dict[str, int]]:
        """graph_inputs mode: a node's label and whether it is host-folded, decided at its first output (the
        nodes come in execution order, so its inputs' producers came before it) and kept for its others."""
        outputs = {n: k for k, n in enumerate(node.output) if n}
        data = self._data
        reads_data = any(n in self._graph_inputs or n in data for n in node.input if n)
        if reads_data:
            data.update(outputs)
        info = (node.name or f"#{len(self._labels)}:{node.op_type}", not reads_data, outputs)
        self._labels[id(node)] = info
        return info

    # -------------------------------------------------------------------------------- packed (store) form
    def names(self) -> list[str]:
        return [e.key for e in self.entries]

    def array(self) -> np.ndarray:
        return pack(self.entries)

    def record(self) -> dict:
        """The plain-data form a cell record carries to the store ({"names": [...], "data": bytes})."""
        return {"names": self.names(), "data": self.array().tobytes()}


class FingerprintSum:
    """One fingerprint of a sequence of tensors, as if of one (a kernel cell's outputs over a group of cases),
    built as they come (`add`; nothing kept but a few numbers): norm = the L2 norm over all their finite values,
    maxabs the largest, nonfinite the total, and the hash over each tensor's dtype, shape and bytes in order (so
    the same values split otherwise, reordered or in another dtype hash differently). One tensor's `result()` is
    fingerprint(tensor)."""

    def __init__(self):
        self._hash = hashlib.blake2b(digest_size=8)
        self._norms: list[float] = []
        self._maxabs, self._nonfinite = 0.0, 0

    def add(self, value) -> None:
        c = np.ascontiguousarray(np.asarray(value))
        fp = fingerprint(c)
        self._hash.update(f"{c.dtype.str}|{c.dtype.name}|{c.shape}|".encode())
        self._hash.update(c.reshape(-1).view(np.uint8) if c.size else b"")
        self._norms.append(fp.norm)
        self._maxabs, self._nonfinite = max(self._maxabs, fp.maxabs), self._nonfinite + fp.nonfinite

    def result(self) -> Fingerprint:
        norms = self._norms
        top = max(norms, default=0.0)
        if len(norms) == 1 or not (top > 0 and math.isfinite(top)):
            norm = top
        else:  # scaled by the largest: the squares of norms past 1e154 do not overflow
            norm = top * math.sqrt(sum((n / top) ** 2 for n in norms))
        return Fingerprint(norm, self._maxabs, self._nonfinite, int.from_bytes(self._hash.digest(), "little"))


def pack(entries: list[NodeFingerprint]) -> np.ndarray:
    a = np.zeros(len(entries), FP_DTYPE)
    if entries:  # a norm past float32's range is stored as inf (compared as moved against any finite one)
        with np.errstate(over="ignore"):
            a["norm"] = np.array([e.fp.norm for e in entries], np.float64).astype(np.float32)
            a["maxabs"] = np.array([e.fp.maxabs for e in entries], np.float64).astype(np.float32)
        a["nonfinite"] = [min(e.fp.nonfinite, 0xFFFFFFFF) for e in entries]
        a["hash"] = np.array([e.fp.hash for e in entries], dtype=np.uint64)
    return a


def unpack(names: list[str], array: np.ndarray) -> list[NodeFingerprint]:
    """The stored form back to NodeFingerprints (float32 norm / max |x| widened: compare with a tolerance)."""
    if len(names) != len(array):
        raise ValueError(f"{len(names)} node names for {len(array)} fingerprints")
    out = []
    for key, (norm, maxabs, nonfinite, h) in zip(names, array.tolist()):
        node, _, k = key.rpartition(":")
        out.append(NodeFingerprint(node, int(k) if k.isdigit() else 0, Fingerprint(norm, maxabs, nonfinite, h)))
    return out


def encode_names(names: list[str]) -> bytes:
    """A node key list as one zlib-compressed blob (names repeat prefixes: ~5x smaller)."""
    return zlib.compress("\n".join(names).encode(), 6)


def decode_names(blob: bytes) -> list[str]:
    text = zlib.decompress(blob).decode()
    return text.split("\n") if text else []


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


# ------------------------------------------------------------------------------------------------- compare
def _moved_fields(a: Fingerprint, b: Fingerprint, bit_exact: bool, rtol: float) -> str | None:
    if bit_exact:
        if a.hash == b.hash:
            return None
        what = [f for f in ("norm", "maxabs", "nonfinite") if getattr(a, f) != getattr(b, f)]
        return "bits changed" + (f" ({', '.join(what)} moved)" if what else " (norm, max|x| equal)")
    if a.nonfinite != b.nonfinite:
        return f"nonfinite {a.nonfinite} -> {b.nonfinite}"
    for f in ("norm", "maxabs"):
        x, y = getattr(a, f), getattr(b, f)
        if x != y and (abs(x - y) > rtol * max(abs(x), abs(y)) or math.isinf(x) or math.isinf(y)):
            return f"{f} {x:.7g} -> {y:.7g} (relative {abs(x - y) / max(abs(x), abs(y)):.3g} > rtol {rtol:g})"
    return None


def first_moved(base: list[NodeFingerprint], run: list[NodeFingerprint], *, bit_exact: bool,
                rtol: float = DEFAULT_RTOL) -> Moved | None:
    """The first node, walking the run in execution order, whose fingerprint differs from the baseline's.

    bit_exact (reference, npu): the hash differs -- any bit of the tensor changed. Otherwise the nonfinite count
    differs, or norm or max |x| moved by more than rtol relative to the larger of the two (|a - b| > rtol *
    max(|a|, |b|): symmetric, so "moved" does not depend on which run is the baseline; norm and max are the fields
    that move in proportion to the values, a hash would flag the noise such a device has between two runs).
    A node in one list only is "graph changed" (reported, in order, like a moved node: the first of them, or the
    first node of the baseline missing from the run when that comes earlier in the baseline's order than the
    first event in the run). None when nothing moved."""
    in_base = {e.key: (i, e) for i, e in enumerate(base)}
    in_run = {e.key for e in run}
    event = None
    for i, e in enumerate(run):
        hit = in_base.get(e.key)
        if hit is None:
            event = Moved("graph changed", e.node, e.output, i, "only in this run", None, e.fp)
            break
        reason = _moved_fields(hit[1].fp, e.fp, bit_exact, rtol)
        if reason:
            event = Moved("moved", e.node, e.output, i, reason, hit[1].fp, e.fp)
            break
    for j, b in enumerate(base):
        if b.key not in in_run:
            if event is None or j <= event.index:
                return Moved("graph changed", b.node, b.output, j, "only in the baseline", b.fp, None)
            break
    return event


def first_moved_node(store, base_run_id: str, run_id: str, cell_key: str, *, repeat: int | None = None,
                     rtol: float = DEFAULT_RTOL) -> Moved | None:
    """The first moved node of cell `cell_key` between two stored runs (the compare's entry: reads only the
    store). bit-exact or not from the run's cell record. None when either run has no fingerprints for the cell
    (an onnxruntime or kernels cell, a crashed cell, a store older than schema 3) or when nothing moved."""
    a = store.fingerprints(base_run_id, cell_key, repeat)
    b = store.fingerprints(run_id, cell_key, repeat)
    if a is None or b is None:
        return None
    row = store.db.execute("SELECT bit_exact FROM cells WHERE run_id=? AND cell_key=? ORDER BY repeat LIMIT 1",
                           (run_id, cell_key)).fetchone()
    bit_exact = bool(row[0]) if row is not None and isinstance(row[0], int) else True
    return first_moved_packed(a, b, bit_exact=bit_exact, rtol=rtol)


def first_moved_packed(base: tuple[list[str], np.ndarray], run: tuple[list[str], np.ndarray], *, bit_exact: bool,
                       rtol: float = DEFAULT_RTOL) -> Moved | None:
    """first_moved on the stored form ((node keys, FP_DTYPE array) each). The same graph (the common case: the
    node lists are equal) is one vectorized pass that unpacks only the first moved node; otherwise first_moved."""
    (bn, ba), (rn, ra) = base, run
    if bn != rn:
        return first_moved(unpack(bn, ba), unpack(rn, ra), bit_exact=bit_exact, rtol=rtol)
    if bit_exact:
        moved = ba["hash"] != ra["hash"]
    else:
        def drift(f):
            x, y = ba[f].astype(np.float64), ra[f].astype(np.float64)
            far = np.abs(x - y) > rtol * np.maximum(np.abs(x), np.abs(y))
            return (x != y) & (far | np.isinf(x) | np.isinf(y))
        with np.errstate(all="ignore"):
            moved = (ba["nonfinite"] != ra["nonfinite"]) | drift("norm") | drift("maxabs")
    hits = np.flatnonzero(moved)
    if hits.size == 0:
        return None
    i = int(hits[0])
    (b,), (r,) = unpack(bn[i:i + 1], ba[i:i + 1]), unpack(rn[i:i + 1], ra[i:i + 1])
    m = first_moved([b], [r], bit_exact=bit_exact, rtol=rtol)
    return Moved(m.kind, m.node, m.output, i, m.reason, m.base, m.run)
