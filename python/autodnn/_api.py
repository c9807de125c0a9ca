"""The functional API: argument normalisation (padding forms, pairs, layouts, the default
handle) in Python, the work in the extension module."""

import numbers
import operator
import threading
from collections import namedtuple

import numpy as np

from . import _autodnn as _ext
from ._errors import InvalidArgumentError

AlgoRecord = namedtuple("AlgoRecord", "name ms workspace_bytes deterministic status")
AlgoRecord.__doc__ = """One algorithm of a ranking.

name: the algorithm; ms: predicted (get_algorithms) or measured (find_algorithms)
milliseconds, None when not timed; workspace_bytes: what it needs; deterministic: whether its
bits are independent of scheduling; status: "predicted" or "ineligible" (over the workspace
limit, or not deterministic on a deterministic handle) for get_algorithms, "ok",
"eliminated" (stopped early by the race), "failed" or "not_timed" for find_algorithms."""

_default = None
_default_lock = threading.Lock()


def default_handle():
    """The handle calls use when given none: every core, policy "benchmark", an in-memory
    tuning cache. Made on first use."""
    global _default
    h = _default
    if h is None:
        with _default_lock:
            if _default is None:
                _default = _ext.Handle()
            h = _default
    return h


def set_default_handle(handle):
    """Makes ``handle`` the default (None: a fresh default is made on next use)."""
    global _default
    if handle is not None and not isinstance(handle, _ext.Handle):
        raise InvalidArgumentError("handle: expected an autodnn.Handle", "handle")
    _default = handle


def _bad(name, message):
    return InvalidArgumentError(f"{name}: {message}", name)


# The largest int a geometry value, shape or size may be (the extension's descriptors check
# the arithmetic from there).
_INT_MAX = 2**62


def _int(v, name):
    if isinstance(v, bool):
        raise _bad(name, f"expected an int, got {v!r}")
    try:
        i = operator.index(v)
    except TypeError:
        raise _bad(name, f"expected an int, got {_short(v)}") from None
    if abs(i) > _INT_MAX:
        raise _bad(name, f"{i} is out of range (at most 2**62 in magnitude)")
    return i


def _short(v):
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _real(v, name):
    """A real number (int, float, NumPy scalar) as a Python float."""
    if type(v) is float:
        return v
    if isinstance(v, numbers.Real):
        try:
            return float(v)
        except (OverflowError, TypeError, ValueError):
            pass
    raise _bad(name, f"expected a real number, got {_short(v)}")


def _flag(v, name):
    """A boolean: True, False, NumPy booleans, 0 or 1."""
    if isinstance(v, (bool, np.bool_, numbers.Integral)):
        if v in (0, 1):
            return bool(v)
    raise _bad(name, f"expected a bool, got {_short(v)}")


def _text(v, name, optional=True):
    """A str (or None when optional) the extension can read (UTF-8 encodable)."""
    if v is None and optional:
        return None
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise _bad(name, f"is not valid text: {_short(v)}") from None
        return v
    raise _bad(name, f"expected a str{' or None' if optional else ''}, got {_short(v)}")


def _shape(v, name, ndim=4):
    """A shape of `ndim` positive ints (a tuple or list of ints)."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or not hasattr(v, "__iter__"):
        raise _bad(name, f"expected {ndim} positive ints, got {_short(v)}")
    try:
        items = list(v)
    except Exception:  # noqa: BLE001 - any failure to iterate is a bad shape
        raise _bad(name, f"expected {ndim} positive ints, got {_short(v)}") from None
    shape = tuple(_int(i, name) for i in items)
    if len(shape) != ndim or min(shape) < 1:
        raise _bad(name, f"expected {ndim} positive ints, got {_short(v)}")
    return shape


def _pair(v, name, least):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise _bad(name, f"expected an int or a pair, got {v!r}")
        p = (_int(v[0], name), _int(v[1], name))
    else:
        i = _int(v, name)
        p = (i, i)
    if p[0] < least or p[1] < least:
        raise _bad(name, f"must be at least {least}, got {v!r}")
    return p


def _nhwc(layout):
    if isinstance(layout, str):
        if layout == "nchw":
            return False
        if layout == "nhwc":
            return True
    raise _bad("layout", f'expected "nchw" or "nhwc", got {_short(layout)}')


def _kernel(w, name="w"):
    """(R, S) of a filter given as an array, prepared weights or a shape."""
    try:
        if hasattr(w, "shape"):
            shape = tuple(w.shape)
        elif isinstance(w, (tuple, list)) and all(isinstance(i, numbers.Integral) for i in w):
            shape = tuple(w)
        else:
            shape = np.shape(w)  # an array-like (nested lists)
    except Exception:  # noqa: BLE001 - whatever it is, it is not a filter
        raise _bad(name, f"expected a 4-D filter (K, C/groups, R, S), got {_short(w)}") from None
    if len(shape) != 4:
        raise _bad(name, f"expected a 4-D filter (K, C/groups, R, S), got shape {_short(shape)}")
    return _int(shape[2], name), _int(shape[3], name)


_PLAIN = ((1, 1), (0, 0, 0, 0), (1, 1), 1)


def _geometry(w, stride, padding, dilation, groups, w_name="w"):
    """((sh, sw), (top, bottom, left, right), (dh, dw), groups)."""
    if (type(stride) is int and type(padding) is int and type(dilation) is int
            and type(groups) is int and stride == 1 and padding == 0 and dilation == 1
            and groups == 1):
        return _PLAIN
    s = _pair(stride, "stride", 1)
    d = _pair(dilation, "dilation", 1)
    g = _int(groups, "groups")
    if g < 1:
        raise _bad("groups", f"must be at least 1, got {groups!r}")
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0, 0, 0, 0)
        elif padding == "same":
            if s != (1, 1):
                raise _bad("padding", '"same" needs stride 1 (as in PyTorch)')
            r, sk = _kernel(w, w_name)
            th, tw = d[0] * (r - 1), d[1] * (sk - 1)
            # As PyTorch: an odd total puts the extra row and column at the bottom and right.
            pad = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
        else:
            raise _bad("padding", f'expected an int, a pair, four sides, "same" or "valid", got {padding!r}')
    elif isinstance(padding, (tuple, list)):
        if len(padding) == 2:
            ph, pw = _int(padding[0], "padding"), _int(padding[1], "padding")
            pad = (ph, ph, pw, pw)
        elif len(padding) == 4:
            pad = tuple(_int(p, "padding") for p in padding)
        else:
            raise _bad("padding", f"expected 1, 2 or 4 values, got {padding!r}")
    else:
        p = _int(padding, "padding")
        pad = (p, p, p, p)
    if min(pad) < 0:
        raise _bad("padding", f"must be at least 0, got {padding!r}")
    return (s, pad, d, g)


def _present(v, name):
    """A flag of get_algorithms: a bool, None (absent) or an array (present)."""
    if v is None:
        return False
    if hasattr(v, "shape"):
        return True
    return _flag(v, name)


def _handle(handle):
    if handle is None:
        return default_handle()
    if not isinstance(handle, _ext.Handle):
        raise _bad("handle", f"expected an autodnn.Handle or None, got {_short(handle)}")
    return handle


def _algo(algo):
    return _text(algo, "algo")


def _act(activation):
    return _text(activation, "activation")


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo=None,
           activation=None, residual=None, alpha=1.0, beta=0.0, out=None, handle=None,
           layout="nchw"):
    """y = activation(alpha * conv2d(x, w) + bias + beta * z), as
    ``torch.nn.functional.conv2d`` with cuDNN's fused epilogue.

    x: (N, C, H, W) (``layout="nchw"``, C-contiguous or channels-last strides) or (N, H, W, C)
    (``layout="nhwc"``). w: (K, C/groups, R, S), or PreparedWeights. bias: (K,). stride,
    dilation: an int or a pair. padding: an int, a pair (h, w), four sides (top, bottom, left,
    right), "same" or "valid". algo: an algorithm's name, or None for the handle's selection
    (policy, tuning cache, fallback chain). activation: None, "relu", "relu6", "silu",
    "sigmoid", "tanh", "gelu", "clip:LO:HI" or "leaky_relu:SLOPE". residual: z, shaped like
    the output; without it, z is out's prior contents (a nonzero beta then needs out=).
    Returns the output: (N, K, OH, OW) (channels-last when x is) or (N, OH, OW, K) for nhwc;
    ``out`` itself when given.
    """
    # The common arguments (a Handle, no names, float blends, "nchw") checked inline: each
    # helper call costs about 0.1-0.3 µs of the call's overhead.
    h = handle if type(handle) is _ext.Handle else _handle(handle)
    if algo is not None:
        algo = _algo(algo)
    if activation is not None:
        activation = _act(activation)
    if type(alpha) is not float:
        alpha = _real(alpha, "alpha")
    if type(beta) is not float:
        beta = _real(beta, "beta")
    nhwc = False if type(layout) is str and layout == "nchw" else _nhwc(layout)
    return _ext.conv2d(h, x, w, bias, _geometry(w, stride, padding, dilation, groups), algo,
                       activation, residual, alpha, beta, out, nhwc)


def get_algorithms(x, w, stride=1, padding=0, dilation=1, groups=1, *, bias=False,
                   residual=False, activation=None, op="forward", handle=None, layout="nchw"):
    """The heuristic ranking (cuDNN's Get) of the problem, fastest predicted first, as
    AlgoRecords; nothing runs. x and w are arrays or shapes. op: "forward", "backward_data",
    "backward_weight" or "backward_bias" (the gradients of the same convolution)."""
    recs = _ext.get_algorithms(_handle(handle), x, w, _geometry(w, stride, padding, dilation, groups),
                               _present(bias, "bias"), _present(residual, "residual"),
                               _act(activation), _nhwc(layout), _text(op, "op", optional=False))
    return [AlgoRecord(*r) for r in recs]


def find_algorithms(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                    activation=None, residual=None, alpha=1.0, beta=0.0, handle=None,
                    layout="nchw"):
    """Measured selection (cuDNN's Find) of the forward problem on these arrays: the eligible
    algorithms timed (raced, or every one to the end under policy "exhaustive"), the ranking
    stored in the handle's tuning cache; AlgoRecords, fastest first."""
    recs = _ext.find_algorithms(_handle(handle), x, w, bias,
                                _geometry(w, stride, padding, dilation, groups), _act(activation),
                                residual, _real(alpha, "alpha"), _real(beta, "beta"),
                                _nhwc(layout))
    return [AlgoRecord(*r) for r in recs]


def prepare_weights(w, x, stride=1, padding=0, dilation=1, groups=1, *, algo=None,
                    handle=None, layout="nchw"):
    """Transforms the filter once for ``algo`` (None: the handle's choice for the problem)
    on the problem of input ``x`` (an array or a shape; the batch size is part of the
    problem). Pass the result to conv2d as ``w``."""
    return _ext.prepare_weights(_handle(handle), w, x,
                                _geometry(w, stride, padding, dilation, groups), _algo(algo),
                                _nhwc(layout))


def conv2d_backward_data(dy, w, x_shape, stride=1, padding=0, dilation=1, groups=1, *,
                         algo=None, alpha=1.0, beta=0.0, out=None, handle=None, layout="nchw"):
    """dx = alpha * conv2d_backward_data(dy, w) + beta * out: the gradient of conv2d's input
    of shape ``x_shape`` (as ``torch.nn.grad.conv2d_input``)."""
    return _ext.conv2d_backward_data(_handle(handle), dy, w, _shape(x_shape, "x_shape"),
                                     _geometry(w, stride, padding, dilation, groups), _algo(algo),
                                     _real(alpha, "alpha"), _real(beta, "beta"), out,
                                     _nhwc(layout))


def conv2d_backward_weight(x, dy, w_shape, stride=1, padding=0, dilation=1, groups=1, *,
                           algo=None, alpha=1.0, beta=0.0, out=None, handle=None,
                           layout="nchw"):
    """dw = alpha * conv2d_backward_weight(x, dy) + beta * out: the gradient of the filter of
    shape ``w_shape`` = (K, C/groups, R, S) (as ``torch.nn.grad.conv2d_weight``)."""
    ws = _shape(w_shape, "w_shape")
    return _ext.conv2d_backward_weight(_handle(handle), x, dy, ws,
                                       _geometry(ws, stride, padding, dilation, groups, "w_shape"),
                                       _algo(algo), _real(alpha, "alpha"), _real(beta, "beta"),
                                       out, _nhwc(layout))


def conv2d_backward_bias(dy, *, algo=None, alpha=1.0, beta=0.0, out=None, handle=None,
                         layout="nchw"):
    """db[k] = alpha * sum of dy[:, k] + beta * out[k]: the gradient of a per-channel bias."""
    return _ext.conv2d_backward_bias(_handle(handle), dy, _algo(algo), _real(alpha, "alpha"),
                                     _real(beta, "beta"), out, _nhwc(layout))


def _pool_geometry(kernel_size, stride, padding, ceil_mode):
    """((kh, kw), (sh, sw), (top, bottom, left, right), ceil_mode) as torch's max_pool2d
    takes them (stride None: the kernel's)."""
    k = _pair(kernel_size, "kernel_size", 1)
    s = k if stride is None else _pair(stride, "stride", 1)
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        pad = tuple(_int(p, "padding") for p in padding)
        if min(pad) < 0:
            raise _bad("padding", f"must be at least 0, got {padding!r}")
    else:
        ph, pw = _pair(padding, "padding", 0)
        pad = (ph, ph, pw, pw)
    return (k, s, pad, _flag(ceil_mode, "ceil_mode"))


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, *,
               return_indices=False, out=None, handle=None, layout="nchw"):
    """y = max_pool2d(x), as ``torch.nn.functional.max_pool2d`` (no dilation): each window's
    first maximum in row-major order, NaN winning. padding: an int, a pair (h, w) or four
    sides (top, bottom, left, right). With ``return_indices``, (y, indices): each maximum's
    offset in its input plane (row * W + column, uint32, y's shape, laid out in y's order:
    channels-last memory for a channels-last or NHWC y, as PyTorch's), for
    :func:`max_pool2d_backward`."""
    return _ext.max_pool2d(_handle(handle), x,
                           _pool_geometry(kernel_size, stride, padding, ceil_mode), out,
                           _flag(return_indices, "return_indices"), _nhwc(layout))


def max_pool2d_backward(dy, indices, x_shape, kernel_size, stride=None, padding=0,
                        ceil_mode=False, *, out=None, handle=None, layout="nchw"):
    """dx: the gradient of max_pool2d's input of shape ``x_shape``, each dy added at the
    offset ``indices`` holds for it (max_pool2d's, with ``return_indices=True``: dy's shape,
    any strides; indices not laid out in dy's order are copied into it first)."""
    return _ext.max_pool2d_backward(_handle(handle), dy, indices, _shape(x_shape, "x_shape"),
                                    _pool_geometry(kernel_size, stride, padding, ceil_mode),
                                    out, _nhwc(layout))


def gemm(a, b, c=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, *, handle=None):
    """C = alpha * op(a) @ op(b) + beta * c, op transposing when asked (cuBLAS's Sgemm).
    a, b: 2-D arrays (any positive strides read in place). c: None (a new array) or a float32
    (M, N) array, updated in place. Returns c."""
    return _ext.gemm(_handle(handle), a, b, c, _real(alpha, "alpha"), _real(beta, "beta"),
                     _flag(trans_a, "trans_a"), _flag(trans_b, "trans_b"))


def gemm_strided_batched(a, b, c=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, *,
                         handle=None):
    """C[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i] (cuBLAS's SgemmStridedBatched).
    a, b: 3-D (batch, rows, columns), or 2-D to share one matrix across the batch. c: None or
    a float32 (batch, M, N) array, updated in place. Returns c."""
    return _ext.gemm_strided_batched(_handle(handle), a, b, c, _real(alpha, "alpha"),
                                     _real(beta, "beta"), _flag(trans_a, "trans_a"),
                                     _flag(trans_b, "trans_b"))
