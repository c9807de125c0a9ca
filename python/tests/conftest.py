import numpy as np
import pytest

# PyTorch and torchvision are required by the tests (not optional): a missing one fails here.
import torch  # noqa: F401
import torchvision  # noqa: F401

import autodnn


@pytest.fixture(scope="session")
def handle():
    """A 2-thread handle with the heuristic policy (no timing, so tests stay fast)."""
    return autodnn.Handle(threads=2, policy="heuristic")


def ref_conv(x, w, b, stride, pad, dilation, groups):
    """f64 cross-correlation: x (N, C, H, W), w (K, C/g, R, S), pad (top, bottom, left, right)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, c, hh, ww = x.shape
    k, cg, r, s = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    t, bo, le, ri = pad
    xp = np.pad(x, ((0, 0), (0, 0), (t, bo), (le, ri)))
    oh = (hh + t + bo - dh * (r - 1) - 1) // sh + 1
    ow = (ww + le + ri - dw * (s - 1) - 1) // sw + 1
    y = np.zeros((n, k, oh, ow))
    kg = k // groups
    for g in range(groups):
        for i in range(r):
            for j in range(s):
                patch = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]
                y[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch,
                                                       w[g * kg:(g + 1) * kg, :, i, j])
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, 1, 1)
    return y


def rel_err(a, ref):
    a = np.asarray(a, np.float64)
    ref = np.asarray(ref, np.float64)
    scale = max(np.abs(ref).max(), 1e-30)
    return np.abs(a - ref).max() / scale
