"""NPU-style kernels: lower precision, other orders, approximations. Each variant documents its numerics."""
