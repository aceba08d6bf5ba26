import dataclasses

import pytest

from mschecker.kernels import registry


@pytest.fixture
def poly_gelu(monkeypatch):
    """Plant: the fp16 high_performance GELU is the poor polynomial (i-GELU, max |error| 1.8e-2): the gelu entry
    keeps only that one among the high_performance fp16 variants, so the NPU policy binds it."""
    info = registry.get_kernel("gelu")
    variants = {k: v for k, v in info.variants.items() if k not in ("fp16_tanh", "fp16_quick")}
    changes = {"variants": variants}
    if hasattr(info, "defaults"):
        changes["defaults"] = tuple(d for d in info.defaults if d in variants)
    planted = dataclasses.replace(info, **changes)
    monkeypatch.setitem(registry._REGISTRY, "gelu", planted)
    return planted
