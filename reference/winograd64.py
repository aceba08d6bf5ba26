"""Float64 Winograd F(2x2, 3x3) (Lavin & Gray 2016): the transform matrices and their error bound, for the
reference's 3x3 stride-1 convolutions (driven by reference/conv.py).

Per 2x2 output tile (input tile d: 4x4, filter g: 3x3): V = B^T d B, U = G g G^T, M = sum over input channels of
U o V, Y = A^T M A. The channel sum is 16 GEMMs (C_out x C_in) @ (C_in x tiles): 16 multiplies per tile and
channel pair instead of the direct route's 36, so the GEMM work drops 2.25x. Each transform is one small dense
GEMM with a Kronecker matrix (vec(B^T d B) = (B^T kron B^T) vec(d)): every coefficient is 0, +-1, +-1/2 or +-1/4,
so every product in it is exact (away from underflow) and only the additions round, in whatever order BLAS picks.

Error bound (componentwise, Higham 3.5 style, u = 2^-53, no underflow; gamma_n = nu/(1-nu)):
  V = (B^T kron B^T) vec(d): at most 4 nonzero exact terms per entry     |V^ - V| <= gamma_3 |B^T||d||B|
  U = (G kron G) vec(g):     at most 9 nonzero exact terms per entry     |U^ - U| <= gamma_8 |G||g||G^T|
  U^ o V^ summed over the C_in channels of a group (any order):          gamma_{C_in} on sum |U^||V^|
  Y = (A^T kron A^T) vec(M): at most 9 nonzero terms per entry           gamma_8 on |A^T||M^||A|
and with (1 + gamma_a)(1 + gamma_b) <= 1 + gamma_{a+b}:
      |y^ - y| <= gamma_{C_in + 20} * S,   S = |A^T| (sum_c (|G||g_c||G^T|) o (|B^T||d_c||B|)) |A|
(C_in per group; the bias is added afterwards, one more rounding). S exceeds the direct route's sum |w||x| by a
small factor (tests/kernels/test_winograd64.py measures both errors on SD-like data), so the float64 reference
keeps ~1e-15 relative error per output (asserted < 1e-13 of max|y| at C_in = 320): 9+ orders of magnitude below
the fp16/bf16 kernels' errors (~1e-3 relative) that this reference exists to judge, which is why a route with a
larger constant than im2col's gamma_{9 C_in} is acceptable there.

The matrices are module constants read at call time, so a planted bug (a flipped sign in B^T, a dropped 1/2 in
G) is a patched constant that the tests must catch.
"""
from __future__ import annotations

import numpy as np

#: Input transform B^T (4x4), filter transform G (4x3), output transform A^T (2x4) of F(2x2, 3x3).
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def filter_transform(w: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (16, O, C) = G g G^T of every filter g = w[o, c] of w (O, C, 3, 3); entry a*4 + b is (G g G^T)[a, b]."""
    return np.matmul(np.kron(G, G), w.reshape(-1, 9).T, out=out.reshape(16, -1)).reshape(out.shape)


def input_transform(tiles: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (C, 16, P) = B^T d B of every 4x4 input tile d = tiles[c, :, p] (tiles: (C, 16, P), row-major taps)."""
    return np.matmul(np.kron(BT, BT), tiles, out=out)


def output_transform(m: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (4, ...) = A^T M A of every tile's M = m[:, ...] (m: (16, ...)); entry r*2 + s is output pixel (r, s)."""
    return np.matmul(np.kron(AT, AT), m.reshape(16, -1), out=out.reshape(4, -1)).reshape(out.shape)
