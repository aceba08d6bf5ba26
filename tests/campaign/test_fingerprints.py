"""Per-node fingerprints (mschecker.campaign.fingerprints): the fields, first_moved's walk, the store's tables and
migration, and a check cell run twice with one weight perturbed naming the node that reads it."""
from __future__ import annotations

import sqlite3

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.campaign.cells import run_cell
from mschecker.campaign.fingerprints import (FP_DTYPE, Fingerprint, NodeFingerprint, Recorder, first_moved,
                                             first_moved_node, first_moved_packed, fingerprint,
                                             pack, unpack)
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import MIGRATIONS, SCHEMA_VERSION, Store
from mschecker.errors import InputError

from .helpers import add_run, cells_of, record, spec_raw


# ------------------------------------------------------------------------------------------------ fingerprint
def test_fingerprint_fields():
    fp = fingerprint(np.array([3.0, -4.0, np.nan, np.inf, -np.inf], np.float32))
    assert fp.norm == 5.0 and fp.maxabs == 4.0 and fp.nonfinite == 3
    assert fingerprint(np.array([np.nan, np.inf])) == Fingerprint(0.0, 0.0, 2, fingerprint(np.array([np.nan,
                                                                                                     np.inf])).hash)
    big = fingerprint(np.full(4, 1e200))  # squares overflow float64: still the right norm
    assert big.norm == pytest.approx(2e200) and big.maxabs == 1e200
    assert fingerprint(np.zeros((0, 3), np.float32)).norm == 0.0


def test_hash_sees_every_bit_dtype_and_shape():
    h = lambda a: fingerprint(a).hash  # noqa: E731
    zero = np.zeros(3, np.float32)
    assert h(zero) == h(zero.copy())
    assert h(np.array([0.0, -0.0, 0.0], np.float32)) != h(zero)                     # -0.0 is another bit pattern
    assert fingerprint(np.array([0.0, -0.0, 0.0], np.float32)).norm == fingerprint(zero).norm  # the numbers are not
    assert h(zero.astype(np.float16)) != h(zero) and h(zero.astype(np.float64)) != h(zero)  # the same values
    assert h(zero.reshape(1, 3)) != h(zero)
    assert h(np.zeros(3, np.int32)) != h(zero) and h(np.zeros(3, np.float16)) != h(np.zeros(3, np.uint16))  # same bytes
    one_ulp = np.array([1.0, 2.0], np.float32)
    assert h(np.nextafter(one_ulp, 3).astype(np.float32)) != h(one_ulp)
    assert h(np.arange(6, dtype=np.float32).reshape(2, 3).T) == h(np.ascontiguousarray(
        np.arange(6, dtype=np.float32).reshape(2, 3).T))  # the values in C order, not the memory layout


# ------------------------------------------------------------------------------------------------ first_moved
def nfp(name, norm=1.0, maxabs=1.0, nonfinite=0, h=1, output=0):
    return NodeFingerprint(name, output, Fingerprint(norm, maxabs, nonfinite, h))


BASE = [nfp("a", h=1), nfp("b", 2.0, h=2), nfp("c", 3.0, h=3), nfp("d", 4.0, h=4)]


def test_nothing_moved_is_none():
    assert first_moved(BASE, list(BASE), bit_exact=True) is None
    assert first_moved(BASE, list(BASE), bit_exact=False, rtol=0.0) is None


def test_bit_exact_names_the_first_changed_hash():
    run = [BASE[0], nfp("b", 2.0, h=99), nfp("c", 3.5, h=98), BASE[3]]
    m = first_moved(BASE, run, bit_exact=True)
    assert (m.kind, m.node, m.index) == ("moved", "b", 1) and m.base.hash == 2 and m.run.hash == 99
    assert "bits changed" in m.reason and "b:0" in m.describe()


def test_tolerance_ignores_noise_and_the_hash():
    noisy = [nfp(e.node, e.fp.norm * (1 + 1e-5), e.fp.maxabs, 0, h=e.fp.hash + 100) for e in BASE]
    assert first_moved(BASE, noisy, bit_exact=False, rtol=1e-3) is None
    assert first_moved(BASE, noisy, bit_exact=True).node == "a"
    drift = [*noisy[:2], nfp("c", 3.0, 3.0 * 1.01), noisy[3]]  # max |x| moved 1 % at c
    m = first_moved(BASE, drift, bit_exact=False, rtol=1e-3)
    assert m.node == "c" and "maxabs" in m.reason
    overflow = [*BASE[:3], nfp("d", 4.0, nonfinite=1)]
    assert first_moved(BASE, overflow, bit_exact=False, rtol=1.0).node == "d"


def test_the_default_tolerance_is_one_in_a_thousand():
    """Literal: a norm 0.2 % off moves under the default rtol (1e-3), 0.05 % does not (a slip to 1e-2 fails)."""
    moved = [*BASE[:1], nfp("b", BASE[1].fp.norm * 1.002, BASE[1].fp.maxabs, h=BASE[1].fp.hash), *BASE[2:]]
    assert first_moved(BASE, moved, bit_exact=False).node == "b"
    still = [*BASE[:1], nfp("b", BASE[1].fp.norm * 1.0005, BASE[1].fp.maxabs, h=BASE[1].fp.hash), *BASE[2:]]
    assert first_moved(BASE, still, bit_exact=False) is None


def test_a_node_in_one_run_only_is_graph_changed():
    added = [BASE[0], nfp("new"), *BASE[1:]]
    m = first_moved(BASE, added, bit_exact=True)
    assert (m.kind, m.node, m.base) == ("graph changed", "new", None) and "only in this run" in m.describe()
    removed = [BASE[0], BASE[2], BASE[3]]
    m = first_moved(BASE, removed, bit_exact=True)
    assert (m.kind, m.node, m.index, m.run) == ("graph changed", "b", 1, None)
    # a value that moved before the structural change is reported first
    early = [nfp("a", h=7), BASE[2], BASE[3]]
    assert first_moved(BASE, early, bit_exact=True).kind == "moved"
    # outputs are keyed per index: output 1 of a node is not output 0
    two = [nfp("a", output=0), nfp("a", output=1)]
    assert first_moved(two, [two[0]], bit_exact=True).output == 1


@pytest.mark.parametrize("bit_exact", [True, False])
def test_the_packed_fast_path_agrees_with_first_moved(bit_exact):
    rng = np.random.default_rng(3)
    names = [f"n{i}:0" for i in range(50)]
    base = unpack(names, pack([nfp(f"n{i}", float(x), float(x), 0, h=i) for i, x in enumerate(rng.random(50) + 1)]))
    cases = [list(base)]
    for i, change in ((7, dict(h=999)), (20, dict(norm=50.0)), (33, dict(nonfinite=2)), (40, dict(maxabs=np.inf))):
        run = list(base)
        e = base[i]
        run[i] = nfp(e.node, **{"norm": e.fp.norm, "maxabs": e.fp.maxabs, "nonfinite": 0, "h": e.fp.hash, **change})
        cases.append(run)
    for run in cases:
        slow = first_moved(base, run, bit_exact=bit_exact, rtol=1e-3)
        fast = first_moved_packed((names, pack(base)), (names, pack(run)), bit_exact=bit_exact, rtol=1e-3)
        assert fast == slow
    assert [first_moved(base, run, bit_exact=False) for run in cases][2].node == "n20"
    assert first_moved(base, cases[4], bit_exact=False).node == "n40"  # inf against a finite max: moved
    assert first_moved(base, cases[1], bit_exact=False) is None  # only the hash changed


def test_pack_unpack_round_trip():
    entries = [nfp("x:y", 1.5, 2.5, 3, h=2**64 - 1, output=2), nfp("z", h=0)]
    a = pack(entries)
    assert a.dtype == FP_DTYPE and FP_DTYPE.itemsize == 20
    assert unpack([e.key for e in entries], a) == entries


# ------------------------------------------------------------------------------------------------------ store
def _raw_and_key(tmp_path):
    raw = spec_raw()
    return raw, cells_of(raw, tmp_path)[0].key


def test_store_round_trip_and_interning(tmp_path):
    raw, key = _raw_and_key(tmp_path)
    names = ["n1:0", "n2:0", "n2:1"]
    arr = pack([nfp("n1", 1.0, h=5), nfp("n2", 2.0, h=6), nfp("n2", 3.0, h=7, output=1)])
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        assert store._user_version() == SCHEMA_VERSION
        for run in ("r1", "r2"):
            add_run(store, run, raw, tmp_path, {key: record("pass")})
            store.record_fingerprints(run, key, 0, names, arr)
        got_names, got = store.fingerprints("r1", key)
        assert got_names == names and got.tobytes() == arr.tobytes()
        # identical graph and content: stored once, shared by both runs
        assert store.db.execute("SELECT count(*) FROM fp_graphs").fetchone()[0] == 1
        assert store.db.execute("SELECT count(*) FROM fp_data").fetchone()[0] == 1
        assert store.fingerprints("r1", "no such cell") is None
        assert first_moved_node(store, "r1", "r2", key) is None
        moved = arr.copy()
        moved["hash"][1] += 1
        store.record_fingerprints("r2", key, 0, names, moved)  # replaces r2's row
        m = first_moved_node(store, "r1", "r2", key)
        assert m.node == "n2" and m.output == 0
        assert set(store.run_fingerprints("r2")) == {(key, 0)}
        with pytest.raises(ValueError, match="2 names for 60 bytes"):  # a caller bug, not a damaged store
            store.record_fingerprints("r2", key, 0, names[:2], arr)


def test_record_cell_writes_the_records_fingerprints(tmp_path):
    raw, key = _raw_and_key(tmp_path)
    fps = {"names": ["a:0"], "data": pack([nfp("a", h=3)]).tobytes()}
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "r", raw, tmp_path, {key: {**record("pass"), "fingerprints": fps}})
        assert store.fingerprints("r", key)[0] == ["a:0"]
        add_run(store, "r", raw, tmp_path, {key: record("pass")})  # re-recorded (resume) without: the row goes
        assert store.fingerprints("r", key) is None


def test_damaged_fingerprints_are_one_input_error(tmp_path):
    raw, key = _raw_and_key(tmp_path)
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "r", raw, tmp_path, {key: record("pass")})
        store.record_fingerprints("r", key, 0, ["a:0"], pack([nfp("a")]))
        store.db.execute("UPDATE fp_data SET data=x'0102'")
        with pytest.raises(InputError, match="damaged"):
            store.fingerprints("r", key)
        with pytest.raises(InputError, match="damaged"):
            store.run_fingerprints("r")


def test_version_2_store_reads_without_fingerprints_and_upgrades(tmp_path):
    path = tmp_path / "old.sqlite"
    raw, key = _raw_and_key(tmp_path)
    with Store.open(path, create=True, migrations=MIGRATIONS[:2]) as store:
        add_run(store, "old", raw, tmp_path, {key: record("pass")})
    before = path.read_bytes()
    with Store.open(path) as store:  # a reader: not upgraded, no fingerprints
        assert store._user_version() == 2
        assert store.fingerprints("old", key) is None and store.run_fingerprints("old") == {}
        assert first_moved_node(store, "old", "old", key) is None
    assert path.read_bytes() == before
    with Store.open(path, create=True) as store:  # a writer upgrades in place
        assert store._user_version() == SCHEMA_VERSION == 3
        assert store.fingerprints("old", key) is None
        add_run(store, "new", raw, tmp_path, {key: {**record("pass"), "fingerprints": {
            "names": ["a:0"], "data": pack([nfp("a")]).tobytes()}}})
        assert store.fingerprints("new", key)[0] == ["a:0"]
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"fingerprints", "fp_graphs", "fp_data"} <= tables


# ------------------------------------------------------------------------------------------------ end to end
def _model(path, w2_scale: float = 1.0) -> None:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 4)) * w2_scale).astype(np.float32), "w2")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="mm2"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w1, w2, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    from mschecker.modelcheck.check import record_goldens
    from mschecker.tensors.io import write_tensor

    d = tmp_path_factory.mktemp("fp_e2e")
    _model(d / "model.onnx")
    write_tensor(d / "x.bin", np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32))
    record_goldens(str(d / "model.onnx"), [str(d / "x.bin")], str(d / "golden"), device="reference")
    return d


@pytest.mark.parametrize("device", ["reference", "npu"])
def test_check_cell_names_the_node_reading_the_perturbed_weight(e2e, tmp_path, device):
    model = tmp_path / "model.onnx"
    model.write_bytes((e2e / "model.onnx").read_bytes())
    block = {"name": "m", "model": str(model), "inputs": [str(e2e / "x.bin")], "golden": str(e2e / "golden"),
             "devices": [device]} | ({"profiles": ["ascend910b"]} if device == "npu" else {})
    raw = {"campaign": {"name": "fp", "repeats": 1}, "check": [block]}
    (cell,) = parse_campaign(raw, tmp_path / "c.toml").cells()
    first = run_cell(cell)
    assert first["status"] in ("pass", "fail"), first["reason"]
    names = [n.rsplit(":", 1)[0] for n in first["fingerprints"]["names"]]
    if device == "npu":  # the device graph's op names, as `mschecker plan` lists them (GE fused the bias Add)
        from mschecker.npu.plan import device_plan

        assert names == [op.name for op in device_plan(str(model), "ascend910b").ops] == ["mm1", "relu", "mm2"]
    else:
        assert names == ["mm1", "relu", "mm2", "add"]
    same = run_cell(cell)
    _model(model, w2_scale=1.0 + 2 ** -10)  # one initializer perturbed in the second run's model file
    second = run_cell(cell)
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        for run_id, rec in (("base", first), ("same", same), ("moved", second)):
            store.begin_run(run_id, "fp", raw, "sha", {})
            store.record_cell(run_id, cell, rec)
            store.end_run(run_id, "finished")
        assert first_moved_node(store, "base", "same", cell.key) is None  # bit-exact: the same bits again
        m = first_moved_node(store, "base", "moved", cell.key)
        assert m is not None and (m.kind, m.node) == ("moved", "mm2"), m
        # the compare names it for the worse cell (nothing re-run), in the JSON and in the report's reason
        from mschecker.campaign.compare import WORSE, compare_runs
        from mschecker.campaign.report import _reason

        (c,) = compare_runs(store, "base", "moved").cells
        assert c.verdict == WORSE and c.first_moved is not None and c.first_moved.node == "mm2"
        assert c.to_dict()["first_moved"]["node"] == "mm2" and "first node that moved: mm2:0" in _reason(c)
        (same_cell,) = compare_runs(store, "base", "same").cells
        assert same_cell.first_moved is None and "first_moved" not in same_cell.to_dict()


def test_ort_cells_carry_no_fingerprints(e2e, tmp_path):
    block = {"name": "m", "model": str(e2e / "model.onnx"), "inputs": [str(e2e / "x.bin")],
             "golden": str(e2e / "golden"), "devices": ["ort"]}
    cells = parse_campaign({"campaign": {"name": "fp", "repeats": 1}, "check": [block]}, tmp_path / "c.toml").cells()
    rec = run_cell(cells[0])
    assert rec["status"] == "pass" and "fingerprints" not in rec


def test_recorder_skips_folded_and_integer_outputs(tmp_path):
    from mschecker.graph.executor import Executor
    from mschecker.graph.loader import load_model
    from mschecker.graph.policy import ReferencePolicy

    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")
    c = numpy_helper.from_array(np.full((2, 4), 0.5, np.float32), "c")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Shape", ["r"], ["s"], name="shape_of"),     # an integer output
             helper.make_node("Mul", ["c", "c"], ["k"], name="folded"),     # constants only: folded at plan time
             helper.make_node("Add", ["r", "k"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"])]  # unnamed: the executor's label
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("s", TensorProto.INT64, [2])], [shape, c])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    ex = Executor(load_model(tmp_path / "m.onnx"), ReferencePolicy())
    rec = Recorder(ex)
    ex.run({"x": np.arange(8, dtype=np.float32)}, capture=rec)
    assert [s.label for s in ex.steps if s.folded is not None] == ["folded"]
    assert rec.names() == ["reshape:0", "add:0", "#4:Relu:0"]
    assert rec.entries[2].fp.norm == pytest.approx(np.linalg.norm(np.arange(8) + 0.25))
