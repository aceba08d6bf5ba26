"""fusedkern: a user's fused kernels (here one: RMSNorm in fp16 with fp32 arithmetic)."""
from .rmsnorm import rmsnorm

__all__ = ["rmsnorm"]
