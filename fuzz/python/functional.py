"""Fuzz harness of autodnn's Python functional API.

``one_input(data)`` decodes bytes (with its own deterministic reader, so that replaying a corpus
needs no atheris) into calls of conv2d, get_algorithms, find_algorithms, prepare_weights, the
three backward calls, gemm, gemm_strided_batched, max_pool2d, max_pool2d_backward and Handle, with arrays of any dtype, shape and
strides (views, broadcasts, misaligned buffers, read-only arrays, nested lists), geometry,
algorithm names, epilogues, out= arrays and handles, mostly valid and now and then replaced by
junk. Invariants:

* a call returns or raises an ``autodnn.Error`` subclass, nothing else (no TypeError,
  OverflowError, UnicodeError, PanicException...), and never aborts;
* an ``InvalidArgumentError`` names (``argument``) one of the call's parameters;
* a call whose arguments are all valid succeeds (with ``algo=None``; a named algorithm may
  decline the problem with an ``InvalidArgumentError`` naming ``algo``, or need more
  workspace than the handle's limit, an ``OutOfMemoryError``), leaves its inputs
  unchanged, and its result matches a NumPy f64 reference: within 1e-6 of max|ref| for exact
  algorithms, 1e-3 for Winograd and FFT ones and for the handle's own choice (the data are
  integers in [-4, 4]).

Run a campaign with ``python fuzz/python/functional.py [libFuzzer flags] CORPUS...`` (needs
atheris); ``python/tests/test_fuzz_corpus.py`` replays the committed corpora without it.
"""

import inspect
import sys

import numpy as np

if __name__ != "__main__":
    import autodnn

# ---------------------------------------------------------------------------------------------
# Bytes to choices


class Reader:
    """Choices read from the input's bytes; past the end every byte reads as 0, which picks
    the first (plain, valid) option of each choice."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def byte(self):
        if self.pos < len(self.data):
            b = self.data[self.pos]
            self.pos += 1
            return b
        return 0

    def int(self, lo, hi):
        n = hi - lo + 1
        v = self.byte() if n <= 256 else (self.byte() << 8) | self.byte()
        return lo + v % n

    def pick(self, seq):
        return seq[self.byte() % len(seq)]

    def junk(self):
        """True rarely (a byte of 240 or more): replace the next argument with junk."""
        return self.byte() >= 240


class Junk:
    """Stands for an argument replaced by junk: the call's arguments are not all valid."""


JUNK = [
    None, "", "\ud800", "relu", "same", b"x", 2**64, -(2**63) - 1, 10**30, -1, 0, 1.5,
    float("nan"), float("inf"), (1,), (1, 2, 3), (), [1, 1], (1, "a"), (2**40, 1), {}, True,
    np.float32(1.0), np.int64(3), np.array([1, 2]), np.array(2), np.zeros((1, 1, 1, 1)),
    object(), np.bool_(True), 1 + 2j, "x" * 300,
]


def junk_value(r):
    return r.pick(JUNK)


# ---------------------------------------------------------------------------------------------
# Arrays


def base_values(r, shape):
    """Integer values in [-4, 4] (as float64) of `shape`, from a small seed."""
    seed = r.byte()
    n = int(np.prod(shape)) if len(shape) else 1
    v = (np.arange(n, dtype=np.int64) * (2 * seed + 7) + seed * 13) % 9 - 4
    return v.reshape(shape).astype(np.float64)


def make_array(r, shape, valid_only=False):
    """An array-like of logical `shape` and its f64 values, or (junk, None) when the variant
    is not a valid float array of that shape. Returns (obj, values, clean)."""
    v = base_values(r, shape)
    variant = r.byte() % (32 if not valid_only else 16)
    nd = len(shape)
    if variant == 0 or variant >= 24:
        a = v.astype(np.float32)
    elif variant == 1:
        a = v.astype(np.float64)
    elif variant == 2:
        a = v.astype(np.float16)
    elif variant == 3:
        a = v.astype(np.int32)
    elif variant == 4:
        a = v.astype(np.int8)
    elif variant == 5:
        a = np.asfortranarray(v.astype(np.float32))
    elif variant == 6:
        a = v.astype(np.float32)
        if nd:
            a = np.flip(np.ascontiguousarray(np.flip(a, -1)), -1)
    elif variant == 7:
        if nd:
            wide = np.zeros(shape[:-1] + (shape[-1] + 3,), np.float32)
            wide[..., : shape[-1]] = v
            a = wide[..., : shape[-1]]
        else:
            a = v.astype(np.float32)
    elif variant == 8:
        n = v.size
        buf = np.zeros(n * 4 + 1, np.uint8)
        a = buf[1:].view(np.float32).reshape(shape)
        a[...] = v
    elif variant == 9:
        # A broadcast view along the first axis of extent over 1.
        a = v.astype(np.float32)
        for ax in range(nd):
            if shape[ax] > 1:
                idx = [slice(None)] * nd
                idx[ax] = slice(0, 1)
                one = a[tuple(idx)]
                a = np.broadcast_to(one, shape)
                v = np.asarray(a, np.float64)
                break
    elif variant == 10:
        a = v.astype(np.float32).tolist()
    elif variant == 11:
        a = v.astype(np.float32)
        if nd == 4:
            a = np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        elif nd >= 2:
            a = np.ascontiguousarray(a.T).T
    elif variant == 12:
        a = v.astype(np.float32)
        a.flags.writeable = False
    elif variant == 13:
        if nd:
            wide = np.zeros(shape[:-1] + (shape[-1] * 2,), np.float32)
            wide[..., ::2] = v
            a = wide[..., ::2]
        else:
            a = v.astype(np.float32)
    elif variant == 14:
        v = np.abs(v)  # unsigned: the magnitudes (still integers in [0, 4])
        a = v.astype(np.uint16)
    elif variant == 15:
        a = v.astype(np.float32)
        if nd >= 2:
            a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, 0, -1)), 0, -1)
    # Invalid (or not clean) from here on.
    elif variant == 16:
        return v.astype(bool), None, False
    elif variant == 17:
        return v.astype(np.complex64), None, False
    elif variant == 18:
        return v.astype(object), None, False
    elif variant == 19:
        return v.astype(str), None, False
    elif variant == 20:
        return v.astype(np.float32).reshape(-1), None, False
    elif variant == 21:
        return v.astype(np.float32)[None], None, False
    elif variant == 22:
        return np.float32(1.0), None, False
    elif variant == 23:
        # One dimension off by one, or zero.
        s = list(shape)
        if s:
            i = r.byte() % len(s)
            s[i] = r.pick([0, s[i] + 1, max(s[i] - 1, 0)])
        return np.ones(tuple(s), np.float32), None, False
    if variant == 24 and v.size:
        # Non-finite values: valid, but not compared.
        a = np.array(a, np.float32)
        a.reshape(-1)[r.byte() % v.size] = r.pick([np.nan, np.inf, -np.inf, 3e38])
        return a, None, True
    return a, v, True


def snapshot(obj):
    if isinstance(obj, np.ndarray) and obj.size <= 1 << 20:
        return obj.copy()
    return None


def unchanged(obj, snap):
    return snap is None or np.array_equal(np.asarray(obj), snap, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# References (f64)


def pad_sides(padding, r_, s_, dil):
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        th, tw = dil[0] * (r_ - 1), dil[1] * (s_ - 1)
        return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    if isinstance(padding, tuple) and len(padding) == 2:
        return (padding[0], padding[0], padding[1], padding[1])
    if isinstance(padding, tuple):
        return padding
    return (padding,) * 4


def out_hw(h, w, r_, s_, st, pad, dil):
    t, b, le, ri = pad
    oh = (h + t + b - dil[0] * (r_ - 1) - 1) // st[0] + 1
    ow = (w + le + ri - dil[1] * (s_ - 1) - 1) // st[1] + 1
    return oh, ow


def ref_conv(x, w, st, pad, dil, groups):
    n, c, h, ww = x.shape
    k, cg, r_, s_ = w.shape
    t, b, le, ri = pad
    oh, ow = out_hw(h, ww, r_, s_, st, pad, dil)
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (le, ri)))
    y = np.zeros((n, k, oh, ow))
    kg = k // groups
    for g in range(groups):
        for i in range(r_):
            for j in range(s_):
                patch = xp[:, g * cg:(g + 1) * cg,
                           i * dil[0]:i * dil[0] + st[0] * (oh - 1) + 1:st[0],
                           j * dil[1]:j * dil[1] + st[1] * (ow - 1) + 1:st[1]]
                y[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch,
                                                       w[g * kg:(g + 1) * kg, :, i, j])
    return y


def ref_backward_data(dy, w, x_shape, st, pad, dil, groups):
    n, c, h, ww = x_shape
    k, cg, r_, s_ = w.shape
    t, b, le, ri = pad
    oh, ow = dy.shape[2], dy.shape[3]
    dxp = np.zeros((n, c, h + t + b, ww + le + ri))
    kg = k // groups
    for g in range(groups):
        for i in range(r_):
            for j in range(s_):
                dxp[:, g * cg:(g + 1) * cg,
                    i * dil[0]:i * dil[0] + st[0] * (oh - 1) + 1:st[0],
                    j * dil[1]:j * dil[1] + st[1] * (ow - 1) + 1:st[1]] += np.einsum(
                        "nkhw,kc->nchw", dy[:, g * kg:(g + 1) * kg], w[g * kg:(g + 1) * kg, :, i, j])
    return dxp[:, :, t:t + h, le:le + ww]


def ref_backward_weight(x, dy, w_shape, st, pad, dil, groups):
    k, cg, r_, s_ = w_shape
    t, b, le, ri = pad
    oh, ow = dy.shape[2], dy.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (le, ri)))
    dw = np.zeros(w_shape)
    kg = k // groups
    for g in range(groups):
        for i in range(r_):
            for j in range(s_):
                patch = xp[:, g * cg:(g + 1) * cg,
                           i * dil[0]:i * dil[0] + st[0] * (oh - 1) + 1:st[0],
                           j * dil[1]:j * dil[1] + st[1] * (ow - 1) + 1:st[1]]
                dw[g * kg:(g + 1) * kg, :, i, j] = np.einsum(
                    "nchw,nkhw->kc", patch, dy[:, g * kg:(g + 1) * kg])
    return dw


def _erf(v):
    # Abramowitz-Stegun 7.1.26 is too coarse; use math.erf elementwise (small arrays).
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(v) if v.size else v


def ref_act(v, act):
    if act is None or act in ("none", "identity"):
        return v
    if act == "relu":
        return np.maximum(v, 0)
    if act in ("relu6", "clip"):
        return np.clip(v, 0, 6)
    if act == "sigmoid":
        return 1 / (1 + np.exp(-v))
    if act == "tanh":
        return np.tanh(v)
    if act == "gelu":
        return 0.5 * v * (1 + _erf(v / np.sqrt(2)))
    if act in ("silu", "swish"):
        return v / (1 + np.exp(-v))
    if act.startswith("leaky_relu:"):
        slope = float(np.float32(act.split(":")[1]))
        return np.where(v >= 0, v, slope * v)
    lo, hi = act.split(":")[1:]
    return np.clip(v, float(np.float32(lo)), float(np.float32(hi)))


ACTS = [None, "relu", "relu6", "sigmoid", "tanh", "gelu", "silu", "leaky_relu:0.25",
        "clip:-1:2", "none", "leaky_relu:0.1", "clip"]
EXACT_ACTS = {None, "relu", "relu6", "none", "clip", "clip:-1:2", "leaky_relu:0.25"}


def tolerance(algo, act=None):
    approximate = algo is None or "winograd" in algo or "fft" in algo
    tol = 1e-3 if approximate else 1e-6
    if act not in EXACT_ACTS:
        tol = max(tol, 1e-4)
    return tol


class Mismatch(AssertionError):
    pass


# What the inputs reached: ("compared", what) for each checked result, (what, error class)
# for each error (make_seeds.py picks seeds by it).
REACHED = set()


def check_close(what, got, ref, tol, scale_of=None):
    """max|got - ref| within tol * max(1, max|scale_of|) (scale_of: ref, or for a result
    through an activation the values before it, whose rounding errors it carries)."""
    got = np.asarray(got, np.float64)
    if got.shape != ref.shape:
        raise Mismatch(f"{what}: shape {got.shape}, expected {ref.shape}")
    if not np.all(np.isfinite(ref)):
        return
    REACHED.add(("compared", what))
    sref = ref if scale_of is None else scale_of
    scale = max(float(np.abs(sref).max()) if sref.size else 0.0, 1.0)
    err = float(np.abs(got - ref).max()) if ref.size else 0.0
    if not err <= tol * scale:
        raise Mismatch(f"{what}: max error {err} over max|ref| {scale} (tolerance {tol})")


# ---------------------------------------------------------------------------------------------
# Handles

_HANDLES = {}
_CLOSED = []


def get_handle(r, params):
    """A handle for the call: usually a cached valid one; sometimes None (the default handle),
    a closed one, junk, or one constructed from junk arguments (which must raise)."""
    kind = r.byte() % 16
    if kind == 13:
        return None, True
    if kind == 14:
        if not _CLOSED:
            h = autodnn.Handle(threads=1, policy="heuristic")
            h.close()
            _CLOSED.append(h)
        return _CLOSED[0], False
    if kind == 15:
        return junk_value(r), False
    threads = 1 if kind < 10 else 2
    policy = "heuristic" if kind % 5 else r.pick(["benchmark", "heuristic", "exhaustive"])
    limit = r.pick([None, None, 0, 1024, 1 << 20])
    det = r.byte() % 4 == 3
    key = (threads, policy, limit, det)
    h = _HANDLES.get(key)
    if h is None:
        h = autodnn.Handle(threads=threads, policy=policy, workspace_limit=limit,
                           deterministic=det)
        _HANDLES[key] = h
    return h, True


HANDLE_PARAMS = {"threads", "policy", "workspace_limit", "cache", "deterministic", "math",
                 "bf16_units"}


def fuzz_handle(r):
    """Handle construction and properties with arbitrary arguments."""
    kw = {}
    for name, good in (("threads", [1, 2]), ("policy", ["heuristic", "benchmark",
                                                         "exhaustive", "Heuristic"]),
                       ("workspace_limit", [None, 0, 1 << 30]),
                       ("deterministic", [False, True]),
                       ("cache", [None, False]),
                       ("math", ["strict", "allow_bf16", "Strict"]),
                       ("bf16_units", ["auto", "always", "never", "ALWAYS"])):
        sel = r.byte()
        if sel < 128:
            continue
        kw[name] = r.pick(good) if sel < 200 else r.pick(
            JUNK + [0, 4097, 2**70, -(2**70), "/proc/autodnn-none/x.cache", 5])
        if name == "cache" and isinstance(kw[name], (str, bytes)) and kw[name] != "\ud800":
            # A str is a valid cache path: one that cannot be written, so that the harness
            # leaves no files behind.
            kw[name] = "/proc/autodnn-none/x.cache"
    call(lambda: autodnn.Handle(**kw), HANDLE_PARAMS, "Handle")
    # Setters on a private handle.
    key = "props"
    h = _HANDLES.get(key)
    if h is None:
        h = autodnn.Handle(threads=1, policy="heuristic")
        _HANDLES[key] = h
    for _ in range(r.int(0, 3)):
        which = r.byte() % 5
        val = junk_value(r) if r.junk() else None
        if which == 0:
            v = val if val is not None else r.pick(["heuristic", "benchmark"])
            call(lambda: setattr(h, "policy", v), {"policy"}, "Handle.policy")
        elif which == 1:
            call(lambda: setattr(h, "workspace_limit", val), {"workspace_limit"},
                 "Handle.workspace_limit")
        elif which == 2:
            v = val if val is not None else False
            call(lambda: setattr(h, "deterministic", v), {"deterministic"},
                 "Handle.deterministic")
        elif which == 3:
            v = val if val is not None else r.pick(["strict", "allow_bf16"])
            call(lambda: setattr(h, "math", v), {"math"}, "Handle.math")
        else:
            v = val if val is not None else r.pick(["auto", "always", "never"])
            call(lambda: setattr(h, "bf16_units", v), {"bf16_units"}, "Handle.bf16_units")
    h.policy = "heuristic"
    h.workspace_limit = None
    h.deterministic = False
    h.math = "strict"
    h.bf16_units = "auto"
    repr(h)


# ---------------------------------------------------------------------------------------------
# Calls


class Unexpected(AssertionError):
    pass


def call(fn, params, what, must_succeed=False, algo=None):
    """Runs `fn`; returns (ok, result). Raises Unexpected on a broken invariant."""
    try:
        res = fn()
        REACHED.add((what, "ok"))
        return True, res
    except autodnn.InvalidArgumentError as e:
        arg = e.argument
        REACHED.add((what, "InvalidArgumentError", arg))
        if not arg or arg not in params:
            raise Unexpected(f"{what}: InvalidArgumentError names {arg!r}, not one of "
                             f"{sorted(params)}: {e}") from e
        if not str(e):
            raise Unexpected(f"{what}: empty message") from e
        if must_succeed and not (algo is not None and arg == "algo"):
            raise Unexpected(f"{what}: valid call failed: {e!r}") from e
        return False, None
    except autodnn.Error as e:
        REACHED.add((what, type(e).__name__))
        # A named algorithm may need more workspace than the handle's limit allows.
        over_budget = algo is not None and isinstance(e, autodnn.OutOfMemoryError)
        if must_succeed and not (isinstance(e, autodnn.NotSupportedError) or over_budget):
            raise Unexpected(f"{what}: valid call failed: {e!r}") from e
        return False, None
    except Exception as e:  # noqa: BLE001 - the point: no other exception type
        raise Unexpected(f"{what}: raised {type(e).__name__}: {e}") from e
    except BaseException as e:  # PanicException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise Unexpected(f"{what}: raised {type(e).__name__}: {e}") from e


def params_of(fn):
    return set(inspect.signature(fn).parameters)


def maybe_junk(r, value, state):
    if r.junk():
        state["clean"] = False
        return junk_value(r)
    return value


def geometry(r, state):
    """(kwargs, stride, pad4, dilation, groups) with plain values; kwargs may hold junk."""
    st = (r.int(1, 3), r.int(1, 3)) if r.byte() % 3 else (1, 1)
    dil = (r.int(1, 2), r.int(1, 2)) if r.byte() % 4 == 1 else (1, 1)
    groups = r.pick([1, 1, 1, 2, 3])
    pform = r.byte() % 8
    if pform < 3:
        padding = r.int(0, 2)
    elif pform == 3:
        padding = (r.int(0, 2), r.int(0, 2))
    elif pform == 4:
        padding = tuple(r.int(0, 3) for _ in range(4))
    elif pform == 5:
        padding = "valid"
    elif pform == 6:
        padding = "same"
        st = (1, 1)
    else:
        padding = 0
    kw = {}
    # Forms of the same values.
    sform = r.byte() % 4
    kw["stride"] = (st if sform == 0 else list(st) if sform == 1
                    else (st[0] if st[0] == st[1] else st) if sform == 2
                    else (np.int64(st[0]), np.int32(st[1])))
    kw["padding"] = padding
    kw["dilation"] = dil if r.byte() % 2 else (dil[0] if dil[0] == dil[1] else list(dil))
    kw["groups"] = groups if r.byte() % 4 else np.int64(groups)
    for name in ("stride", "padding", "dilation", "groups"):
        kw[name] = maybe_junk(r, kw[name], state)
    return kw, st, padding, dil, groups


def conv_problem(r):
    n = r.int(1, 2)
    groups_hint = None
    cg = r.int(1, 4)
    kg = r.int(1, 4)
    h = r.int(1, 12)
    w = r.int(1, 12)
    rr = r.pick([1, 3, 1, 2, 3, 5, 4, 7])
    ss = rr if r.byte() % 4 else r.pick([1, 2, 3, 5])
    return n, cg, kg, h, w, rr, ss, groups_hint


def setup_conv(r):
    state = {"clean": True}
    n, cg, kg, h, w_, rr, ss, _ = conv_problem(r)
    gkw, st, padding, dil, groups = geometry(r, state)
    c, k = cg * groups, kg * groups
    pad = pad_sides(padding, rr, ss, dil)
    oh, ow = out_hw(h, w_, rr, ss, st, pad, dil)
    if oh < 1 or ow < 1:
        state["clean"] = False
    layout = r.pick(["nchw", "nchw", "nhwc"])
    return state, dict(n=n, c=c, k=k, h=h, w=w_, r=rr, s=ss, st=st, pad=pad, dil=dil,
                       groups=groups, oh=oh, ow=ow, layout=layout, gkw=gkw, cg=cg)


def activation_input(r, state, p, shape_nchw):
    """An activation-shaped array given in the call's layout; values returned in NCHW."""
    if p["layout"] == "nhwc":
        n, c, h, w = shape_nchw
        obj, vals, ok = make_array(r, (n, h, w, c))
        if vals is not None:
            vals = vals.transpose(0, 3, 1, 2)
    else:
        obj, vals, ok = make_array(r, shape_nchw)
    if not ok:
        state["clean"] = False
    return obj, vals


def to_nchw(a, layout):
    a = np.asarray(a, np.float64)
    return a.transpose(0, 3, 1, 2) if layout == "nhwc" and a.ndim == 4 else a


def out_array(r, state, shape, layout_nhwc_shape=None):
    """An out= array: None, or float32 of `shape` in some form, or junk. (obj, prior values)."""
    sel = r.byte() % 12
    if sel < 6:
        return None, None
    v = base_values(r, shape)
    if sel == 6:
        a = v.astype(np.float32)
    elif sel == 7 and len(shape) == 4:
        a = np.ascontiguousarray(v.transpose(0, 2, 3, 1).astype(np.float32)).transpose(0, 3, 1, 2)
    elif sel == 8 and shape:
        wide = np.zeros(tuple(shape[:-1]) + (shape[-1] + 2,), np.float32)
        wide[..., : shape[-1]] = v
        a = wide[..., : shape[-1]]
    elif sel == 9:
        a = np.flip(np.ascontiguousarray(np.flip(v.astype(np.float32))))
    else:
        state["clean"] = False
        bad = r.byte() % 5
        if bad == 0:
            a = v.astype(np.float64)
        elif bad == 1:
            a = v.astype(np.float32)
            a.flags.writeable = False
        elif bad == 2:
            a = np.zeros(tuple(s + 1 for s in shape), np.float32)
        elif bad == 3:
            a = np.broadcast_to(np.float32(0), shape)
        else:
            a = v.astype(np.float32).tolist()
        return a, None
    return a, v


def pick_algo(r, state, names):
    sel = r.byte() % 8
    if sel < 4 or not names:
        return None
    if sel < 7:
        return r.pick(names)
    state["clean"] = False
    return r.pick(["", "junk", "DIRECT", "direct ", "\ud800", 3, b"direct", "winograd_9x9"])


def fuzz_conv2d(r):
    state, p = setup_conv(r)
    n, c, k, h, w_ = p["n"], p["c"], p["k"], p["h"], p["w"]
    x, xv = activation_input(r, state, p, (n, c, h, w_))
    wobj, wv, ok = make_array(r, (k, p["cg"], p["r"], p["s"]))
    state["clean"] &= ok
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    kw = dict(p["gkw"], layout=p["layout"], handle=handle)
    bias = bv = None
    if r.byte() % 2:
        bias, bv, ok = make_array(r, (k,))
        state["clean"] &= ok
        kw["bias"] = bias
    act = r.pick(ACTS) if r.byte() % 2 else None
    if act is not None:
        kw["activation"] = maybe_junk(r, act, state)
    oshape = (n, k, p["oh"], p["ow"])
    shown = (n, p["oh"], p["ow"], k) if p["layout"] == "nhwc" else oshape
    z = zv = None
    if r.byte() % 3 == 0 and state["clean"]:
        z, zv = activation_input(r, state, p, oshape)
        kw["residual"] = z
    alpha = r.pick([1.0, 1.0, 2.0, -1.0, 0.5, 0.0, 3])
    beta = r.pick([0.0, 0.0, 1.0, -2.0, 0.5])
    out = ov = None
    if state["clean"]:
        out, ov = out_array(r, state, shown)
        if out is not None:
            kw["out"] = out
        if ov is not None and p["layout"] == "nhwc":
            ov = ov.transpose(0, 3, 1, 2)
    if beta != 0.0 and z is None and out is None:
        state["clean"] = False  # nonzero beta needs out= or residual=
    kw["alpha"] = maybe_junk(r, alpha, state)
    kw["beta"] = maybe_junk(r, beta, state)
    names = []
    prepared = False
    if state["clean"] and r.byte() % 3 == 0:
        ok, recs = call(lambda: autodnn.get_algorithms(
            x, wobj, **p["gkw"], bias=bias is not None, residual=z is not None,
            activation=act, layout=p["layout"], handle=handle),
            params_of(autodnn.get_algorithms), "get_algorithms", must_succeed=True)
        names = [rec.name for rec in recs if rec.status == "predicted"]
        check_records(recs, {"predicted", "ineligible"})
    elif state["clean"]:
        names = ["direct"]
    algo = pick_algo(r, state, names)
    if algo is not None:
        kw["algo"] = algo
    if state["clean"] and r.byte() % 6 == 0:
        # Prepared weights (for this problem, or for another batch size).
        other = r.byte() % 4 == 0
        xp_ = (n + 1, c, h, w_) if other else (x if r.byte() % 2 else
                                                 ((n, h, w_, c) if p["layout"] == "nhwc" else
                                                  (n, c, h, w_)))
        if (isinstance(xp_, tuple) and isinstance(x, np.ndarray) and x.dtype == np.float32
                and not x.flags.c_contiguous):
            # Weights prepared on a shape are for a packed input; a strided view read in
            # place is another problem (an error naming w).
            other = True
        if out is not None:
            # The output's layout is part of the problem too: out= in another layout than the
            # one a new output would have (the input's) is another problem.
            other = True
        ok, pw = call(lambda: autodnn.prepare_weights(
            wobj, xp_, **p["gkw"], algo=algo, handle=handle, layout=p["layout"]),
            params_of(autodnn.prepare_weights), "prepare_weights",
            must_succeed=algo is None and not other, algo=algo)
        if not ok:
            return
        repr(pw)
        kw_w = pw
        prepared = True
        if other:
            state["clean"] = False
    else:
        kw_w = wobj
    snaps = [(o, snapshot(o)) for o in (x, wobj, bias, z)]
    clean = state["clean"]
    ok, y = call(lambda: autodnn.conv2d(x, kw_w, **kw), params_of(autodnn.conv2d), "conv2d",
                 must_succeed=clean, algo=algo)
    if not (ok and clean):
        return
    for o, s in snaps:
        if o is not out and not unchanged(o, s):
            raise Mismatch("conv2d modified an input")
    if out is not None and y is not out:
        raise Mismatch("conv2d did not return out")
    if np.asarray(y).shape != shown:
        raise Mismatch(f"conv2d: shape {np.asarray(y).shape}, expected {shown}")
    if xv is None or wv is None or (bias is not None and bv is None) or (
            z is not None and zv is None):
        return
    with np.errstate(all="ignore"):
        ref = alpha * ref_conv(xv, wv, p["st"], p["pad"], p["dil"], p["groups"])
        if bv is not None:
            ref = ref + bv.reshape(1, -1, 1, 1)
        if zv is not None:
            ref = ref + beta * zv
        elif ov is not None:
            ref = ref + beta * ov
        pre = ref
        ref = ref_act(ref, act)
    name = (kw_w.algo if prepared else algo)
    check_close(f"conv2d algo={name}", to_nchw(y, p["layout"]), ref,
                tolerance(None if (prepared and algo is None) else name, act), scale_of=pre)


def check_records(recs, statuses):
    for rec in recs:
        if not isinstance(rec, autodnn.AlgoRecord) or not isinstance(rec.name, str):
            raise Mismatch(f"bad record {rec!r}")
        if rec.status not in statuses:
            raise Mismatch(f"bad status {rec!r}")


def fuzz_queries(r):
    """get_algorithms and find_algorithms with arrays or shapes."""
    state, p = setup_conv(r)
    n, c, k, h, w_ = p["n"], p["c"], p["k"], p["h"], p["w"]
    shape_x = r.byte() % 2 == 0
    if shape_x:
        x = (n, h, w_, c) if p["layout"] == "nhwc" else (n, c, h, w_)
        x = maybe_junk(r, x, state)
        wobj = maybe_junk(r, (k, p["cg"], p["r"], p["s"]), state)
    else:
        x, _ = activation_input(r, state, p, (n, c, h, w_))
        wobj, _, ok = make_array(r, (k, p["cg"], p["r"], p["s"]))
        state["clean"] &= ok
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    act = maybe_junk(r, r.pick(ACTS), state)
    if shape_x or r.byte() % 4:
        op = r.pick(["forward", "backward_data", "backward_weight", "backward_bias"])
        op = maybe_junk(r, op, state)
        kw = dict(p["gkw"], layout=p["layout"], handle=handle, op=op, activation=act,
                  bias=maybe_junk(r, r.pick([False, True]), state),
                  residual=maybe_junk(r, r.pick([False, True]), state))
        ok, recs = call(lambda: autodnn.get_algorithms(x, wobj, **kw),
                        params_of(autodnn.get_algorithms), "get_algorithms",
                        must_succeed=state["clean"])
        if ok:
            check_records(recs, {"predicted", "ineligible"})
    else:
        kw = dict(p["gkw"], layout=p["layout"], handle=handle, activation=act)
        ok, recs = call(lambda: autodnn.find_algorithms(x, wobj, **kw),
                        params_of(autodnn.find_algorithms), "find_algorithms",
                        must_succeed=state["clean"])
        if ok:
            check_records(recs, {"ok", "eliminated", "failed", "not_timed"})


def backward_algo(r, state, p, handle, op, x_like, w_like):
    names = []
    if state["clean"] and r.byte() % 2:
        ok, recs = call(lambda: autodnn.get_algorithms(
            x_like, w_like, **p["gkw"], op=op, layout=p["layout"], handle=handle),
            params_of(autodnn.get_algorithms), "get_algorithms", must_succeed=True)
        names = [rec.name for rec in recs if rec.status == "predicted"]
    return pick_algo(r, state, names)


def fuzz_backward_data(r):
    state, p = setup_conv(r)
    n, c, k, h, w_ = p["n"], p["c"], p["k"], p["h"], p["w"]
    oh, ow = max(p["oh"], 1), max(p["ow"], 1)
    dy, dyv = activation_input(r, state, p, (n, k, oh, ow))
    wobj, wv, ok = make_array(r, (k, p["cg"], p["r"], p["s"]))
    state["clean"] &= ok
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    xs = (n, h, w_, c) if p["layout"] == "nhwc" else (n, c, h, w_)
    xs_arg = r.pick([xs, list(xs), tuple(np.int64(v) for v in xs)])
    xs_arg = maybe_junk(r, xs_arg, state)
    alpha = r.pick([1.0, 2.0, -1.0, 0.5])
    beta = r.pick([0.0, 0.0, 1.0, -2.0])
    out, ov = (out_array(r, state, xs) if state["clean"] else (None, None))
    if ov is not None and p["layout"] == "nhwc":
        ov = ov.transpose(0, 3, 1, 2)
    if beta != 0.0 and out is None:
        state["clean"] = False
    algo = backward_algo(r, state, p, handle, "backward_data", xs, (k, p["cg"], p["r"], p["s"]))
    kw = dict(p["gkw"], layout=p["layout"], handle=handle, algo=algo, out=out,
              alpha=maybe_junk(r, alpha, state), beta=maybe_junk(r, beta, state))
    snaps = [(o, snapshot(o)) for o in (dy, wobj)]
    clean = state["clean"]
    ok, dx = call(lambda: autodnn.conv2d_backward_data(dy, wobj, xs_arg, **kw),
                  params_of(autodnn.conv2d_backward_data), "conv2d_backward_data",
                  must_succeed=clean, algo=algo)
    if not (ok and clean):
        return
    for o, s in snaps:
        if not unchanged(o, s):
            raise Mismatch("conv2d_backward_data modified an input")
    if out is not None and dx is not out:
        raise Mismatch("conv2d_backward_data did not return out")
    if dyv is None or wv is None:
        return
    with np.errstate(all="ignore"):
        ref = alpha * ref_backward_data(dyv, wv, (n, c, h, w_), p["st"], p["pad"], p["dil"],
                                        p["groups"])
        if ov is not None:
            ref = ref + beta * ov
    check_close(f"conv2d_backward_data algo={algo}", to_nchw(dx, p["layout"]), ref,
                tolerance(algo))


def fuzz_backward_weight(r):
    state, p = setup_conv(r)
    n, c, k, h, w_ = p["n"], p["c"], p["k"], p["h"], p["w"]
    oh, ow = max(p["oh"], 1), max(p["ow"], 1)
    x, xv = activation_input(r, state, p, (n, c, h, w_))
    dy, dyv = activation_input(r, state, p, (n, k, oh, ow))
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    ws = (k, p["cg"], p["r"], p["s"])
    ws_arg = maybe_junk(r, r.pick([ws, list(ws), np.array(ws)]), state)
    alpha = r.pick([1.0, 2.0, -1.0, 0.5])
    beta = r.pick([0.0, 0.0, 1.0, -2.0])
    out, ov = (out_array(r, state, ws) if state["clean"] else (None, None))
    if beta != 0.0 and out is None:
        state["clean"] = False
    xs = (n, h, w_, c) if p["layout"] == "nhwc" else (n, c, h, w_)
    algo = backward_algo(r, state, p, handle, "backward_weight", xs, ws)
    kw = dict(p["gkw"], layout=p["layout"], handle=handle, algo=algo, out=out,
              alpha=maybe_junk(r, alpha, state), beta=maybe_junk(r, beta, state))
    snaps = [(o, snapshot(o)) for o in (x, dy)]
    clean = state["clean"]
    ok, dw = call(lambda: autodnn.conv2d_backward_weight(x, dy, ws_arg, **kw),
                  params_of(autodnn.conv2d_backward_weight), "conv2d_backward_weight",
                  must_succeed=clean, algo=algo)
    if not (ok and clean):
        return
    for o, s in snaps:
        if not unchanged(o, s):
            raise Mismatch("conv2d_backward_weight modified an input")
    if out is not None and dw is not out:
        raise Mismatch("conv2d_backward_weight did not return out")
    if xv is None or dyv is None:
        return
    with np.errstate(all="ignore"):
        ref = alpha * ref_backward_weight(xv, dyv, ws, p["st"], p["pad"], p["dil"], p["groups"])
        if ov is not None:
            ref = ref + beta * ov
    check_close(f"conv2d_backward_weight algo={algo}", dw, ref, tolerance(algo))


def fuzz_backward_bias(r):
    state = {"clean": True}
    n, k, h, w_ = r.int(1, 3), r.int(1, 9), r.int(1, 8), r.int(1, 8)
    layout = r.pick(["nchw", "nhwc"])
    p = {"layout": layout}
    dy, dyv = activation_input(r, state, p, (n, k, h, w_))
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    alpha = r.pick([1.0, 2.0, -1.0, 0.5])
    beta = r.pick([0.0, 0.0, 1.0, -2.0])
    out, ov = (out_array(r, state, (k,)) if state["clean"] else (None, None))
    if beta != 0.0 and out is None:
        state["clean"] = False
    names = []
    if state["clean"] and r.byte() % 2:
        xs = (n, h, w_, k) if layout == "nhwc" else (n, k, h, w_)
        ok, recs = call(lambda: autodnn.get_algorithms(xs, (k, k, 1, 1), op="backward_bias",
                                                       layout=layout, handle=handle),
                        params_of(autodnn.get_algorithms), "get_algorithms", must_succeed=True)
        names = [rec.name for rec in recs if rec.status == "predicted"]
    algo = pick_algo(r, state, names)
    kw = dict(layout=maybe_junk(r, layout, state), handle=handle, algo=algo, out=out,
              alpha=maybe_junk(r, alpha, state), beta=maybe_junk(r, beta, state))
    clean = state["clean"]
    ok, db = call(lambda: autodnn.conv2d_backward_bias(dy, **kw),
                  params_of(autodnn.conv2d_backward_bias), "conv2d_backward_bias",
                  must_succeed=clean, algo=algo)
    if not (ok and clean) or dyv is None:
        return
    ref = alpha * dyv.sum(axis=(0, 2, 3))
    if ov is not None:
        ref = ref + beta * ov
    check_close(f"conv2d_backward_bias algo={algo}", db, ref, 1e-6)


def pooled(size, k, s, p, ceil):
    """torch's pooled size (the last window starts inside the input or its leading padding)."""
    out = (size + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def ref_max_pool(x, k, st, pad, oh, ow):
    """Each window's first maximum (row-major) and its offset in the plane, x (N, C, H, W)."""
    n, c, h, w = x.shape
    y = np.zeros((n, c, oh, ow))
    ind = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        r0, r1 = max(i * st[0] - pad[0], 0), min(i * st[0] - pad[0] + k[0], h)
        for j in range(ow):
            c0, c1 = max(j * st[1] - pad[1], 0), min(j * st[1] - pad[1] + k[1], w)
            win = x[:, :, r0:r1, c0:c1].reshape(n, c, -1)
            at = win.argmax(axis=2)
            y[:, :, i, j] = np.take_along_axis(win, at[..., None], 2)[..., 0]
            ind[:, :, i, j] = (r0 + at // (c1 - c0)) * w + c0 + at % (c1 - c0)
    return y, ind


def fuzz_max_pool(r):
    """max_pool2d with and without indices, then max_pool2d_backward from its indices."""
    state = {"clean": True}
    n, c, h, w_ = r.int(1, 3), r.pick([1, 3, 8, 16, 20]), r.int(1, 9), r.int(1, 9)
    k = (r.int(1, 4), r.int(1, 4))
    st = (r.int(1, 3), r.int(1, 3))
    pad = (r.int(0, k[0] // 2), r.int(0, k[1] // 2))
    ceil = r.byte() % 2 == 1
    oh, ow = pooled(h, k[0], st[0], pad[0], ceil), pooled(w_, k[1], st[1], pad[1], ceil)
    if oh < 1 or ow < 1 or k[0] > h + 2 * pad[0] or k[1] > w_ + 2 * pad[1]:
        state["clean"] = False
    layout = r.pick(["nchw", "nhwc"])
    p = {"layout": layout}
    x, xv = activation_input(r, state, p, (n, c, h, w_))
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    kw = dict(kernel_size=maybe_junk(r, r.pick([k, list(k)]), state),
              stride=maybe_junk(r, r.pick([st, None if st == k else st]), state),
              padding=maybe_junk(r, r.pick([pad, (pad[0], pad[0], pad[1], pad[1])]), state),
              ceil_mode=maybe_junk(r, ceil, state), layout=maybe_junk(r, layout, state),
              handle=handle)
    snap = snapshot(x)
    clean = state["clean"]
    ok, y = call(lambda: autodnn.max_pool2d(x, **kw), params_of(autodnn.max_pool2d),
                 "max_pool2d", must_succeed=clean)
    ok2, pair = call(lambda: autodnn.max_pool2d(x, return_indices=True, **kw),
                     params_of(autodnn.max_pool2d), "max_pool2d", must_succeed=clean)
    if not (ok and ok2 and clean):
        return
    if not unchanged(x, snap):
        raise Mismatch("max_pool2d modified an input")
    y2, ind = pair
    if xv is None:
        return
    ref, rind = ref_max_pool(xv, k, st, pad, oh, ow)
    check_close("max_pool2d", to_nchw(y, layout), ref, 0.0)
    check_close("max_pool2d (indices)", to_nchw(y2, layout), ref, 0.0)
    # The indices take y's shape (NHWC for layout="nhwc").
    ind_nchw = ind.transpose(0, 3, 1, 2) if layout == "nhwc" and ind.ndim == 4 else ind
    if (ind.dtype != np.uint32 or ind.shape != np.shape(y2)
            or not np.array_equal(ind_nchw, rind)):
        raise Mismatch(f"max_pool2d indices {ind!r}, the reference's {rind!r}")
    ysh = (n, oh, ow, c) if layout == "nhwc" else (n, c, oh, ow)
    dy, dyv = activation_input(r, state, p, (n, c, oh, ow))
    xs = (n, h, w_, c) if layout == "nhwc" else (n, c, h, w_)
    ind_arg = maybe_junk(r, r.pick([ind, ind, ind.astype(np.int64), ind[..., :1]]), state)
    if ind_arg is not ind or dy is None:
        state["clean"] = False
    out, ov = (out_array(r, state, xs) if state["clean"] else (None, None))
    clean = state["clean"]
    ok, dx = call(lambda: autodnn.max_pool2d_backward(dy, ind_arg, xs, out=out, **kw),
                  params_of(autodnn.max_pool2d_backward), "max_pool2d_backward",
                  must_succeed=clean)
    if not (ok and clean) or dyv is None or tuple(np.shape(dy)) != ysh:
        return
    if out is not None and dx is not out:
        raise Mismatch("max_pool2d_backward did not return out")
    ref = np.zeros((n * c, h * w_))
    np.add.at(ref, (np.arange(n * c)[:, None], rind.reshape(n * c, -1)), dyv.reshape(n * c, -1))
    check_close("max_pool2d_backward", to_nchw(dx, layout), ref.reshape(n, c, h, w_), 0.0)


GEMM_DIMS = [1, 2, 3, 4, 5, 1, 7, 8, 9, 16, 17, 33]


def fuzz_gemm(r, batched):
    state = {"clean": True}
    m, n, kk = r.pick(GEMM_DIMS), r.pick(GEMM_DIMS), r.pick(GEMM_DIMS)
    ta, tb = r.byte() % 2 == 1, r.byte() % 2 == 1
    batch = r.int(1, 3) if batched else None
    a_shared = batched and r.byte() % 4 == 1
    b_shared = batched and not a_shared and r.byte() % 4 == 1
    ash = (kk, m) if ta else (m, kk)
    bsh = (n, kk) if tb else (kk, n)
    if batched and not a_shared:
        ash = (batch,) + ash
    if batched and not b_shared:
        bsh = (batch,) + bsh
    a, av, ok1 = make_array(r, ash)
    b, bv, ok2 = make_array(r, bsh)
    state["clean"] &= ok1 and ok2
    handle, hok = get_handle(r, None)
    state["clean"] &= hok
    alpha = r.pick([1.0, 2.0, -1.0, 0.5, 0.0])
    beta = r.pick([0.0, 0.0, 1.0, -2.0])
    csh = (batch, m, n) if batched else (m, n)
    c, cv = (out_array(r, state, csh) if state["clean"] else (None, None))
    if c is None and r.byte() % 8 == 7:
        c = maybe_junk(r, None, state)
    kw = dict(handle=handle, alpha=maybe_junk(r, alpha, state),
              beta=maybe_junk(r, beta, state),
              trans_a=maybe_junk(r, r.pick([ta, int(ta), np.bool_(ta)]), state),
              trans_b=maybe_junk(r, r.pick([tb, int(tb), np.bool_(tb)]), state))
    fn = autodnn.gemm_strided_batched if batched else autodnn.gemm
    snaps = [(o, snapshot(o)) for o in (a, b)]
    clean = state["clean"]
    ok, res = call(lambda: fn(a, b, c, **kw), params_of(fn), fn.__name__, must_succeed=clean)
    if not (ok and clean):
        return
    for o, s in snaps:
        if not unchanged(o, s):
            raise Mismatch(f"{fn.__name__} modified an input")
    if c is not None and res is not c:
        raise Mismatch(f"{fn.__name__} did not return c")
    if av is None or bv is None:
        return
    opa = np.swapaxes(av, -1, -2) if ta else av
    opb = np.swapaxes(bv, -1, -2) if tb else bv
    with np.errstate(all="ignore"):
        ref = alpha * np.matmul(opa, opb)
        if batched:
            ref = np.broadcast_to(ref, csh)
        if cv is not None:
            ref = ref + beta * cv
    check_close(fn.__name__, res, ref, 1e-6)


def fuzz_raw(r):
    """Any function with every argument junk or an odd array."""
    fns = [autodnn.conv2d, autodnn.get_algorithms, autodnn.find_algorithms,
           autodnn.prepare_weights, autodnn.conv2d_backward_data,
           autodnn.conv2d_backward_weight, autodnn.conv2d_backward_bias, autodnn.gemm,
           autodnn.gemm_strided_batched, autodnn.max_pool2d, autodnn.max_pool2d_backward,
           autodnn.set_default_handle]
    fn = r.pick(fns)
    params = inspect.signature(fn).parameters
    kw = {}
    for name, prm in params.items():
        sel = r.byte() % 4
        if sel == 0 and prm.default is not inspect.Parameter.empty:
            continue
        if sel == 1:
            nd = r.int(0, 5)
            shape = tuple(r.pick([0, 1, 2, 3]) for _ in range(nd))
            kw[name] = make_array(r, shape)[0]
        elif sel == 2 and name == "handle":
            kw[name] = get_handle(r, None)[0]
        else:
            kw[name] = junk_value(r)
    if fn is autodnn.set_default_handle:
        # Never a valid handle or None: the harness's default handle stays.
        kw = {"handle": r.pick([5, "handle", object(), np.zeros(1)])}
    call(lambda: fn(**kw), set(params), fn.__name__)


OPS = [fuzz_conv2d, fuzz_backward_data, fuzz_backward_weight, fuzz_backward_bias,
       lambda r: fuzz_gemm(r, False), lambda r: fuzz_gemm(r, True), fuzz_queries,
       fuzz_handle, fuzz_raw, fuzz_max_pool]

_SETUP = []


def _setup():
    if not _SETUP:
        # The default handle (handle=None) of the harness: one thread, no timing.
        autodnn.set_default_handle(autodnn.Handle(threads=1, policy="heuristic"))
        _SETUP.append(True)


def one_input(data):
    _setup()
    r = Reader(bytes(data))
    r.pick(OPS)(r)


if __name__ == "__main__":
    import os

    import atheris

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with atheris.instrument_imports(include=["autodnn", "functional"]):
        import functional  # this file as a module, instrumented
    atheris.Setup(sys.argv, functional.one_input)
    atheris.Fuzz()
