#!/usr/bin/env python3
"""autodnn inside PyTorch, against PyTorch's own CPU path in the same run.

- Inference, eval mode, batch 1: ResNet-50 and MobileNet v2 end to end,
  `autodnn.torch.convert(model, inference=True)` vs the unconverted model.
- A training step (forward, backward, SGD update), batch 8, ResNet-50: autodnn convolutions
  (`convert(model)`) vs PyTorch's.
- The Python call's overhead over the Rust call on a 1x1, 64-channel, 7x7 convolution,
  estimated from two batch sizes: a call on batch 1 costs overhead + c, one on batch 16
  overhead + 16 c (the compute scales with the batch), so overhead = (16 t1 - t16) / 15.

Each figure is the median of several runs, the two sides interleaved. Thread counts are set
for both libraries (torch.set_num_threads and the autodnn handle). Nothing is downloaded
(random weights).

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


def inference(name, size, threads, runs, handle):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    a = at.convert(copy.deepcopy(m), inference=True, handle=handle)
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        a(x)  # selection (timed once per layer, then cached)
        tt, ta = interleaved(lambda: m(x), lambda: a(x), runs)
    return tt, ta


def training(size, threads, runs, handle, batch=8):
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
    return interleaved(step(m, om), step(a, oa), runs)


def overhead_us(handle, reps=2000):
    """Python call overhead on y = conv1x1(x), 64 -> 64 channels at 7x7: the time of one
    call minus the same call's compute, the compute estimated from one call on a batch of 16
    (per image)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 1, 1)).astype(np.float32)
    x1 = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    x16 = rng.standard_normal((16, 64, 7, 7)).astype(np.float32)
    out1 = np.empty((1, 64, 7, 7), np.float32)
    out16 = np.empty((16, 64, 7, 7), np.float32)
    for x, o in ((x1, out1), (x16, out16)):
        for _ in range(50):
            autodnn.conv2d(x, w, out=o, handle=handle)

    def per_call(x, o, n):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                autodnn.conv2d(x, w, out=o, handle=handle)
            best = min(best, (time.perf_counter() - t) / n)
        return best * 1e6

    one = per_call(x1, out1, reps)
    sixteen = per_call(x16, out16, reps // 8)
    # one = overhead + c, sixteen = overhead + 16 c  =>  overhead = (16 one - sixteen) / 15
    return one, (16 * one - sixteen) / 15


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--cache", default=None, help="tuning cache file (default: in memory)")
    args = ap.parse_args()

    rows = []
    for t in args.threads:
        torch.set_num_threads(t)
        h = autodnn.Handle(threads=t, cache=args.cache)
        for name in ("resnet50", "mobilenet_v2"):
            tt, ta = inference(name, args.size, t, args.runs, h)
            rows.append((f"{name} inference b1 {args.size}px", t, tt, ta))
        if not args.skip_training:
            tt, ta = training(args.size, t, max(3, args.runs // 2), h)
            rows.append((f"resnet50 train step b8 {args.size}px", t, tt, ta))
        h.save_cache()

    h = autodnn.Handle(threads=1)
    one, ov = overhead_us(h)

    print(f"{'case':<36} {'thr':>3} {'pytorch ms':>11} {'autodnn ms':>11} {'ratio':>6}")
    for case, t, tt, ta in rows:
        print(f"{case:<36} {t:>3} {tt:>11.2f} {ta:>11.2f} {ta / tt:>6.2f}")
    print(f"python call, 1x1 64ch 7x7 conv: {one:.2f} us per call, "
          f"estimated overhead over the Rust call {ov:.2f} us (target < 5 us)")


if __name__ == "__main__":
    main()
