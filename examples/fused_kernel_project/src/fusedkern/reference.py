"""Float64 references: the truth the fp16 kernels are measured against."""
from __future__ import annotations

import numpy as np


def rmsnorm_reference(x, weight, eps: float = 1e-6) -> np.ndarray:
    """y = x / sqrt(mean(x^2 over the last axis) + eps) * weight, in float64."""
    x = np.asarray(x, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
