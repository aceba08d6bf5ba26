"""Executor.walk, the lockstep pass's hook: the same values as run(), bit for bit, node by node, and the
yielded inputs are what the node read (nothing written into them)."""
from __future__ import annotations

import numpy as np

from mschecker.graph.executor import Executor
from mschecker.graph.policy import ReferencePolicy
from mschecker.npu.policy import NpuPolicy

from . import models as M


def test_walk_gives_run_bits_and_the_inputs_each_node_read():
    model = M.layernorm_pair()
    feeds = M.feeds(model, 3, 5.0)
    for policy in (NpuPolicy("ascend910b"), NpuPolicy("ascend310p"), ReferencePolicy()):
        ex = Executor(model, policy)
        captured = {}
        out = ex.run(feeds, capture=lambda node, name, v: captured.__setitem__(name, v.copy()))
        seen = {}
        for step, args, produced in ex.walk(feeds):
            for name, value in produced.items():
                assert value.dtype == captured[name].dtype
                np.testing.assert_array_equal(value, captured[name])
                seen[name] = value.copy()
            for name, arg in zip(step.inputs, args):
                if name in seen:  # a produced tensor arrives unchanged
                    np.testing.assert_array_equal(arg, seen[name])
        for name, value in out.items():
            np.testing.assert_array_equal(seen[name], value)
