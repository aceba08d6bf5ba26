"""The profile's kernel switches are data: each switched kernel says where it runs (KernelInfo.substitutes or
stores_outputs), each op that allows a substitute says so (OpSpec.substitutes), and the policy names no kernel."""
from __future__ import annotations

import ast
from pathlib import Path

from mschecker.graph.ops import OPS, lookup
from mschecker.kernels.registry import get_kernel, registry
from mschecker.npu import policy
from mschecker.npu.profile import KERNEL_SWITCHES, NumericsProfile


def test_every_switch_is_a_profile_field_whose_kernel_says_where_it_runs():
    fields = {f.name for f in NumericsProfile.__dataclass_fields__.values()}
    for switch, kernel in KERNEL_SWITCHES.items():
        assert switch in fields
        info = get_kernel(kernel)
        assert bool(info.substitutes) != info.stores_outputs, kernel


def test_op_substitutes_name_a_kernel_that_substitutes_one_of_the_ops_own():
    lookup("MatMul")  # loads every op module
    seen = set()
    for op, spec in OPS.items():
        for name in spec.substitutes:
            own = set(spec.kernel_names({}, 99)) if not callable(spec.kernels) else set()
            assert own & set(get_kernel(name).substitutes), (op, name)
            seen.add(name)
    assert seen == {info.name for info in registry().values() if info.substitutes}


def test_the_policy_names_no_registry_kernel():
    """Kernel names in the policy's code (not its docstrings) would be special cases the entries should carry."""
    tree = ast.parse(Path(policy.__file__).read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    kernels = set(registry())
    named = {n.value for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and n.value in kernels}
    assert named == set()
