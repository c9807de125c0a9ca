#!/usr/bin/env python3
"""The operators beside convolution against PyTorch's CPU operators, in one run.

For each case (ResNet-50's activation shapes at batch 8 by default) it times `autodnn op`
(median of --reps calls) and the same PyTorch operator (median of as many calls, after a
warm-up), on the same thread count, and prints autodnn's ms and GB/s, the fraction of the copy
bandwidth measured in the same run (`autodnn peak --memory`), PyTorch's ms and the ratio
autodnn / PyTorch. Rounds are interleaved; medians over rounds are reported.

    source "$(bench/peers/setup.sh)"          # PyTorch
    cargo build --release --bin autodnn
    python3 bench/ops-peers.py [--threads 1] [--rounds 3] [--reps 20] [--only TEXT] [--json]

Not run by CI.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "autodnn")

# (op, problem, extra autodnn flags, label)
CASES = [
    ("act", "8x64x112x112", ["--alg", "relu"], "relu fwd"),
    ("act", "8x256x56x56", ["--alg", "relu"], "relu fwd"),
    ("act", "8x256x56x56", ["--alg", "relu", "--dir", "bwd"], "relu bwd"),
    ("act", "8x256x56x56", ["--alg", "gelu_erf"], "gelu fwd"),
    ("act", "8x256x56x56", ["--alg", "silu"], "silu fwd"),
    ("tensor", "8x256x56x56:1x256x1x1", ["--alg", "add_tensor", "--beta", "1"], "bias add (in place)"),
    ("tensor", "8x256x56x56:8x256x56x56", ["--alg", "add"], "add (residual)"),
    ("transform", "8x256x56x56", ["--to", "nhwc"], "nchw->nhwc"),
    ("bnorm", "mb8ic256ih56", ["--dir", "fwd_i"], "bnorm inference"),
    ("bnorm", "mb8ic256ih56", ["--dir", "fwd"], "bnorm training fwd"),
    ("bnorm", "mb8ic256ih56", ["--dir", "bwd"], "bnorm bwd"),
    ("pool", "mb8ic64ih112oh56kh3sh2ph1", ["--alg", "max", "--dir", "fwd_i"], "max pool fwd (inference)"),
    ("pool", "mb8ic64ih112oh56kh3sh2ph1", ["--alg", "max", "--dir", "fwd"], "max pool fwd (training, indices)"),
    ("pool", "mb8ic64ih112oh56kh3sh2ph1", ["--alg", "max", "--dir", "bwd"], "max pool bwd (from indices)"),
    ("pool", "mb8ic64ih112oh56kh3sh2ph1", ["--alg", "max", "--dir", "fwd", "--layout", "nhwc"], "max pool fwd (training, NHWC)"),
    ("pool", "mb8ic64ih112oh56kh3sh2ph1", ["--alg", "max", "--dir", "bwd", "--layout", "nhwc"], "max pool bwd (NHWC)"),
    ("pool", "mb8ic2048ih7kh7", ["--alg", "avg_np"], "global avg pool"),
    ("softmax", "8x1000", ["--alg", "softmax"], "softmax fwd"),
    ("softmax", "8x1000", ["--alg", "softmax", "--dir", "bwd"], "softmax bwd"),
    ("softmax", "8x21x64x64", ["--alg", "softmax"], "softmax channel fwd"),
    ("lnorm", "8x256x56x56", [], "layer norm fwd"),
]


def dims(s):
    return [int(v) for v in s.split("x")] + [1] * (4 - len(s.split("x")))


def torch_case(torch, op, problem, flags):
    """A callable running PyTorch's operator on fresh tensors of the case's shapes."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    alg = flags[flags.index("--alg") + 1] if "--alg" in flags else None
    direction = flags[flags.index("--dir") + 1] if "--dir" in flags else "fwd"
    bwd = direction == "bwd"
    if op == "act":
        x = rnd(*dims(problem))
        if bwd:
            dy = rnd(*x.shape)
            return lambda: torch.ops.aten.threshold_backward(dy, x, 0.0)
        f = {"relu": torch.relu, "gelu_erf": F.gelu, "silu": F.silu}[alg]
        return lambda: f(x)
    if op == "tensor":
        a, b = problem.split(":")
        x, y = rnd(*dims(a)), rnd(*dims(b))
        if alg == "add_tensor":
            return lambda: x.add_(y)
        return lambda: torch.add(x, y)
    if op == "transform":
        x = rnd(*dims(problem))
        return lambda: x.contiguous(memory_format=torch.channels_last)
    if op == "bnorm":
        n, c, h = [int(v) for v in problem.replace("mb", " ").replace("ic", " ").replace("ih", " ").split()]
        x = rnd(n, c, h, h)
        w, b, rm, rv = rnd(c), rnd(c), rnd(c), torch.rand(c, generator=g) + 0.5
        d = flags[flags.index("--dir") + 1]
        if d == "fwd_i":
            return lambda: F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5)
        if d == "fwd":
            return lambda: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
        _, sm, si = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        dy = rnd(*x.shape)
        return lambda: torch.ops.aten.native_batch_norm_backward(
            dy, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True])
    if op == "pool":
        if problem == "mb8ic64ih112oh56kh3sh2ph1":
            x = rnd(8, 64, 112, 112)
            if "nhwc" in flags:
                x = x.contiguous(memory_format=torch.channels_last)
            if bwd:
                y, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
                dy = rnd(*y.shape).contiguous(memory_format=torch.channels_last if "nhwc" in flags else torch.contiguous_format)
                return lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                    dy, x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
            if direction == "fwd":
                return lambda: F.max_pool2d(x, 3, 2, 1, return_indices=True)
            return lambda: F.max_pool2d(x, 3, 2, 1)
        x = rnd(8, 2048, 7, 7)
        return lambda: F.adaptive_avg_pool2d(x, 1)
    if op == "softmax":
        x = rnd(*dims(problem))
        if bwd:
            y = torch.softmax(x, 1)
            dy = rnd(*x.shape)
            return lambda: torch.ops.aten._softmax_backward_data(dy, y, 1, torch.float32)
        return lambda: torch.softmax(x, 1)
    if op == "lnorm":
        x = rnd(*dims(problem))
        shape = list(x.shape[1:])
        w, b = rnd(*shape), rnd(*shape)
        return lambda: F.layer_norm(x, shape, w, b, 1e-5)
    raise ValueError(op)


def time_torch(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def autodnn_row(op, problem, flags, threads, reps):
    out = subprocess.run(
        [BIN, "op", op, problem, *flags, "--threads", str(threads), "--reps", str(reps), "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="", help="only the cases whose label contains this text")
    a = ap.parse_args()
    keep = [c for c in CASES if a.only in c[3]]
    CASES[:] = keep
    import torch
    torch.set_num_threads(a.threads)
    ours, theirs, gbps, copy = {}, {}, {}, []
    fns = {i: torch_case(torch, op, p, f) for i, (op, p, f, _) in enumerate(CASES)}
    for _ in range(a.rounds):
        peak = subprocess.run([BIN, "peak", "--memory", "--threads", str(a.threads), "--json"],
                              check=True, capture_output=True, text=True).stdout
        copy.append(json.loads(peak)["gbps"])
        for i, (op, p, f, _) in enumerate(CASES):
            r = autodnn_row(op, p, f, a.threads, a.reps)
            ours.setdefault(i, []).append(r["ms"])
            gbps.setdefault(i, []).append(r["gbps"])
            theirs.setdefault(i, []).append(time_torch(fns[i], a.reps))
    bw = statistics.median(copy)
    print(f"{a.threads} thread(s), medians of {a.rounds} rounds; copy bandwidth {bw:.1f} GB/s; "
          f"PyTorch {torch.__version__}")
    print(f"{'case':22s} {'problem':28s} {'autodnn ms':>10s} {'GB/s':>7s} {'of copy':>7s} "
          f"{'torch ms':>9s} {'ratio':>6s}")
    for i, (op, p, f, label) in enumerate(CASES):
        m, t, g = (statistics.median(ours[i]), statistics.median(theirs[i]),
                   statistics.median(gbps[i]))
        row = dict(case=label, problem=p, threads=a.threads, autodnn_ms=m, gbps=g,
                   of_copy=g / bw, torch_ms=t, ratio=m / t)
        if a.json:
            print(json.dumps(row))
        else:
            print(f"{label:22s} {p:28s} {m:10.3f} {g:7.1f} {g / bw:7.0%} {t:9.3f} {m / t:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
