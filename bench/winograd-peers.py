#!/usr/bin/env python3
"""ResNet-50's 3x3 layers (or any list of problems): the Winograd algorithms, plain and with
prepared weights, against ncnn (Winograd) and onnxruntime, measured in one run.

Each round runs every engine once on every layer (autodnn: the `conv` command's median of
--reps calls; peers: peer_conv.py's median), rounds interleaved so that a noisy machine
affects all engines alike; the table shows, per layer, the median over rounds (and the
minimum) in ms and effective GFLOP/s (direct-definition flops / time), then totals weighted
by each layer's count.

    source "$(bench/peers/setup.sh)"
    cargo build --release --bin autodnn
    python3 bench/winograd-peers.py [--rounds 5] [--threads 1] [--mb 1] [--layout nchw] [FILE]

FILE defaults to the branch2b (3x3) lines of crates/autodnn/data/shapes/shapes_resnet_50.
Needs the peers' Python environment (numpy, onnxruntime, ncnn) active; not run by CI.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ["winograd_2x2", "winograd_4x4", "winograd_6x6"]


def layers_file(path):
    if path:
        return path
    src = os.path.join(ROOT, "crates/autodnn/data/shapes/shapes_resnet_50")
    lines = [l for l in open(src) if "branch2b" in l]
    f = tempfile.NamedTemporaryFile("w", suffix="_r50_3x3", delete=False)
    f.writelines(lines)
    f.close()
    return f.name


def count_of(name):
    return int(name.rsplit("*", 1)[1]) if name and "*" in name else 1


def layer_name(problem):
    """The name a problem string carries (n"NAME"), else the string itself."""
    if 'n"' in problem:
        return problem.split('n"', 1)[1].rstrip('"')
    return problem


def run_autodnn(binary, problems, args, prepared):
    cmd = [binary, "conv", "--json", "--threads", str(args.threads), "--mb", str(args.mb),
           "--layout", args.layout, "--reps", str(args.reps), "--algo", ",".join(ALGOS)]
    if prepared:
        cmd.append("--prepared")
    out = subprocess.run(cmd + [problems], capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        if d.get("total"):
            continue
        for r in d["results"]:
            if r["status"] == "ok":
                res[(layer_name(d["problem"]), r["algo"])] = (r["ms"], d["flops"])
    return res


def run_peer(engine, problems, args):
    cmd = [sys.executable, args.peer, "--engine", engine, "--threads", str(args.threads),
           "--mb", str(args.mb), problems]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        if d.get("total"):
            continue
        res[d.get("name") or layer_name(d["problem"])] = d["ms_median"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mb", type=int, default=1)
    ap.add_argument("--layout", default="nchw")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/autodnn"))
    ap.add_argument("--peer", default=os.path.join(ROOT, "bench", "peers", "peer_conv.py"))
    args = ap.parse_args()
    problems = layers_file(args.file)

    samples = {}  # (layer, column) -> [ms]
    flops = {}
    for _ in range(args.rounds):
        for prepared in (False, True):
            for (layer, algo), (ms, fl) in run_autodnn(args.binary, problems, args,
                                                       prepared).items():
                col = algo + (" prep" if prepared else "")
                samples.setdefault((layer, col), []).append(ms)
                flops[layer] = fl
        for engine in ("ncnn", "ort"):
            for layer, ms in run_peer(engine, problems, args).items():
                samples.setdefault((layer, engine), []).append(ms)

    cols = [a + s for s in ("", " prep") for a in ALGOS] + ["ncnn", "ort"]
    layers = sorted(flops, key=lambda l: -flops[l])
    print(f"threads {args.threads}, mb {args.mb}, {args.layout}, {args.rounds} rounds: "
          "median ms (min) / effective GFLOP/s of the median")
    print(f"{'layer':34}" + "".join(f"{c:>22}" for c in cols))
    totals = {c: 0.0 for c in cols}
    for layer in layers:
        row = f"{layer[-34:]:34}"
        for c in cols:
            v = samples.get((layer, c))
            if not v:
                row += f"{'-':>22}"
                continue
            med = statistics.median(v)
            totals[c] += med * count_of(layer)
            row += f"{med:8.3f} ({min(v):6.3f}) {flops[layer] / med / 1e6:5.0f}"
        print(row)
    print(f"{'total (weighted by count)':34}" + "".join(f"{totals[c]:14.3f}{'':8}" for c in cols))
    best = {}
    for layer in layers:
        ours = [(statistics.median(samples[(layer, c)]), c) for c in cols[:6]
                if (layer, c) in samples and c.endswith("prep")]
        best[layer] = min(ours)
    tot = sum(ms * count_of(l) for l, (ms, _) in best.items())
    print("fastest Winograd with prepared weights per layer: "
          + ", ".join(f"{l.split(':')[-1]} {c} {ms:.3f}" for l, (ms, c) in best.items())
          + f"; total {tot:.3f} ms vs ncnn {totals['ncnn']:.3f} ({totals['ncnn'] / tot:.2f}x), "
          f"ort {totals['ort']:.3f} ({totals['ort'] / tot:.2f}x)")


if __name__ == "__main__":
    main()
