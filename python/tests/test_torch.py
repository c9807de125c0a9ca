"""autodnn.torch: the Conv2d module, convert(), and real torchvision networks (random weights,
fixed seed, nothing downloaded) at small image sizes."""

import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import autodnn
import autodnn.torch as at


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


MODELS = {
    "resnet50": dict(),
    "mobilenet_v2": dict(),
    # groups (32 per convolution) and dilation (layer4 dilated instead of strided)
    "resnext50_32x4d": dict(replace_stride_with_dilation=[False, False, True]),
}


def _model(name, seed=0, random_bn=True):
    torch.manual_seed(seed)
    m = getattr(torchvision.models, name)(weights=None, num_classes=10, **MODELS[name])
    if not random_bn:
        return m
    # Random BatchNorm statistics and affine parameters, so that folding them changes weights.
    g = torch.Generator().manual_seed(seed + 1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(torch.rand(n, generator=g) * 0.4 - 0.2)
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(n, generator=g) * 0.4 - 0.2)
    return m


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_against_pytorch(handle, name):
    m = _model(name).eval()
    plain = at.convert(copy.deepcopy(m), handle=handle)
    fused = at.convert(copy.deepcopy(m), inference=True, handle=handle)
    assert not any(type(c) is nn.Conv2d for c in plain.modules())
    assert not any(type(c) is nn.Conv2d for c in fused.modules())
    assert not any(isinstance(c, nn.BatchNorm2d) for c in fused.modules())  # all folded
    fused_convs = [c for c in fused.modules() if isinstance(c, at.FusedConv2d)]
    assert sum(c.activation is not None for c in fused_convs) > len(fused_convs) // 2
    assert plain.state_dict().keys() == m.state_dict().keys()
    for batch in (1, 2):
        x = torch.randn(batch, 3, 48, 48, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            ref = m(x)
            y1 = plain(x)
            y2 = fused(x)
            y3 = fused(x.contiguous(memory_format=torch.channels_last))
        assert _rel(y1, ref) <= 1e-4, (name, batch)
        assert _rel(y2, ref) <= 1e-3, (name, batch)
        assert _rel(y3, ref) <= 1e-3, (name, batch)


def _train(net, x, labels, steps):
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    losses, grads = [], None
    for step in range(steps):
        torch.manual_seed(step)  # the same dropout masks in both networks
        opt.zero_grad()
        loss = F.cross_entropy(net(x), labels)
        loss.backward()
        if step == 0:
            grads = {n: p.grad.clone() for n, p in net.named_parameters()}
        losses.append(loss.item())
        opt.step()
    return losses, grads


def _kinks(net, x):
    """Which side of each kink every ReLU / ReLU6 input lies on, for a forward pass on x."""
    sides = []

    def hook(mod, inp, out):
        sides.append((out > 0) if isinstance(mod, nn.ReLU) else torch.stack([out > 0, out < 6]))

    hs = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, (nn.ReLU, nn.ReLU6))]
    with torch.no_grad():
        torch.manual_seed(0)
        net(x)
    for h in hs:
        h.remove()
    return sides


@pytest.mark.parametrize("name", list(MODELS))
def test_training_against_pytorch(handle, name):
    """Batch 4, SGD, train mode, with BatchNorm's statistics frozen: at CI image sizes the
    batch statistics of 4 images (1x1 or 2x2 feature maps in the last stage) make the
    gradients so ill-conditioned that PyTorch's own float32 gradients differ from float64
    ones by over 10%; with them frozen, every gradient is a well-posed comparison.

    A gradient is a piecewise function of the data: where one activation out of the
    network's hundreds of thousands lies within rounding (about 1e-6 relative) of a ReLU's
    kink, the two libraries may take different sides and the gradients upstream of it
    legitimately differ by percents. The comparison is made on the first input (of a few
    seeded ones) on which both networks see every kink from the same side; the losses are
    compared whatever the kinks."""
    m = _model(name, random_bn=False).train()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.eval()
    a = at.convert(copy.deepcopy(m), handle=handle)
    for seed in range(3, 9):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 3, 32, 32, generator=g)
        labels = torch.randint(0, 10, (4,), generator=g)
        km, ka = _kinks(m, x), _kinks(a, x)
        if all(torch.equal(p, q) for p, q in zip(km, ka)):
            break
    else:
        pytest.fail("every input put an activation on different sides of a kink")
    lm, gm = _train(m, x, labels, 3)
    la, ga = _train(a, x, labels, 3)
    assert abs(la[0] - lm[0]) <= 1e-3 * abs(lm[0])
    assert ga.keys() == gm.keys()
    for n in gm:
        assert _rel(ga[n], gm[n]) <= 1e-3, n
    for s in range(3):
        assert abs(la[s] - lm[s]) <= 1e-3 * abs(lm[s]), (s, la, lm)


def test_training_with_batch_statistics_first_loss(handle):
    """Train-mode BatchNorm (batch statistics): the first step's loss agrees."""
    m = _model("resnet50").train()
    a = at.convert(copy.deepcopy(m), handle=handle)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    labels = torch.arange(4)
    la = F.cross_entropy(a(x), labels).item()
    lm = F.cross_entropy(m(x), labels).item()
    assert abs(la - lm) <= 1e-3 * abs(lm)


@pytest.mark.parametrize("cfg", [
    dict(in_channels=6, out_channels=8, kernel_size=3, padding=1),
    dict(in_channels=6, out_channels=8, kernel_size=3, stride=2, padding=1, bias=False),
    dict(in_channels=6, out_channels=6, kernel_size=3, padding="same", dilation=2, groups=3),
    dict(in_channels=4, out_channels=8, kernel_size=(3, 1), padding=(1, 0), groups=2),
    dict(in_channels=4, out_channels=4, kernel_size=5, padding="valid"),
])
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv2d_module_forward_backward(handle, cfg, channels_last):
    torch.manual_seed(0)
    ref = nn.Conv2d(**cfg)
    mod = at.Conv2d(**cfg, handle=handle)
    mod.load_state_dict(ref.state_dict())
    assert mod.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(2, cfg["in_channels"], 11, 10)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    xa, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yr = mod(xa), ref(xr)
    assert _rel(ya, yr) <= 1e-5
    if channels_last and cfg["out_channels"] > 1:
        assert ya.is_contiguous(memory_format=torch.channels_last)
    dy = torch.randn_like(yr)
    ya.backward(dy)
    yr.backward(dy)
    assert _rel(xa.grad, xr.grad) <= 1e-5
    assert _rel(mod.weight.grad, ref.weight.grad) <= 1e-5
    if ref.bias is not None:
        assert _rel(mod.bias.grad, ref.bias.grad) <= 1e-5
    # a loss whose gradient is a broadcast (stride-0) tensor
    mod.zero_grad()
    ref.zero_grad()
    mod(x).sum().backward()
    ref(x).sum().backward()
    assert _rel(mod.weight.grad, ref.weight.grad) <= 1e-5


def test_gradcheck_double_falls_back_and_float_gradcheck(handle):
    mod = at.Conv2d(3, 4, 3, padding=1, handle=handle).double()
    x = torch.randn(1, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    at._warned.clear()
    with pytest.warns(UserWarning, match="float64"):
        y = mod(x)
    assert torch.allclose(y, F.conv2d(x, mod.weight, mod.bias, padding=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        mod(x)


def test_fallbacks_warn_once_and_match(handle):
    at._warned.clear()
    mod = at.Conv2d(4, 4, 3, padding=1, padding_mode="reflect", handle=handle)
    ref = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(1, 4, 6, 6)
    with pytest.warns(UserWarning, match="padding_mode"):
        y = mod(x)
    assert torch.equal(y, ref(x))
    plain = at.Conv2d(4, 4, 3, padding=1, handle=handle)
    xs = torch.randn(1, 4, 6, 12)[..., ::2]  # neither contiguous nor channels_last
    with pytest.warns(UserWarning, match="neither"):
        plain(xs)


def test_conv2d_module_input_smaller_than_its_kernel(handle):
    # No output tensor can be made for it: autodnn's own error names the field.
    mod = at.Conv2d(2, 3, 5, handle=handle)
    with pytest.raises(autodnn.InvalidArgumentError, match="smaller than the dilated kernel"):
        mod(torch.randn(1, 2, 3, 3))


def test_convert_in_place_and_arguments(handle):
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    conv0 = m[0]
    w0 = conv0.weight
    assert at.convert(m, handle=handle) is m
    assert m[0] is conv0 and isinstance(conv0, at.Conv2d) and conv0.weight is w0
    with pytest.raises(ValueError, match="eval"):
        at.convert(m, inference=True)
    with pytest.raises(ValueError, match="handle"):
        at.convert(m, handle="mine")
    m.eval()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        ref = m(x)
        at.convert(m, inference=True, handle=handle)
        assert isinstance(m[0], at.FusedConv2d) and m[0].activation == "relu"
        assert isinstance(m[1], nn.Identity) and isinstance(m[2], nn.Identity)
        assert _rel(m(x), ref) <= 1e-5


_CACHED_RUN = """
import sys, torch, torchvision, autodnn, autodnn.torch as at
torch.manual_seed(0)
m = torchvision.models.mobilenet_v2(weights=None).eval()
h = autodnn.Handle(threads=2, cache=sys.argv[1])
with torch.no_grad():
    at.convert(m, inference=True, handle=h)(torch.randn(1, 3, 32, 32))
h.close()
"""


def test_second_process_on_the_cache_times_nothing(tmp_path):
    """Two processes, policy "benchmark": the first times each layer's candidates and saves
    the choices; the second finds every one in the cache (the dispatch log shows no timing)."""
    import os
    import subprocess
    import sys
    path = str(tmp_path / "tuning.json")
    env = dict(os.environ, AUTODNN_LOG="dispatch")
    runs = [subprocess.run([sys.executable, "-c", _CACHED_RUN, path], env=env,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    chose = [[ln for ln in r.stderr.splitlines() if " chose " in ln] for r in runs]
    assert chose[0] and len(chose[0]) == len(chose[1])
    assert any("source: benchmark" in ln for ln in chose[0])
    assert all("source: cache" in ln for ln in chose[1]), chose[1][:3]


def test_tuning_cache_shared_by_processes(tmp_path):
    """A second handle on the same cache file finds every layer's choice there."""
    path = tmp_path / "tuning.json"
    m = _model("mobilenet_v2").eval()
    x = torch.randn(1, 3, 32, 32)
    h1 = autodnn.Handle(threads=2, cache=path)
    with torch.no_grad():
        ref = at.convert(copy.deepcopy(m), inference=True, handle=h1)(x)
    n = h1.cache_entries
    assert n > 0
    h1.close()
    h2 = autodnn.Handle(threads=2, policy="cached_only", cache=path)
    assert h2.cache_entries == n
    with torch.no_grad():
        y = at.convert(copy.deepcopy(m), inference=True, handle=h2)(x)
    assert h2.cache_entries == n  # nothing new was measured
    assert _rel(y, ref) <= 1e-5


def test_double_backward_refused(handle):
    mod = at.Conv2d(3, 4, 3, padding=1, handle=handle)
    x = torch.randn(1, 3, 5, 5, requires_grad=True)
    (gx,) = torch.autograd.grad((mod(x) ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        gx.sum().backward()


def test_handle_on_pytorchs_openmp_team():
    """threading="openmp": the work runs on PyTorch's OpenMP team (loaded with torch), with
    the bits of a one-thread handle for exact algorithms on integer data, and the team's
    size by default; forward and backward through a converted model; bad values raise."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        h = autodnn.Handle(threading="openmp", policy="heuristic")
        assert h.threads == 2
        one = autodnn.Handle(threads=1, policy="heuristic")
        rng = np.random.default_rng(7)
        x = rng.integers(-3, 4, (2, 32, 28, 28)).astype(np.float32)
        w = rng.integers(-3, 4, (48, 32, 3, 3)).astype(np.float32)
        for algo in ("direct", "gemm", "implicit_gemm"):
            a = autodnn.conv2d(x, w, padding=1, algo=algo, handle=h)
            b = autodnn.conv2d(x, w, padding=1, algo=algo, handle=one)
            assert np.array_equal(a, b), algo
        # Against the same model on a handle of its own 2 threads (the same choices of
        # algorithm): a gradient is compared with PyTorch's in test_training_against_pytorch.
        m = _model("resnet50", random_bn=False).eval()
        a = at.convert(copy.deepcopy(m), handle=h)
        b = at.convert(copy.deepcopy(m), handle=autodnn.Handle(threads=2, policy="heuristic"))
        xt = torch.randn(2, 3, 48, 48)
        ya, yb, yt = a(xt), b(xt), m(xt)
        assert _rel(ya, yt) < 1e-4
        assert _rel(ya, yb) < 1e-6
        ya.sum().backward()
        yb.sum().backward()
        for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
            assert _rel(pa.grad, pb.grad) < 1e-5, n
    finally:
        torch.set_num_threads(old)
    with pytest.raises(ValueError, match="threading"):
        autodnn.Handle(threading="tbb")
    # Layers given no handle use autodnn.torch's, on the OpenMP team (PyTorch's wheels run
    # libgomp): its thread count is PyTorch's when it was made.
    d = at.default_handle()
    assert d is at.default_handle() and d is not autodnn.default_handle()
    conv = at.Conv2d(4, 4, 3, padding=1)
    assert conv._autodnn_handle() is d


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("cfg", [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=2),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),  # the last window dropped
])
def test_max_pool2d_module_forward_backward(handle, cfg, channels_last):
    mod = at.MaxPool2d(**cfg, handle=handle)
    ref = nn.MaxPool2d(**cfg)
    x = torch.randint(-4, 5, (2, 16, 11, 9)).float()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        assert torch.equal(mod(x), ref(x))
    xa, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yr = mod(xa), ref(xr)
    assert torch.equal(ya, yr)
    if channels_last:
        assert ya.is_contiguous(memory_format=torch.channels_last)
    dy = torch.randint(-4, 5, tuple(yr.shape)).float()
    ya.backward(dy)
    yr.backward(dy)
    assert torch.equal(xa.grad, xr.grad)


def test_max_pool2d_module_converted_and_fallbacks(handle):
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    at.convert(m, handle=handle)
    assert isinstance(m[2], at.MaxPool2d) and m[2].handle is handle
    m.eval()
    m2 = at.convert(copy.deepcopy(m), inference=True, handle=handle)
    assert isinstance(m2[2], at.MaxPool2d)
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        assert torch.equal(m2[2](x), F.max_pool2d(x, 3, 2, 1))
    dil = at.MaxPool2d(2, dilation=2, handle=handle)
    with pytest.warns(UserWarning, match="dilation"):
        assert torch.equal(dil(x), F.max_pool2d(x, 2, dilation=2))
    ri = at.MaxPool2d(2, return_indices=True, handle=handle)
    with pytest.warns(UserWarning, match="return_indices"):
        y, i = ri(x)
    assert torch.equal(i, F.max_pool2d(x, 2, return_indices=True)[1])


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_module_training(handle, momentum, channels_last):
    torch.manual_seed(3)
    mod = at.BatchNorm2d(24, momentum=momentum, handle=handle)
    ref = nn.BatchNorm2d(24, momentum=momentum).double()
    with torch.no_grad():
        mod.weight.uniform_(0.5, 2.0)
        mod.bias.uniform_(-1.0, 1.0)
    ref.load_state_dict({k: v.double() if v.is_floating_point() else v
                         for k, v in mod.state_dict().items()})
    for step in range(3):
        x = torch.randn(4, 24, 7, 5) * 3 + 1
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        xa, xr = x.clone().requires_grad_(), x.double().requires_grad_()
        ya, yr = mod(xa), ref(xr)
        if channels_last:
            assert ya.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(ya.double(), yr, rtol=1e-4, atol=1e-4), step
        dy = torch.randn(ya.shape)
        ya.backward(dy)
        yr.backward(dy.double())
        assert torch.allclose(xa.grad.double(), xr.grad, rtol=1e-3, atol=1e-4), step
        for p, q in ((mod.weight, ref.weight), (mod.bias, ref.bias)):
            assert torch.allclose(p.grad.double(), q.grad, rtol=1e-4, atol=1e-3), step
            p.grad = q.grad = None
        assert torch.allclose(mod.running_mean.double(), ref.running_mean, atol=1e-5)
        assert torch.allclose(mod.running_var.double(), ref.running_var, rtol=1e-5)
        assert int(mod.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    mod.eval()
    ref.eval()
    x = torch.randn(2, 24, 3, 3)
    with torch.no_grad():
        assert torch.allclose(mod(x).double(), ref(x.double()), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        mod.train()(torch.randn(1, 24, 1, 1))


def test_batch_norm_converted_in_training(handle):
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    at.convert(m, handle=handle)
    assert isinstance(m[1], at.BatchNorm2d) and m[1].handle is handle
    m[1].eps = 1e-6
    with pytest.warns(UserWarning, match="eps"):
        m(torch.randn(2, 3, 6, 6))


def test_output_blocks_are_reused_only_once_dropped(handle):
    at.empty_cache()
    mod = at.MaxPool2d(2, handle=handle)
    xa, xb = torch.randn(2, 16, 8, 8), torch.randn(2, 16, 8, 8)
    with torch.no_grad():
        ya = mod(xa)
        pa = ya.data_ptr()
        view = ya[1]  # a view keeps the block in use
        del ya
        yb = mod(xb)
        assert yb.data_ptr() != pa
        assert torch.equal(view, F.max_pool2d(xa, 2)[1])
        del view
        pb = yb.data_ptr()
        del yb
        yc = mod(xa)  # a block of that size is free again
        assert yc.data_ptr() in (pa, pb)
        assert torch.equal(yc, F.max_pool2d(xa, 2))
        yd = mod(xb.contiguous(memory_format=torch.channels_last))
        assert yd.data_ptr() in (pa, pb) and yd.data_ptr() != yc.data_ptr()
        assert yd.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(yd, F.max_pool2d(xb, 2))
    with pytest.raises(ValueError):
        at.set_cache_limit(-1)
    at.set_cache_limit(0)
    del yc, yd
    assert at._cache.bytes == 0 and not any(at._cache.free.values())
    at.set_cache_limit(2 << 30)
