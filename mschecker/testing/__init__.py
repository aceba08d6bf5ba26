"""The user testing kit: assertion helpers in the spirit of numpy.testing (asserts), the pytest plugin, the run
store the plugin fills, and hypothesis profiles. The strategies live with the kernels (mschecker.kernels.strategies),
whose cases are built from them.

The helpers are loaded on first use: the pytest plugin, a sibling imported by every pytest run, must not pay for
numpy and the comparison engine (benchmarks/plugin_overhead.py)."""
from __future__ import annotations

__all__ = [
    "CheckFailure", "ContractRule", "GoldenDir", "assert_close_to_reference", "assert_matches_golden",
    "check_kernel", "check_planted_bugs", "contract_comparison", "contract_report", "kernel_case_report", "planted_bug", "register_user_kernel",
    "unregister_user_kernel",
]


def __getattr__(name: str):
    if name in __all__:
        from mschecker.testing import asserts  # lazy: the plugin's import time (see the docstring)

        return getattr(asserts, name)
    raise AttributeError(f"module 'mschecker.testing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
