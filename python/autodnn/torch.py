"""autodnn inside PyTorch.

- :class:`Conv2d`: a ``torch.nn.Conv2d`` (same constructor, parameters and state_dict) whose
  forward and backward run autodnn through a ``torch.autograd.Function``. CPU float32 inputs,
  contiguous or channels_last, with ``padding_mode="zeros"`` run on autodnn; anything else
  falls back to PyTorch's own operator with a warning (once per reason).
- :class:`MaxPool2d` and :class:`BatchNorm2d`: ``torch.nn.MaxPool2d`` (forward, and backward
  from the indices its forward records) and ``torch.nn.BatchNorm2d`` (training: the batch's
  statistics, the running ones updated in place as PyTorch does, the three gradients;
  evaluation runs PyTorch's own) on autodnn, with the same fallbacks.
- Outputs and gradients are written by autodnn in place, into blocks it keeps for reuse once
  PyTorch drops them (:func:`set_cache_limit`, :func:`empty_cache`; new blocks come from
  PyTorch's allocator).
- :func:`convert`: swaps every ``nn.Conv2d`` of a model for :class:`Conv2d` in place (and
  every ``nn.MaxPool2d`` and ``nn.BatchNorm2d`` for the classes above). With
  ``inference=True`` (a model in eval mode) it also folds each BatchNorm that follows a
  convolution into the convolution's weights and bias, fuses a following ReLU, ReLU6 or SiLU
  (and the residual add of torchvision's ``BasicBlock``, ``Bottleneck`` and
  ``InvertedResidual``) into autodnn's epilogue, and runs with prepared weights
  (:class:`FusedConv2d`).

What ``inference=True`` recognises: a convolution followed by BatchNorm2d and/or an
activation inside an ``nn.Sequential`` (torchvision's ``Conv2dNormActivation`` among them);
torchvision's ResNet stem (``conv1``, ``bn1``, ``relu``), ``BasicBlock``, ``Bottleneck``
(ResNet, ResNeXt, wide ResNet) and MobileNet v2's ``InvertedResidual``. Other graphs keep
their BatchNorms and activations as PyTorch modules (their convolutions still run on autodnn).
Folding replaces the BatchNorm and activation modules by ``nn.Identity``, so the state_dict of
a model converted for inference differs from the original's.

Each layer's algorithm comes from the handle's selection (its policy and tuning cache): with
``Handle(cache=path)`` a second process on the same cache times nothing. Layers given no
handle use :func:`default_handle`, whose parallel work runs on PyTorch's own OpenMP team
(``Handle(threading="openmp")``), so that autodnn's threads never compete with PyTorch's
for the cores; a handle of your own should be made the same way.

Limits: the backward pass is differentiable once (double backward raises); a model holding an
autodnn handle saves through its ``state_dict`` (the handle itself does not pickle).
"""

import math
import threading
import warnings
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import _autodnn as _ext
from . import _api

__all__ = ["BatchNorm2d", "Conv2d", "FusedConv2d", "MaxPool2d", "convert", "default_handle",
           "empty_cache", "set_cache_limit"]

_warned = set()
_default = None


def default_handle():
    """The handle of layers given none: ``autodnn.Handle(threading="openmp")``, on PyTorch's
    OpenMP team with ``torch.get_num_threads()`` threads when it is made (the first call);
    the package's :func:`autodnn.default_handle` where PyTorch runs no OpenMP runtime."""
    global _default
    if _default is None:
        try:
            _default = _ext.Handle(threading="openmp")
        except ValueError:
            _default = _api.default_handle()
    return _default


def _warn_once(reason):
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"autodnn.torch: {reason}: using PyTorch's own operator", stacklevel=3)


def _unsupported_input(x):
    """Why autodnn cannot take this input (None when it can)."""
    if x.device.type != "cpu":
        return "tensors not on the CPU"
    if x.dtype != torch.float32:
        return f"dtype {x.dtype} (autodnn runs float32)"
    if x.dim() != 4:
        return "an input that is not 4-D (N, C, H, W)"
    if not (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)):
        return "an input neither contiguous nor channels_last"
    return None


def _unsupported(conv, x):
    """Why autodnn cannot run this call (None when it can)."""
    w = conv.weight
    if w.device.type != "cpu" or w.dtype != torch.float32:
        return _unsupported_input(w) or f"dtype {w.dtype} (autodnn runs float32)"
    if conv.padding_mode != "zeros":
        return f"padding_mode={conv.padding_mode!r}"
    return _unsupported_input(x)


def _geometry(conv):
    g = conv.__dict__.get("_autodnn_geometry")
    if g is None or g[0] != (conv.stride, conv.padding, conv.dilation, conv.groups):
        key = (conv.stride, conv.padding, conv.dilation, conv.groups)
        g = (key, _api._geometry(conv.weight, conv.stride, conv.padding, conv.dilation,
                                 conv.groups))
        conv.__dict__["_autodnn_geometry"] = g
    return g[1]


def _np(t):
    return t.detach().numpy()


class _Cache:
    """The buffers of the outputs and gradients autodnn writes, kept for reuse once PyTorch
    drops them (as PyTorch's caching allocator does on GPUs; its CPU allocator returns large
    blocks to the system). Writing a fresh block faults its pages in, one by one: inside a
    ResNet-50 training step (batch 8, 1 thread) a 26 MB backward-data output took 16 ms
    against 6 for the same call on reused memory, and NumPy's own new arrays, advised onto
    huge pages, up to 100 ms. New blocks come from PyTorch's allocator.

    Each tensor handed out is made from a NumPy view of a cached block; when the tensor and
    all its views are gone, that view is finalized and the block goes back to the cache, up to
    `limit` bytes of free blocks (by element count: a training loop asks for the same sizes
    at every step)."""

    def __init__(self, limit):
        self.lock = threading.RLock()
        self.free = {}
        self.bytes = 0
        self.limit = limit

    def empty(self, shape, channels_last=False):
        n = math.prod(shape)
        with self.lock:
            blocks = self.free.get(n)
            block = blocks.pop() if blocks else None
            if block is not None:
                self.bytes -= block.nbytes
        if block is None:
            block = torch.empty(n, dtype=torch.float32).numpy()
        # Shaped in NumPy, so that the tensor is a base (autograd forbids modifying a custom
        # Function's output in place when it is a view), and the array torch holds is the
        # one finalized (NumPy's views keep the owning block, not the views between).
        if channels_last:
            b, c, h, w = shape
            arr = block.reshape(b, h, w, c).transpose(0, 3, 1, 2)
        else:
            arr = block.reshape(tuple(shape))
        weakref.finalize(arr, self._release, block).atexit = False
        return torch.from_numpy(arr)

    def _release(self, block):
        with self.lock:
            if self.bytes + block.nbytes <= self.limit:
                self.free.setdefault(block.size, []).append(block)
                self.bytes += block.nbytes

    def clear(self):
        with self.lock:
            self.free.clear()
            self.bytes = 0


_cache = _Cache(2 << 30)


def empty_cache():
    """Frees the blocks autodnn keeps for its outputs (see :func:`set_cache_limit`)."""
    _cache.clear()


def set_cache_limit(nbytes):
    """The most bytes of free output blocks autodnn keeps for reuse (default 2 GiB; 0 keeps
    none). Freed outputs beyond it go back to PyTorch's allocator."""
    n = _api._int(nbytes, "nbytes")
    if n < 0:
        raise _api._bad("nbytes", f"must be at least 0, got {nbytes!r}")
    with _cache.lock:
        _cache.limit = n
        if _cache.bytes > n:
            _cache.free.clear()
            _cache.bytes = 0


def _like(t):
    """An empty float32 tensor shaped and laid out as `t` (contiguous or channels_last)."""
    return _cache.empty(tuple(t.shape), not t.is_contiguous())


def _conv_out(x, w_shape, g):
    """An empty y laid out as x, or None where the geometry leaves no output (the call says so)."""
    (sh, sw), (top, bottom, left, right), (dh, dw), _ = g
    n, _, h, w = x.shape
    oh = (h + top + bottom - dh * (w_shape[2] - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (w_shape[3] - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        return None
    return _cache.empty((n, w_shape[0], oh, ow), not x.is_contiguous())


class _Conv2dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, geometry, handle):
        # No output tensor (None) only where the geometry leaves none: the call raises.
        out = _conv_out(x, weight.shape, geometry)
        _ext.conv2d(handle, _np(x), _np(weight), None if bias is None else _np(bias), geometry,
                    None, None, None, 1.0, 0.0, None if out is None else _np(out), False)
        ctx.save_for_backward(x, weight)
        ctx.geometry = geometry
        ctx.handle = handle
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        gyn = _np(gy)
        gx = gw = gb = None
        h, g = ctx.handle, ctx.geometry
        if ctx.needs_input_grad[0]:
            gx = _like(x)
            _ext.conv2d_backward_data(h, gyn, _np(weight), tuple(x.shape), g, None, 1.0, 0.0,
                                      _np(gx), False)
        if ctx.needs_input_grad[1]:
            gw = _cache.empty(tuple(weight.shape))
            _ext.conv2d_backward_weight(h, _np(x), gyn, tuple(weight.shape), g, None, 1.0, 0.0,
                                        _np(gw), False)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = torch.empty(gy.shape[1], dtype=gy.dtype)
            _ext.conv2d_backward_bias(h, gyn, None, 1.0, 0.0, _np(gb), False)
        return gx, gw, gb, None, None


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` computed by autodnn (forward and backward).

    Takes ``nn.Conv2d``'s arguments and an optional ``handle`` (an :class:`autodnn.Handle`;
    None: :func:`default_handle`). Parameters and state_dict are ``nn.Conv2d``'s.
    """

    def __init__(self, *args, handle=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.handle = handle

    def _autodnn_handle(self):
        h = self.__dict__.get("handle")
        return default_handle() if h is None else h

    def forward(self, x):
        reason = _unsupported(self, x)
        if reason is not None:
            _warn_once(reason)
            return super().forward(x)
        return _Conv2dFunction.apply(x, self.weight, self.bias, _geometry(self),
                                     self._autodnn_handle())


_ACTS = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu"}


def _two(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class _MaxPool2dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, geometry, handle, y):
        _, ind = _ext.max_pool2d(handle, _np(x), geometry, _np(y), True, False)
        ctx.indices = ind
        ctx.geometry = geometry
        ctx.handle = handle
        ctx.x_shape = tuple(x.shape)
        ctx.channels_last = not x.is_contiguous()
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        gx = _cache.empty(ctx.x_shape, ctx.channels_last)
        _ext.max_pool2d_backward(ctx.handle, _np(gy), ctx.indices, ctx.x_shape, ctx.geometry,
                                 _np(gx), False)
        return gx, None, None, None


class MaxPool2d(nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` computed by autodnn (forward, and backward from the indices the
    forward records when the input needs a gradient).

    Takes ``nn.MaxPool2d``'s arguments and an optional ``handle``. CPU float32 inputs,
    contiguous or channels_last, without dilation or ``return_indices`` run on autodnn;
    anything else falls back to PyTorch's own operator with a warning (once per reason).
    """

    def __init__(self, *args, handle=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.handle = handle

    def _geometry(self):
        return _api._pool_geometry(self.kernel_size, self.stride, self.padding,
                                   bool(self.ceil_mode))

    def _unsupported(self, x):
        if self.return_indices:
            return "return_indices=True"
        if _two(self.dilation) != (1, 1):
            return f"dilation={self.dilation!r}"
        k, _, (ph, _, pw, _), _ = self._geometry()
        if 2 * ph > k[0] or 2 * pw > k[1]:
            return "padding over half the kernel"  # PyTorch's own call reports it
        return _unsupported_input(x)

    def forward(self, x):
        reason = self._unsupported(x)
        if reason is not None:
            _warn_once(reason)
            return super().forward(x)
        h = self.handle if self.handle is not None else default_handle()
        g = self._geometry()
        (kh, kw), (sh, sw), (ph, _, pw, _), ceil = g
        n, c, hh, ww = x.shape
        oh, ow = (_pooled(hh, kh, sh, ph, ceil), _pooled(ww, kw, sw, pw, ceil))
        if oh < 1 or ow < 1:
            return super().forward(x)  # PyTorch's own error
        y = _cache.empty((n, c, oh, ow), not x.is_contiguous())
        if torch.is_grad_enabled() and x.requires_grad:
            return _MaxPool2dFunction.apply(x, g, h, y)
        _ext.max_pool2d(h, _np(x), g, _np(y), False, False)
        return y


def _pooled(size, k, s, p, ceil):
    """PyTorch's pooled size: the windows that start inside the input or its leading padding."""
    span = size + 2 * p - k
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


class _BatchNorm2dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, bn, factor, handle):
        y = _like(x)
        _, mean, inv_std = _ext.batch_norm_training(
            handle, _np(x), _np(weight), _np(bias), _np(bn.running_mean), _np(bn.running_var),
            factor, bn.eps, _np(y), False)
        ctx.save_for_backward(x, weight)
        ctx.stats = (mean, inv_std)
        ctx.eps = bn.eps
        ctx.handle = handle
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        gx = _like(x)
        _, dw, db = _ext.batch_norm_backward(ctx.handle, _np(x), _np(gy), _np(weight),
                                             *ctx.stats, ctx.eps, _np(gx), False)
        return gx, torch.from_numpy(dw), torch.from_numpy(db), None, None, None


class BatchNorm2d(nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` whose training forward and backward run on autodnn: the
    batch's statistics, the running statistics updated in place as PyTorch does (momentum,
    or the cumulative average when momentum is None; unbiased running variance), and the
    gradients of the input, weight and bias.

    Takes ``nn.BatchNorm2d``'s arguments and an optional ``handle``. Evaluation (running
    statistics), ``affine=False``, ``track_running_stats=False`` and inputs autodnn does not
    take (see :class:`Conv2d`) run PyTorch's own operator.
    """

    def __init__(self, *args, handle=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.handle = handle

    def forward(self, x):
        if not (self.training and self.affine and self.track_running_stats):
            return super().forward(x)
        reason = _unsupported_input(x)
        if reason is None and self.weight.dtype != torch.float32:
            reason = f"dtype {self.weight.dtype} (autodnn runs float32)"
        if reason is None and self.eps < 1e-5:
            reason = f"eps={self.eps} (autodnn's batch norm needs at least 1e-5)"
        if reason is not None:
            _warn_once(reason)
            return super().forward(x)
        self.num_batches_tracked.add_(1)
        if self.momentum is None:
            factor = 1.0 / float(self.num_batches_tracked)
        else:
            factor = float(self.momentum)
        h = self.handle if self.handle is not None else default_handle()
        return _BatchNorm2dFunction.apply(x, self.weight, self.bias, self, factor, h)


def _act_name(m):
    for cls, name in _ACTS.items():
        if type(m) is cls:
            return name
    if type(m) is nn.Hardtanh and m.min_val == 0.0 and m.max_val == 6.0:
        return "relu6"
    return None


_TORCH_ACTS = {"relu": F.relu, "relu6": F.relu6, "silu": F.silu}


class FusedConv2d(nn.Module):
    """An inference convolution: act(conv(x, w) + b [+ residual]), with a BatchNorm folded
    into w and b, on autodnn with weights prepared once per input shape and layout.

    ``forward(x, residual=None)``. Made by :func:`convert` with ``inference=True``.
    """

    def __init__(self, conv, bn=None, activation=None, handle=None):
        super().__init__()
        w = conv.weight.detach().to(torch.float64)
        b = (conv.bias.detach().to(torch.float64) if conv.bias is not None
             else torch.zeros(w.shape[0], dtype=torch.float64))
        if bn is not None:
            var = bn.running_var.detach().to(torch.float64)
            mean = bn.running_mean.detach().to(torch.float64)
            gamma = (bn.weight.detach().to(torch.float64) if bn.weight is not None
                     else torch.ones_like(var))
            beta = (bn.bias.detach().to(torch.float64) if bn.bias is not None
                    else torch.zeros_like(var))
            scale = gamma / torch.sqrt(var + bn.eps)
            w = w * scale.reshape(-1, 1, 1, 1)
            b = (b - mean) * scale + beta
        self.register_buffer("weight", w.to(conv.weight.dtype).contiguous())
        self.register_buffer("bias", b.to(conv.weight.dtype).contiguous())
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.groups, self.padding_mode = conv.groups, conv.padding_mode
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size = conv.kernel_size
        self.activation = activation
        h = conv.__dict__.get("handle")
        self.handle = handle if handle is not None else h
        self._prepared = {}

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}, "
                f"activation={self.activation}")

    def _torch(self, x, residual):
        if self.padding_mode != "zeros":
            pad = self.padding if isinstance(self.padding, tuple) else None
            if pad is None:
                raise ValueError(f"padding={self.padding!r} with padding_mode={self.padding_mode!r}")
            x = F.pad(x, (pad[1], pad[1], pad[0], pad[0]), mode=self.padding_mode)
            y = F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        else:
            y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                         self.groups)
        if residual is not None:
            y = y + residual
        if self.activation is not None:
            y = _TORCH_ACTS[self.activation](y)
        return y

    def forward(self, x, residual=None):
        reason = _unsupported(self, x)
        if reason is None and torch.is_grad_enabled() and (x.requires_grad or (
                residual is not None and residual.requires_grad)):
            reason = "gradients through an inference convolution"
        if reason is not None:
            _warn_once(reason)
            return self._torch(x, residual)
        h = self.handle if self.handle is not None else default_handle()
        g = _geometry(self)
        key = (tuple(x.shape), x.is_contiguous(), id(h))
        pw = self._prepared.get(key)
        xn = _np(x)
        if pw is None:
            pw = _ext.prepare_weights(h, self.weight.numpy(), xn, g, None, False)
            self._prepared[key] = pw
        z = None if residual is None else _np(residual)
        out = _conv_out(x, self.weight.shape, g)  # None: the call raises
        _ext.conv2d(h, xn, pw, self.bias.numpy(), g, None, self.activation, z, 1.0,
                    1.0 if z is not None else 0.0, None if out is None else _np(out), False)
        return out


def _swap(conv, handle):
    """Turns an nn.Conv2d into an autodnn Conv2d in place (same object, same parameters)."""
    if type(conv) is nn.Conv2d:
        conv.__class__ = Conv2d
        conv.handle = handle
    elif isinstance(conv, Conv2d) and handle is not None:
        conv.handle = handle
    return conv


def _is_bn(m):
    """A plain BatchNorm2d (PyTorch's, or autodnn's after a training conversion)."""
    return type(m) is nn.BatchNorm2d or type(m) is BatchNorm2d


def _fuse_sequential(seq, handle):
    """Folds conv → [BatchNorm2d] → [ReLU/ReLU6/SiLU] runs of an nn.Sequential in place."""
    names = list(seq._modules.keys())
    i = 0
    while i < len(names):
        m = seq._modules[names[i]]
        if isinstance(m, nn.Conv2d):
            j = i + 1
            bn = None
            if (j < len(names) and _is_bn(seq._modules[names[j]])
                    and seq._modules[names[j]].track_running_stats
                    and seq._modules[names[j]].num_features == m.out_channels):
                bn = seq._modules[names[j]]
                j += 1
            act = _act_name(seq._modules[names[j]]) if j < len(names) else None
            if act is not None:
                j += 1
            seq._modules[names[i]] = FusedConv2d(m, bn, act, handle)
            for k in range(i + 1, j):
                seq._modules[names[k]] = nn.Identity()
            i = j
        else:
            i += 1


def _leaves(seq):
    """The non-identity modules of a (nested) Sequential, in order."""
    out = []
    for m in seq.children():
        if isinstance(m, nn.Sequential):
            out.extend(_leaves(m))
        elif not isinstance(m, nn.Identity):
            out.append(m)
    return out


class _FusedResNetBlock(nn.Module):
    """torchvision's BasicBlock or Bottleneck with every convolution fused: the last one adds
    the shortcut and applies the ReLU in its epilogue."""

    def __init__(self, block, handle):
        super().__init__()
        bottleneck = hasattr(block, "conv3")
        convs = [FusedConv2d(block.conv1, block.bn1, "relu", handle)]
        if bottleneck:
            convs.append(FusedConv2d(block.conv2, block.bn2, "relu", handle))
            convs.append(FusedConv2d(block.conv3, block.bn3, "relu", handle))
        else:
            convs.append(FusedConv2d(block.conv2, block.bn2, "relu", handle))
        self.convs = nn.ModuleList(convs)
        self.downsample = None
        if block.downsample is not None:
            ds = block.downsample
            if (isinstance(ds, nn.Sequential) and len(ds) == 2 and isinstance(ds[0], nn.Conv2d)
                    and _is_bn(ds[1])):
                self.downsample = FusedConv2d(ds[0], ds[1], None, handle)
            else:
                self.downsample = ds

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = x
        for c in self.convs[:-1]:
            out = c(out)
        return self.convs[-1](out, residual=identity)


class _FusedInvertedResidual(nn.Module):
    """MobileNet v2's InvertedResidual with its convolutions fused; with a residual
    connection the last one adds the input in its epilogue."""

    def __init__(self, block, handle):
        super().__init__()
        _fuse_all(block.conv, handle)
        self.layers = nn.ModuleList(_leaves(block.conv))
        self.use_res_connect = block.use_res_connect

    def forward(self, x):
        out = x
        for m in self.layers[:-1]:
            out = m(out)
        last = self.layers[-1]
        if self.use_res_connect:
            if isinstance(last, FusedConv2d):
                return last(out, residual=x)
            return x + last(out)
        return last(out)


def _torchvision_class(m, module, name):
    cls = type(m)
    return cls.__name__ == name and cls.__module__ == module


def _fusable_block(m):
    if _torchvision_class(m, "torchvision.models.resnet", "Bottleneck") or _torchvision_class(
            m, "torchvision.models.resnet", "BasicBlock"):
        return "resnet"
    if _torchvision_class(m, "torchvision.models.mobilenetv2", "InvertedResidual"):
        return "inverted"
    return None


def _fuse_all(module, handle):
    """Fuses the recognised patterns below `module`, in place."""
    if _torchvision_class(module, "torchvision.models.resnet", "ResNet"):
        module.conv1 = FusedConv2d(module.conv1, module.bn1, "relu", handle)
        module.bn1 = nn.Identity()
        module.relu = nn.Identity()
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        kind = _fusable_block(child)
        if kind == "resnet":
            module._modules[name] = _FusedResNetBlock(child, handle)
        elif kind == "inverted":
            module._modules[name] = _FusedInvertedResidual(child, handle)
        else:
            _fuse_all(child, handle)
    if isinstance(module, nn.Sequential):
        _fuse_sequential(module, handle)


def _swap_all(module, handle):
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        if isinstance(child, nn.Conv2d) and not isinstance(child, FusedConv2d):
            _swap(child, handle)
        elif type(child) in (nn.MaxPool2d, nn.BatchNorm2d) or isinstance(
                child, (MaxPool2d, BatchNorm2d)):
            if type(child) is nn.MaxPool2d:
                child.__class__ = MaxPool2d
            elif type(child) is nn.BatchNorm2d:
                child.__class__ = BatchNorm2d
            if handle is not None or not hasattr(child, "handle"):
                child.handle = handle
        else:
            _swap_all(child, handle)


def convert(model, inference=False, handle=None):
    """Runs every ``nn.Conv2d`` of ``model`` on autodnn, in place; returns ``model``.

    ``inference=False``: each ``nn.Conv2d`` becomes an :class:`autodnn.torch.Conv2d`, each
    ``nn.MaxPool2d`` a :class:`MaxPool2d` and each ``nn.BatchNorm2d`` a :class:`BatchNorm2d`
    (the same module objects and parameters: training, state_dict and optimisers are
    unaffected).
    ``inference=True``: the model must be in eval mode; BatchNorms following a convolution
    are folded into it, following activations and torchvision's residual adds are fused into
    autodnn's epilogue, and weights are prepared (see the module's documentation for the
    patterns recognised). ``handle``: the :class:`autodnn.Handle` the layers use (None:
    :func:`default_handle`, on PyTorch's OpenMP team).
    """
    if handle is not None and not isinstance(handle, _ext.Handle):
        raise _api._bad("handle", "expected an autodnn.Handle")
    if inference and model.training:
        raise _api._bad("model", "inference=True needs a model in eval mode (call model.eval())")
    if isinstance(model, nn.Conv2d) and not inference:
        return _swap(model, handle)
    if inference:
        _fuse_all(model, handle)
    _swap_all(model, handle)
    return model
