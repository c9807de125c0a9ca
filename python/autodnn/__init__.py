"""autodnn: convolution and matrix multiplication with measured algorithm selection, and
max pooling (``max_pool2d``, ``max_pool2d_backward``).

The functional API works on NumPy arrays and follows ``torch.nn.functional.conv2d``:

    >>> import numpy as np, autodnn
    >>> x = np.ones((1, 8, 14, 14), np.float32)
    >>> w = np.ones((16, 8, 3, 3), np.float32)
    >>> autodnn.conv2d(x, w, padding=1).shape
    (1, 16, 14, 14)

Arrays are read in place when they are float32 and their strides fit a layout autodnn takes
(activations: any positive element strides, so C-contiguous, channels-last and padded-row
views; filters: packed KCRS or KRSC); anything else (other dtypes, negative or broadcast
strides, misaligned data) is copied to a C-contiguous float32 array first. Outputs are new
arrays, or written into ``out=`` (which must be float32 of the output's shape; when it is not
packed the result is computed into a packed buffer and copied into it). The GIL is released
while autodnn computes.

Errors are :class:`Error` subclasses: :class:`InvalidArgumentError` (a ``ValueError`` whose
message and ``argument`` name the argument at fault), :class:`OutOfMemoryError` (a
``MemoryError``), :class:`NotSupportedError`, :class:`ExecutionError`, :class:`CacheError`.
An argument of the wrong type or range (a string for ``alpha``, an array for a flag, an int
beyond 2**62, text that is not valid Unicode) is an :class:`InvalidArgumentError` too, never a
``TypeError`` or ``OverflowError``.
"""

import atexit as _atexit

from . import _autodnn as _ext
from ._api import (
    AlgoRecord,
    conv2d,
    conv2d_backward_bias,
    conv2d_backward_data,
    conv2d_backward_weight,
    default_handle,
    find_algorithms,
    gemm,
    gemm_strided_batched,
    get_algorithms,
    max_pool2d,
    max_pool2d_backward,
    prepare_weights,
    set_default_handle,
)
from ._autodnn import Handle, PreparedWeights
from ._errors import (
    CacheError,
    Error,
    ExecutionError,
    InvalidArgumentError,
    NotSupportedError,
    OutOfMemoryError,
)

__version__ = _ext.VERSION

__all__ = [
    "AlgoRecord",
    "CacheError",
    "Error",
    "ExecutionError",
    "Handle",
    "InvalidArgumentError",
    "NotSupportedError",
    "OutOfMemoryError",
    "PreparedWeights",
    "conv2d",
    "conv2d_backward_bias",
    "conv2d_backward_data",
    "conv2d_backward_weight",
    "default_handle",
    "find_algorithms",
    "gemm",
    "gemm_strided_batched",
    "get_algorithms",
    "max_pool2d",
    "max_pool2d_backward",
    "info",
    "prepare_weights",
    "set_default_handle",
]


def info():
    """What ``autodnn info`` shows, as a dict: version, threads, cpu_features, isa, cpu_model,
    cache_path, cost_model_path, calibrated, algorithms."""
    return _ext.info()


@_atexit.register
def _save_caches():
    try:
        _ext.save_caches()
    except Error:
        pass
