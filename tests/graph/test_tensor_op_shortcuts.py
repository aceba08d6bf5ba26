"""Split, Unsqueeze and Reshape's shape reading are written without np.split / np.expand_dims / a loop over numpy
scalars (per-node Python cost); each is compared here with the numpy definition it replaces, bit for bit, on
fp16 tensors of random bit patterns (NaNs with payloads, +-0, subnormals, +-inf, 65504 all occur), and a planted
variant of each shortcut must be caught by the same comparison."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mschecker.graph.ops import lookup
from mschecker.graph.ops.tensor import _ints
from mschecker.graph.policy import NodeContext


class _Node:
    name = "n"
    output = ("a", "b", "c", "d")


def _ctx(n_out=4):
    node = _Node()
    node.output = tuple("abcd"[:n_out])
    return NodeContext(node=node, opset=18, dtype=np.dtype(np.float16))


def _bits(shape, seed):
    """fp16 values of random bit patterns, with the special values written in."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16).view(np.float16)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, -65504, 6e-8, np.nan], np.float16)
    flat = x.reshape(-1)
    flat[: min(flat.size, specials.size)] = specials[: flat.size]
    return x


def _same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.view(np.uint16).tobytes() == b.view(np.uint16).tobytes()


def _split_definition(x, sizes, axis):
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@st.composite
def _split_cases(draw):
    shape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    length = shape[axis]
    cuts = sorted(draw(st.lists(st.integers(0, length), max_size=3)))
    sizes = np.diff([0] + cuts + [length]).astype(np.int64)
    return shape, axis, sizes, draw(st.integers(0, 2**31))


@given(_split_cases())
def test_split_equals_np_split(case):
    shape, axis, sizes, seed = case
    x = _bits(shape, seed)
    fn = lookup("Split").fn
    got = fn(_ctx(len(sizes)), {"axis": axis}, x, sizes)
    want = _split_definition(x, sizes, axis)
    assert len(got) == len(want) and all(_same(g, w) and np.shares_memory(g, x) or g.size == 0
                                         for g, w in zip(got, want))
    # opset 18 num_outputs form (no sizes input): ceil-sized parts
    parts = len(sizes)
    chunk = -(-shape[axis] // parts)
    even = [min(chunk, shape[axis] - i * chunk) for i in range(parts)]
    if all(n > 0 for n in even):
        got = fn(_ctx(parts), {"axis": axis, "num_outputs": parts}, x)
        assert all(_same(g, w) for g, w in zip(got, _split_definition(x, even, axis)))


@given(st.lists(st.integers(1, 5), min_size=0, max_size=4), st.data())
def test_unsqueeze_equals_np_expand_dims(shape, data):
    x = _bits(shape, 7)
    out_rank = len(shape) + data.draw(st.integers(1, 3))
    n_new = out_rank - len(shape)
    axes = data.draw(st.lists(st.integers(-out_rank, out_rank - 1), min_size=n_new, max_size=n_new,
                              unique_by=lambda a: a % out_rank))
    got = lookup("Unsqueeze").fn(_ctx(1), {}, x, np.array(axes, np.int64))
    assert _same(got, np.expand_dims(x, tuple(sorted(a % out_rank for a in axes))))
    assert np.shares_memory(got, x) or x.size == 0


def test_unsqueeze_repeated_axis_is_an_error_like_expand_dims():
    with pytest.raises(ValueError, match="repeated axis"):
        lookup("Unsqueeze").fn(_ctx(1), {}, np.zeros((2, 3)), np.array([0, -4], np.int64))


@given(st.lists(st.integers(-2**62, 2**62), max_size=5), st.sampled_from([np.int64, np.int32, np.uint8, np.float32]))
def test_ints_reads_shape_tensors_like_a_loop_of_int(values, dtype):
    arr = np.array(values).astype(dtype)
    got = _ints(arr)
    assert got == [int(v) for v in arr.reshape(-1)] and all(type(v) is int for v in got)


def test_reshape_zero_dims_copy_the_input_dim_unless_allowzero():
    reshape = lookup("Reshape").fn
    x = _bits((2, 3, 4), 3)
    assert _same(reshape(_ctx(1), {}, x, np.array([0, -1], np.int64)), x.reshape(2, 12))
    assert _same(reshape(_ctx(1), {}, x, np.array([4, 0, 2], np.int64)), x.reshape(4, 3, 2))
    with pytest.raises(ValueError):  # allowzero: 0 is a real 0, and 24 elements cannot have a 0 dim
        reshape(_ctx(1), {"allowzero": 1}, x, np.array([0, 4], np.int64))
    empty = np.zeros((0, 3), np.float16)
    assert reshape(_ctx(1), {"allowzero": 1}, empty, np.array([3, 0], np.int64)).shape == (3, 0)


def test_planted_shortcut_bugs_are_caught():
    """The comparisons above fail on plausible slips: a split whose last part stops at its declared size
    (np.split runs it to the end), and an unsqueeze that inserts the unit axes before the wrong dims."""
    x = _bits((5, 4), 1)
    sizes = np.array([2, 2], np.int64)  # does not cover the axis: np.split's last part is the rest (3 rows)
    slipped = (x[0:2], x[2:4])
    assert not all(_same(g, w) for g, w in zip(slipped, _split_definition(x, sizes, 0)))
    assert all(_same(g, w) for g, w in zip(lookup("Split").fn(_ctx(2), {"axis": 0}, x, sizes),
                                           _split_definition(x, sizes, 0)))
    wrong_place = x.reshape(5, 4, 1)  # axes [1] misread as "append"
    assert not _same(wrong_place, np.expand_dims(x, 1))
    assert _same(lookup("Unsqueeze").fn(_ctx(1), {}, x, np.array([1], np.int64)), np.expand_dims(x, 1))
