"""The functional API against an f64 NumPy reference and torch.nn.functional.conv2d."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import autodnn
from conftest import ref_conv, rel_err

EXACT = ["direct", "gemm", "implicit_gemm"]


def _pads(padding, r, s, dilation):
    """(top, bottom, left, right) of a padding form, as autodnn documents it."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        th, tw = dilation[0] * (r - 1), dilation[1] * (s - 1)
        return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[0], padding[1], padding[1])
    return tuple(padding)


def _problems(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        groups = int(rng.choice([1, 1, 2, 4]))
        cg = int(rng.integers(1, 4))
        kg = int(rng.integers(1, 4))
        r, s = int(rng.choice([1, 2, 3, 5])), int(rng.choice([1, 2, 3, 4]))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        padding = [0, 1, (1, 2), (0, 1, 2, 1), "valid", "same"][int(rng.integers(0, 6))]
        if padding == "same":
            stride = (1, 1)
        h, w = int(rng.integers(7, 13)), int(rng.integers(7, 13))
        n = int(rng.integers(1, 3))
        pads = _pads(padding, r, s, dilation)
        if (h + pads[0] + pads[1] < dilation[0] * (r - 1) + 1
                or w + pads[2] + pads[3] < dilation[1] * (s - 1) + 1):
            continue
        out.append(dict(n=n, c=cg * groups, k=kg * groups, h=h, w=w, r=r, s=s, stride=stride,
                        padding=padding, dilation=dilation, groups=groups))
    return out


def _make(p, rng, integer=False):
    if integer:
        x = rng.integers(-3, 4, (p["n"], p["c"], p["h"], p["w"])).astype(np.float32)
        w = rng.integers(-3, 4, (p["k"], p["c"] // p["groups"], p["r"], p["s"])).astype(np.float32)
        b = rng.integers(-3, 4, p["k"]).astype(np.float32)
    else:
        x = rng.standard_normal((p["n"], p["c"], p["h"], p["w"])).astype(np.float32)
        w = rng.standard_normal((p["k"], p["c"] // p["groups"], p["r"], p["s"])).astype(np.float32)
        b = rng.standard_normal(p["k"]).astype(np.float32)
    return x, w, b


def _geom(p):
    return dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"], groups=p["groups"])


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "nhwc"])
@pytest.mark.parametrize("seed", range(4))
def test_random_problems_against_f64_and_torch(handle, layout, seed):
    rng = np.random.default_rng(100 + seed)
    for p in _problems(seed, 8):
        x, w, b = _make(p, rng)
        pads = _pads(p["padding"], p["r"], p["s"], p["dilation"])
        ref = ref_conv(x, w, b, p["stride"], pads, p["dilation"], p["groups"])
        if layout == "nchw":
            y = autodnn.conv2d(x, w, b, **_geom(p), handle=handle)
        elif layout == "channels_last":
            xc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
            assert autodnn._autodnn.reads_in_place(xc)
            y = autodnn.conv2d(xc, w, b, **_geom(p), handle=handle)
            if p["c"] > 1 and p["k"] > 1:
                assert y.strides[1] == 4  # channels-last like x
        else:
            xn = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            y = autodnn.conv2d(xn, w, b, **_geom(p), handle=handle, layout="nhwc")
            y = y.transpose(0, 3, 1, 2)
        assert y.shape == ref.shape, p
        assert rel_err(y, ref) < 1e-5, p
        t = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                     p["stride"], p["padding"] if not isinstance(p["padding"], tuple) or len(p["padding"]) == 2
                     else 0, p["dilation"], p["groups"]) if not (isinstance(p["padding"], tuple) and len(p["padding"]) == 4) else None
        if t is not None:
            assert rel_err(y, t.numpy()) < 1e-5, p


@pytest.mark.parametrize("algo", EXACT)
def test_exact_algorithms_on_integer_data(handle, algo):
    rng = np.random.default_rng(7)
    ran = 0
    for p in _problems(11, 16):
        x, w, b = _make(p, rng, integer=True)
        pads = _pads(p["padding"], p["r"], p["s"], p["dilation"])
        ref = ref_conv(x, w, b, p["stride"], pads, p["dilation"], p["groups"])
        try:
            y = autodnn.conv2d(x, w, b, **_geom(p), algo=algo, handle=handle)
        except autodnn.InvalidArgumentError as e:
            assert e.argument == "algo"  # the algorithm declined this problem
            continue
        ran += 1
        assert np.array_equal(y, ref.astype(np.float32)), p
    assert ran >= 4


@pytest.mark.parametrize("act,fn", [
    ("relu", lambda v: np.maximum(v, 0)),
    ("relu6", lambda v: np.clip(v, 0, 6)),
    ("silu", lambda v: v / (1 + np.exp(-v))),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    (None, lambda v: v),
])
def test_epilogues(handle, act, fn):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    z = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    conv = ref_conv(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    bb = b.reshape(1, -1, 1, 1).astype(np.float64)
    # bias + residual
    y = autodnn.conv2d(x, w, b, padding=1, activation=act, residual=z, alpha=0.5, beta=2.0, handle=handle)
    assert rel_err(y, fn(0.5 * conv + bb + 2.0 * z)) < 1e-5
    # z as out's prior contents (cuDNN's y = alpha * conv + beta * y)
    out = z.copy()
    r = autodnn.conv2d(x, w, None, padding=1, activation=act, beta=1.0, out=out, handle=handle)
    assert r is out
    assert rel_err(out, fn(conv + z)) < 1e-5
    # a residual in another layout is copied to the output's
    zc = np.ascontiguousarray(z.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    y2 = autodnn.conv2d(x, w, b, padding=1, activation=act, residual=zc, beta=1.0, handle=handle)
    assert rel_err(y2, fn(conv + bb + z)) < 1e-5


def test_in_place_reads_and_copies():
    x = np.zeros((1, 4, 5, 5), np.float32)
    inplace = autodnn._autodnn.reads_in_place
    assert inplace(x)
    assert inplace(np.zeros((1, 5, 5, 4), np.float32).transpose(0, 3, 1, 2))  # channels-last
    assert inplace(np.zeros((1, 4, 5, 8), np.float32)[..., :5])  # padded rows
    assert not inplace(x.astype(np.float64))
    assert not inplace(x[:, :, ::-1])
    assert not inplace(np.broadcast_to(np.zeros((1, 1, 5, 5), np.float32), (1, 4, 5, 5)))
    assert inplace(np.zeros((4, 2, 3, 3), np.float32), filter=True)
    assert inplace(np.zeros((4, 3, 3, 2), np.float32).transpose(0, 3, 1, 2), filter=True)  # KRSC
    assert not inplace(np.zeros((4, 2, 3, 6), np.float32)[..., ::2], filter=True)


def test_copied_inputs_give_the_same_result(handle):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    ref = autodnn.conv2d(x, w, padding=1, handle=handle)
    for xv in (x.astype(np.float64), x[:, :, ::-1][:, :, ::-1], np.asfortranarray(x), x.tolist()):
        assert np.allclose(autodnn.conv2d(xv, w, padding=1, handle=handle), ref, atol=1e-5)
    xi = rng.integers(-3, 4, (1, 4, 6, 6))
    assert np.array_equal(autodnn.conv2d(xi, w.astype(np.int32).astype(np.float32), algo="direct", handle=handle),
                          ref_conv(xi, w.astype(np.int32), None, (1, 1), (0,) * 4, (1, 1), 1).astype(np.float32))


def test_out_written_in_place_or_copied(handle):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    ref = autodnn.conv2d(x, w, padding=1, handle=handle)
    out = np.empty((1, 6, 8, 8), np.float32)
    assert autodnn.conv2d(x, w, padding=1, out=out, handle=handle) is out
    assert np.array_equal(out, ref)
    big = np.zeros((1, 6, 8, 16), np.float32)
    view = big[..., ::2]  # not packed: computed aside, then copied in
    autodnn.conv2d(x, w, padding=1, out=view, handle=handle)
    assert np.array_equal(view, ref) and not big[..., 1::2].any()
    with pytest.raises(ValueError, match="out"):
        autodnn.conv2d(x, w, padding=1, out=np.empty((1, 6, 8, 8)), handle=handle)
    with pytest.raises(ValueError, match="out"):
        autodnn.conv2d(x, w, padding=1, out=np.empty((1, 6, 8, 7), np.float32), handle=handle)
    with pytest.raises(ValueError, match="out"):
        autodnn.conv2d(x, w, padding=1, out=x, handle=handle)  # out overlaps x? shape differs
    sq = rng.standard_normal((1, 6, 8, 8)).astype(np.float32)
    w6 = rng.standard_normal((6, 6, 3, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="out"):
        autodnn.conv2d(sq, w6, padding=1, out=sq, handle=handle)  # out is an input


def test_get_and_find_records(handle):
    x = np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((32, 16, 3, 3)).astype(np.float32)
    got = autodnn.get_algorithms(x, w, padding=1, handle=handle)
    assert got and all(isinstance(r, autodnn.AlgoRecord) for r in got)
    assert {r.name for r in got} >= {"direct", "gemm"}
    assert all(r.status in ("predicted", "ineligible") and r.workspace_bytes >= 0 for r in got)
    assert got == autodnn.get_algorithms((1, 16, 14, 14), (32, 16, 3, 3), padding=1, handle=handle)
    for op in ("backward_data", "backward_weight", "backward_bias"):
        assert any(r.name == "direct" for r in autodnn.get_algorithms(x, w, padding=1, op=op, handle=handle))
    found = autodnn.find_algorithms(x, w, padding=1, handle=handle)
    timed = [r.ms for r in found if r.status == "ok"]
    assert timed and timed == sorted(timed)
    assert all(r.status in ("ok", "eliminated", "failed", "not_timed") for r in found)
    limited = autodnn.Handle(threads=1, policy="heuristic", workspace_limit=0)
    assert all(r.status == "ineligible" for r in autodnn.get_algorithms(x, w, padding=1, handle=limited)
               if r.workspace_bytes > 0)


def test_prepared_weights(handle):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 16, 10, 10)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    ref = ref_conv(x, w, b, (1, 1), (1,) * 4, (1, 1), 1)
    for algo in (None, "winograd_4x4", "gemm", "direct"):
        pw = autodnn.prepare_weights(w, x.shape, padding=1, algo=algo, handle=handle)
        assert isinstance(pw, autodnn.PreparedWeights) and pw.shape == w.shape
        y = autodnn.conv2d(x, pw, b, padding=1, activation="relu", handle=handle)
        assert rel_err(y, np.maximum(ref, 0)) < 1e-4, algo
    pw = autodnn.prepare_weights(w, x.shape, padding=1, algo="winograd_4x4", handle=handle)
    with pytest.raises(ValueError, match="w"):
        autodnn.conv2d(x[:1], pw, padding=1, handle=handle)  # prepared for batch 2
    with pytest.raises(ValueError, match="w"):
        autodnn.conv2d(x, pw, padding=1, algo="gemm", handle=handle)


@pytest.mark.parametrize("seed", range(3))
def test_backward_against_torch_autograd(handle, seed):
    rng = np.random.default_rng(200 + seed)
    for p in _problems(50 + seed, 6):
        if isinstance(p["padding"], tuple) and len(p["padding"]) == 4:
            continue
        x, w, b = _make(p, rng)
        xt = torch.from_numpy(x).requires_grad_()
        wt = torch.from_numpy(w).requires_grad_()
        bt = torch.from_numpy(b).requires_grad_()
        y = F.conv2d(xt, wt, bt, p["stride"], p["padding"], p["dilation"], p["groups"])
        dy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
        y.backward(torch.from_numpy(dy))
        dx = autodnn.conv2d_backward_data(dy, w, x.shape, **_geom(p), handle=handle)
        dw = autodnn.conv2d_backward_weight(x, dy, w.shape, **_geom(p), handle=handle)
        db = autodnn.conv2d_backward_bias(dy, handle=handle)
        assert rel_err(dx, xt.grad.numpy()) < 1e-5, p
        assert rel_err(dw, wt.grad.numpy()) < 1e-5, p
        assert rel_err(db, bt.grad.numpy()) < 1e-5, p
        # alpha, beta and out=
        acc = np.ones_like(w)
        autodnn.conv2d_backward_weight(x, dy, w.shape, **_geom(p), alpha=2.0, beta=1.0, out=acc, handle=handle)
        assert rel_err(acc, 2.0 * wt.grad.numpy() + 1.0) < 1e-5, p
        # channels-last dy and x
        cl = lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        dxc = autodnn.conv2d_backward_data(cl(dy), w, x.shape, **_geom(p), handle=handle)
        assert rel_err(dxc, xt.grad.numpy()) < 1e-5, p
        dwc = autodnn.conv2d_backward_weight(cl(x), cl(dy), w.shape, **_geom(p), handle=handle)
        assert rel_err(dwc, wt.grad.numpy()) < 1e-5, p


def test_gemm_against_numpy(handle):
    rng = np.random.default_rng(9)
    for ta in (False, True):
        for tb in (False, True):
            m, n, k = 7, 5, 9
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
            b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
            c = rng.standard_normal((m, n)).astype(np.float32)
            oa = a.T if ta else a
            ob = b.T if tb else b
            ref = 1.5 * oa.astype(np.float64) @ ob.astype(np.float64) + 0.5 * c
            got = autodnn.gemm(a, b, c.copy(), 1.5, 0.5, ta, tb, handle=handle)
            assert rel_err(got, ref) < 1e-5
            cc = c.copy()
            assert autodnn.gemm(a, b, cc, 1.5, 0.5, ta, tb, handle=handle) is cc
            assert rel_err(cc, ref) < 1e-5
    # strided views read in place, integer data exact
    a = rng.integers(-4, 5, (6, 20)).astype(np.float32)[:, ::2]
    b = rng.integers(-4, 5, (10, 3)).astype(np.float32)
    assert np.array_equal(autodnn.gemm(a, b, handle=handle), (a @ b))
    with pytest.raises(ValueError, match="b"):
        autodnn.gemm(a, b[:4], handle=handle)
    # batched
    A = rng.standard_normal((3, 4, 6)).astype(np.float32)
    B = rng.standard_normal((3, 6, 5)).astype(np.float32)
    assert rel_err(autodnn.gemm_strided_batched(A, B, handle=handle), A.astype(np.float64) @ B) < 1e-5
    B2 = rng.standard_normal((6, 5)).astype(np.float32)
    assert rel_err(autodnn.gemm_strided_batched(A, B2, handle=handle), A.astype(np.float64) @ B2) < 1e-5
    C = np.ones((3, 4, 5), np.float32)
    autodnn.gemm_strided_batched(A, B, C, 1.0, 2.0, handle=handle)
    assert rel_err(C, A.astype(np.float64) @ B + 2.0) < 1e-5


def test_handle_and_info(tmp_path):
    inf = autodnn.info()
    assert inf["version"] == autodnn.__version__ and "direct" in inf["algorithms"]
    h = autodnn.Handle(threads=1, policy="cached_only", workspace_limit=1 << 20, deterministic=True)
    assert (h.threads, h.policy, h.workspace_limit, h.deterministic) == (1, "cached_only", 1 << 20, True)
    h.policy = "exhaustive"
    assert h.policy == "exhaustive"
    assert autodnn.default_handle() is autodnn.default_handle()
    # a tuning cache file: what one handle measured, a second one reads
    path = tmp_path / "tuning.json"
    x = np.ones((1, 8, 12, 12), np.float32)
    w = np.ones((8, 8, 3, 3), np.float32)
    h1 = autodnn.Handle(threads=1, cache=str(path))
    autodnn.conv2d(x, w, padding=1, handle=h1)
    assert h1.cache_entries >= 1
    h1.close()
    assert path.exists() and h1.closed
    h2 = autodnn.Handle(threads=1, policy="cached_only", cache=path)
    assert h2.cache_entries >= 1
    with pytest.raises(ValueError, match="handle"):
        autodnn.conv2d(x, w, handle=h1)


def test_math_mode_on_the_handle():
    """allow_bf16 with the bf16 units forced: exact on integer data (exact in bf16) for every
    exact algorithm, forward, backward and GEMM; on real data within the bf16 bound of the f64
    result, and different from strict where the CPU has the units."""
    strict = autodnn.Handle(threads=1, policy="heuristic")
    assert (strict.math, strict.bf16_units) == ("strict", "auto")
    h = autodnn.Handle(threads=1, policy="heuristic", math="allow_bf16", bf16_units="always")
    assert (h.math, h.bf16_units) == ("allow_bf16", "always")
    assert "math='allow_bf16'" in repr(h) or 'math="allow_bf16"' in repr(h)
    rng = np.random.default_rng(5)
    x = rng.integers(-4, 5, (2, 16, 9, 9)).astype(np.float32)
    w = rng.integers(-4, 5, (24, 16, 3, 3)).astype(np.float32)
    ref = ref_conv(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1).astype(np.float32)
    for algo in EXACT:
        assert np.array_equal(autodnn.conv2d(x, w, padding=1, algo=algo, handle=h), ref), algo
    dy = rng.integers(-4, 5, ref.shape).astype(np.float32)
    for algo in ("gemm", "direct"):
        assert np.array_equal(
            autodnn.conv2d_backward_data(dy, w, x.shape, padding=1, algo=algo, handle=h),
            autodnn.conv2d_backward_data(dy, w, x.shape, padding=1, algo="direct", handle=strict))
        assert np.array_equal(
            autodnn.conv2d_backward_weight(x, dy, w.shape, padding=1, algo=algo, handle=h),
            autodnn.conv2d_backward_weight(x, dy, w.shape, padding=1, algo="direct", handle=strict))
    a = rng.integers(-4, 5, (33, 70)).astype(np.float32)
    b = rng.integers(-4, 5, (70, 17)).astype(np.float32)
    assert np.array_equal(autodnn.gemm(a, b, handle=h), a @ b)
    # real data: within the bound of operands rounded to bf16 (2^-8 relative each)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b = rng.standard_normal((256, 48)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2.0 ** -7 * (np.abs(a).astype(np.float64) @ np.abs(b))
    got = autodnn.gemm(a, b, handle=h)
    assert np.all(np.abs(got - exact) <= bound + 1e-5)
    units = autodnn.info()["reduced_precision"]
    assert set(units) >= {"avx512_bf16", "avx512_fp16", "amx", "bf16_gemm_kernel", "bf16_unit_speedup"}
    if units["avx512_bf16"]:
        assert units["bf16_unit_speedup"] > 0
        assert not np.array_equal(got, autodnn.gemm(a, b, handle=strict))
    else:
        assert units["bf16_unit_speedup"] is None
        assert np.array_equal(got, autodnn.gemm(a, b, handle=strict))
    # settable, and checked
    h.math = "strict"
    h.bf16_units = "never"
    assert (h.math, h.bf16_units) == ("strict", "never")
    for arg, make in [("math", lambda: autodnn.Handle(math="tf32")),
                      ("bf16_units", lambda: autodnn.Handle(bf16_units="sometimes")),
                      ("math", lambda: autodnn.Handle(math=3))]:
        with pytest.raises(autodnn.InvalidArgumentError) as e:
            make()
        assert e.value.argument == arg
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        h.math = "fast"
    assert e.value.argument == "math"


def test_bad_arguments_raise_documented_exceptions(handle):
    x = np.ones((1, 4, 8, 8), np.float32)
    w = np.ones((8, 4, 3, 3), np.float32)

    def check(arg, fn, cls=autodnn.InvalidArgumentError):
        with pytest.raises(cls) as e:
            fn()
        assert isinstance(e.value, autodnn.Error)
        if cls is autodnn.InvalidArgumentError:
            assert isinstance(e.value, ValueError)
            assert e.value.argument == arg, (arg, e.value)
            assert str(e.value).startswith(arg)

    check("x", lambda: autodnn.conv2d(x.astype(np.complex64), w, handle=handle))
    check("x", lambda: autodnn.conv2d(np.array(["a"]), w, handle=handle))
    check("x", lambda: autodnn.conv2d(x[0], w, handle=handle))
    check("w", lambda: autodnn.conv2d(x, np.ones((8, 3, 3, 3), np.float32), handle=handle))
    check("groups", lambda: autodnn.conv2d(x, w, groups=3, handle=handle))
    check("padding", lambda: autodnn.conv2d(x, w, padding=-1, handle=handle))
    check("padding", lambda: autodnn.conv2d(x, w, padding=(1, 2, 3), handle=handle))
    check("padding", lambda: autodnn.conv2d(x, w, padding="full", handle=handle))
    check("padding", lambda: autodnn.conv2d(x, w, stride=2, padding="same", handle=handle))
    check("stride", lambda: autodnn.conv2d(x, w, stride=0, handle=handle))
    check("dilation", lambda: autodnn.conv2d(x, w, dilation=(1, -2), handle=handle))
    check("bias", lambda: autodnn.conv2d(x, w, np.ones(7, np.float32), handle=handle))
    check("residual", lambda: autodnn.conv2d(x, w, residual=np.ones((1, 8, 5, 5), np.float32), handle=handle))
    check("activation", lambda: autodnn.conv2d(x, w, activation="swoosh", handle=handle))
    check("algo", lambda: autodnn.conv2d(x, w, algo="nonesuch", handle=handle))
    check("algo", lambda: autodnn.conv2d(x, np.ones((8, 4, 1, 1), np.float32), algo="winograd_4x4", handle=handle))
    check("layout", lambda: autodnn.conv2d(x, w, layout="chwn", handle=handle))
    check("beta", lambda: autodnn.conv2d(x, w, beta=1.0, handle=handle))
    check("policy", lambda: autodnn.Handle(policy="fastest"))
    check("threads", lambda: autodnn.Handle(threads=0))
    check("x", lambda: autodnn.conv2d(np.ones((1, 4, 2, 2), np.float32), w, handle=handle))  # empty output
    check("w_shape", lambda: autodnn.conv2d_backward_weight(x, x, (0, 4, 3, 3), handle=handle))
    check("a", lambda: autodnn.gemm(np.ones(3, np.float32), np.ones((3, 3), np.float32), handle=handle))
    closed = autodnn.Handle(threads=1)
    closed.close()
    check("handle", lambda: autodnn.conv2d(x, w, handle=closed))
    # a workspace limit no algorithm's workspace fits
    tight = autodnn.Handle(threads=1, workspace_limit=0)
    with pytest.raises(MemoryError) as e:
        autodnn.conv2d(x, w, algo="gemm", handle=tight)
    assert isinstance(e.value, autodnn.OutOfMemoryError)
    # an output too large to allocate (16 TB)
    with pytest.raises(MemoryError) as e:
        autodnn.conv2d(np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32),
                       padding=1_000_000, handle=handle)
    assert isinstance(e.value, autodnn.OutOfMemoryError)
    # selection under that limit falls back to an algorithm without workspace
    assert np.array_equal(autodnn.conv2d(x, w, handle=tight), autodnn.conv2d(x, w, algo="direct", handle=handle))


def test_gil_released_while_computing():
    """A Python thread keeps running while another thread's call computes."""
    import threading
    rng = np.random.default_rng(14)
    x = rng.standard_normal((8, 64, 40, 40)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    h = autodnn.Handle(threads=1, policy="heuristic")
    started, done = threading.Event(), threading.Event()

    def work():
        started.set()
        for _ in range(6):
            autodnn.conv2d(x, w, padding=1, algo="direct", handle=h)
        done.set()

    import time
    # This loop's speed alone...
    idle = threading.Event()
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05 and not idle.is_set():
        count += 1
    rate = count / (time.perf_counter() - t0)
    # ...and while the other thread computes: a GIL held through its calls would leave it
    # only the interpreter's switch intervals between them (a small fraction of the time).
    t = threading.Thread(target=work)
    t.start()
    started.wait()
    count, t0 = 0, time.perf_counter()
    while not done.is_set():
        count += 1
    elapsed = time.perf_counter() - t0
    t.join()
    assert count > 0.4 * rate * elapsed, (count, rate, elapsed)


def test_gil_released_concurrent_calls(handle):
    import threading
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 16, 16, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    ref = autodnn.conv2d(x, w, padding=1, handle=handle)
    results = [None] * 4

    def run(i):
        results[i] = autodnn.conv2d(x, w, padding=1, handle=handle)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(np.array_equal(r, ref) for r in results)


@pytest.mark.parametrize("k,d", [((2, 2), (1, 1)), ((4, 3), (1, 2)), ((2, 5), (3, 1)), ((1, 4), (1, 1))])
def test_same_padding_as_pytorch(handle, k, d):
    """"same" with an odd total padding puts the extra row and column at the bottom and right."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 3, 9, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3) + k).astype(np.float32)
    y = autodnn.conv2d(x, w, padding="same", dilation=d, handle=handle)
    t = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding="same", dilation=d)
    assert y.shape == tuple(t.shape) == (1, 4, 9, 10)
    assert rel_err(y, t.numpy()) < 1e-5


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "nhwc"])
@pytest.mark.parametrize("seed", range(4))
def test_max_pool2d_against_torch(handle, layout, seed):
    # Integer data: ties everywhere, each window's first maximum (row-major) as in PyTorch;
    # the gradient's sums are exact.
    rng = np.random.default_rng(100 + seed)
    for _ in range(6):
        k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
        ceil = bool(rng.integers(0, 2))
        n, c = int(rng.integers(1, 3)), int(rng.choice([3, 16, 20]))
        hh, ww = int(rng.integers(k[0], 12)), int(rng.integers(k[1], 12))
        xt = torch.from_numpy(rng.integers(-4, 5, (n, c, hh, ww)).astype(np.float32))
        yt, it = F.max_pool2d(xt, k, s, p, ceil_mode=ceil, return_indices=True)
        dyt = torch.from_numpy(rng.integers(-4, 5, tuple(yt.shape)).astype(np.float32))
        xr = xt.clone().requires_grad_()
        F.max_pool2d(xr, k, s, p, ceil_mode=ceil).backward(dyt)
        xn, dyn = xt.numpy(), dyt.numpy()
        if layout == "channels_last":
            xn = np.ascontiguousarray(xn.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        elif layout == "nhwc":
            xn, dyn = xn.transpose(0, 2, 3, 1).copy(), dyn.transpose(0, 2, 3, 1).copy()
        lay = "nhwc" if layout == "nhwc" else "nchw"
        y = autodnn.max_pool2d(xn, k, s, p, ceil, handle=handle, layout=lay)
        y2, ind = autodnn.max_pool2d(xn, k, s, p, ceil, return_indices=True, handle=handle,
                                     layout=lay)
        want = yt.numpy().transpose(0, 2, 3, 1) if layout == "nhwc" else yt.numpy()
        assert np.array_equal(y, want) and np.array_equal(y2, want), (k, s, p, ceil)
        # The indices take y's shape and lie in y's order (channels-last memory for a
        # channels-last or NHWC y), as PyTorch's.
        assert ind.dtype == np.uint32 and ind.shape == y2.shape
        assert ind.strides == y2.strides, (ind.strides, y2.strides)
        iw = it.numpy().transpose(0, 2, 3, 1) if layout == "nhwc" else it.numpy()
        assert np.array_equal(ind.astype(np.int64), iw), (k, s, p, ceil)
        if layout == "channels_last":
            _, itc = F.max_pool2d(xt.contiguous(memory_format=torch.channels_last), k, s, p,
                                  ceil_mode=ceil, return_indices=True)
            assert ind.strides == tuple(4 * v for v in itc.stride()), (k, s, p, ceil)
        gw = xr.grad.numpy().transpose(0, 2, 3, 1) if layout == "nhwc" else xr.grad.numpy()
        # dy in either memory order, the indices as returned or copied into the other order
        # (read in dy's order: copied back where they are not in it).
        dys = [dyn, _other_order(dyn, layout == "nhwc")]
        inds = [ind, _other_order(ind, layout == "nhwc")]
        for d in dys:
            for i in inds:
                dx = autodnn.max_pool2d_backward(d, i, xn.shape, k, s, p, ceil, handle=handle,
                                                 layout=lay)
                assert np.array_equal(dx, gw), (k, s, p, ceil, d.strides, i.strides)


def _other_order(a, nhwc):
    """A copy of the 4-D array `a` with the same shape and values in the other memory order:
    channels last (or first, for an NHWC-shaped array) when `a` is C-contiguous, else
    C-contiguous."""
    if not a.flags["C_CONTIGUOUS"]:
        return np.ascontiguousarray(a)
    if nhwc:
        return np.ascontiguousarray(a.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def test_max_pool2d_bad_arguments(handle):
    x = np.zeros((1, 2, 6, 6), np.float32)
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d(x, 0, handle=handle)
    assert e.value.argument == "kernel_size"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d(x, 2, stride=(1, 0), handle=handle)
    assert e.value.argument == "stride"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d(x, 7, handle=handle)
    assert e.value.argument == "kernel_size" and "larger than the padded input" in str(e.value)
    y, ind = autodnn.max_pool2d(x, 2, return_indices=True, handle=handle)
    dy = np.ones_like(y)
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d_backward(dy, ind.astype(np.int64), x.shape, 2, handle=handle)
    assert e.value.argument == "indices"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d_backward(dy, ind[:, :1], x.shape, 2, handle=handle)
    assert e.value.argument == "indices"
    bad = ind.copy()
    bad[0, 0, 0, 0] = 36
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d_backward(dy, bad, x.shape, 2, handle=handle)
    assert e.value.argument == "indices"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.max_pool2d_backward(dy, ind, (1, 2, 5), 2, handle=handle)
    assert e.value.argument == "x_shape"
