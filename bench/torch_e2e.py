#!/usr/bin/env python3
"""autodnn inside PyTorch, against PyTorch's own CPU path in the same run.

- Inference, eval mode, batch 1: ResNet-50 and MobileNet v2 end to end,
  `autodnn.torch.convert(model, inference=True)` vs the unconverted model.
- A training step (forward, backward, SGD update), batch 8, ResNet-50: autodnn convolutions
  (`convert(model)`) vs PyTorch's.
- The Python call's overhead over the Rust call on a 1x1, 64-channel, 7x7 convolution: a
  call of `autodnn.conv2d(x, w, out=y)` against the same Rust call looped in Rust.

Each figure is the median of several runs, the two sides interleaved. Thread counts are set
for both libraries (torch.set_num_threads and the autodnn handle). The autodnn handle runs
its parallel work on PyTorch's own OpenMP team (`Handle(threading="openmp")`, the default
here); `--threading own` gives it threads of its own instead. `--torch-threads N` runs
PyTorch's own operators (batch norm, pooling, the loss, ...) on N threads on the autodnn
side only (default: as many as autodnn's): on a machine with as many cores as threads,
PyTorch's OpenMP workers spin-wait between operators and take the cores autodnn's workers
need. Nothing is downloaded (random weights).

    python bench/torch_e2e.py                # 224x224, 1 and 2 threads
    python bench/torch_e2e.py --size 64 --runs 3 --threads 1   # a quick check
"""

import argparse
import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

import autodnn
import autodnn.torch as at


def median_ms(fn, runs):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def interleaved(fa, fb, runs):
    """Medians of fa and fb, run alternately (after one warm-up each)."""
    fa()
    fb()
    ta, tb = [], []
    for _ in range(runs):
        ta.append(median_ms(fa, 1))
        tb.append(median_ms(fb, 1))
    return statistics.median(ta), statistics.median(tb)


def with_torch_threads(fn, n):
    """fn run with PyTorch's operators on n threads (None: unchanged)."""
    if n is None:
        return fn

    def run():
        old = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            fn()
        finally:
            torch.set_num_threads(old)
    return run


def inference(name, size, threads, runs, handle, torch_threads=None):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    a = at.convert(copy.deepcopy(m), inference=True, handle=handle)
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        a(x)  # selection (timed once per layer, then cached)
        tt, ta = interleaved(lambda: m(x), with_torch_threads(lambda: a(x), torch_threads), runs)
    return tt, ta


def training(size, threads, runs, handle, batch=8, torch_threads=None):
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None).train()
    a = at.convert(copy.deepcopy(m), handle=handle)
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 1000, (batch,))

    def step(net, opt):
        def run():
            opt.zero_grad()
            F.cross_entropy(net(x), labels).backward()
            opt.step()
        return run

    om = torch.optim.SGD(m.parameters(), lr=1e-3)
    oa = torch.optim.SGD(a.parameters(), lr=1e-3)
    step(a, oa)()  # selection of every direction's algorithm
    return interleaved(step(m, om), with_torch_threads(step(a, oa), torch_threads), runs)


def overhead_us(handle, reps=20000):
    """The Python call's overhead on y = conv1x1(x), 64 -> 64 channels at 7x7, batch 1: the
    time per call of autodnn.conv2d(x, w, out=y) minus that of the same Rust call looped in
    Rust (best of 5 rounds each, interleaved)."""
    from autodnn import _autodnn as ext
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    out = np.empty((1, 64, 7, 7), np.float32)
    conv = autodnn.conv2d
    for _ in range(200):
        conv(x, w, out=out, handle=handle)
    py_best = rust_best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            conv(x, w, out=out, handle=handle)
        py_best = min(py_best, (time.perf_counter() - t) / reps)
        rust_best = min(rust_best, ext.rust_conv_seconds(handle, x, w, out, reps))
    return py_best * 1e6, rust_best * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--cache", default=None, help="tuning cache file (default: in memory)")
    ap.add_argument("--threading", choices=["openmp", "own"], default="openmp",
                    help="the autodnn handle's threads: PyTorch's OpenMP team, or its own")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="PyTorch's threads on the autodnn side (default: the same count)")
    args = ap.parse_args()

    rows = []
    for t in args.threads:
        torch.set_num_threads(t)
        h = autodnn.Handle(threads=t, cache=args.cache, threading=args.threading)
        for name in ("resnet50", "mobilenet_v2"):
            tt, ta = inference(name, args.size, t, args.runs, h, args.torch_threads)
            rows.append((f"{name} inference b1 {args.size}px", t, tt, ta))
        if not args.skip_training:
            tt, ta = training(args.size, t, max(3, args.runs // 2), h,
                              torch_threads=args.torch_threads)
            rows.append((f"resnet50 train step b8 {args.size}px", t, tt, ta))
        h.save_cache()

    h = autodnn.Handle(threads=1)
    py_us, rust_us = overhead_us(h)

    print(f"{'case':<36} {'thr':>3} {'pytorch ms':>11} {'autodnn ms':>11} {'ratio':>6}")
    for case, t, tt, ta in rows:
        print(f"{case:<36} {t:>3} {tt:>11.2f} {ta:>11.2f} {ta / tt:>6.2f}")
    print(f"1x1 64ch 7x7 conv, 1 thread: python call {py_us:.2f} us, rust call {rust_us:.2f} us, "
          f"overhead {py_us - rust_us:.2f} us (target < 5 us)")


if __name__ == "__main__":
    main()
