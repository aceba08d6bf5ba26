"""mschecker.threads: row blocks cover every row once, and the split loops give the bits of one thread."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from mschecker import threads
from mschecker.optimized_kernels import softmax as npu_softmax
from mschecker.reference import softmax as ref_softmax


@given(rows=st.integers(0, 200), budget=st.integers(1, 9), row_elements=st.integers(1, 1 << 21))
def test_blocks_cover_every_row_once(rows, budget, row_elements):
    seen = []
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OPENBLAS_NUM_THREADS", str(budget))
        threads.for_row_blocks(lambda a, b: seen.extend(range(a, b)), rows, row_elements)
    assert sorted(seen) == list(range(rows))


def test_budget_follows_the_blas_variables(monkeypatch):
    for var in threads.BUDGET_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.thread_budget() == 3
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # OpenBLAS's own variable first
    assert threads.thread_budget() == 2
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "junk")
    assert threads.thread_budget() == 3


def test_exceptions_in_a_block_propagate(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")

    def fails_late(a, b):
        if b == 30:
            raise ValueError("last block")

    with pytest.raises(ValueError, match="last block"):
        threads.for_row_blocks(fails_late, 30, 1 << 21)


@pytest.mark.parametrize("kernel", ["reference", "npu_fp16acc", "npu_fp32acc"])
def test_split_softmax_is_the_one_thread_bits(kernel, monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 37, 301)) * 30
    if kernel != "npu_fp32acc":  # (a bad row sends the fp32acc kernel's whole tensor to numpy's route)
        x[0, 1, 2, :] = -np.inf  # a NaN row among finite ones
    if kernel == "reference":
        fn = ref_softmax.softmax
    else:
        x = x.astype(np.float16)
        fn = npu_softmax.softmax_fp16_fp16acc if kernel == "npu_fp16acc" else npu_softmax.softmax_fp16_fp32acc
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    with np.errstate(all="ignore"):
        one = fn(x, -1)
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
        monkeypatch.setattr(threads, "MIN_ELEMENTS_PER_THREAD", 1)
        split = fn(x, -1)
        split_axis1 = fn(x, 1)
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
        one_axis1 = fn(x, 1)
    assert np.array_equal(one.view(np.uint8), split.view(np.uint8))
    assert np.array_equal(one_axis1.view(np.uint8), split_axis1.view(np.uint8))


def test_planted_lost_block_is_caught(monkeypatch):
    """A split that forgets its last block leaves rows unwritten: the bit comparison above sees it."""
    x = np.random.default_rng(2).standard_normal((64, 300))
    one = ref_softmax.softmax(x)
    real = threads.for_row_blocks

    def loses_last_block(fn, rows, row_elements):
        real(lambda a, b: fn(a, b) if b < rows else None, rows, row_elements)

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    monkeypatch.setattr(threads, "MIN_ELEMENTS_PER_THREAD", 1)
    monkeypatch.setattr(ref_softmax, "for_row_blocks", loses_last_block)
    assert not np.array_equal(one, ref_softmax.softmax(x))
