#!/usr/bin/env python3
"""ResNet-50's whole forward pass: autodnn alone (`examples/resnet50`) against PyTorch
(eval mode, `torch.no_grad()`) and onnxruntime on the exported ONNX model, in one run.

Exports the model once (`scripts/export_resnet50.py`: seeded random weights, non-trivial
BatchNorm statistics), builds the example, then for each thread count and batch runs rounds
of the three, interleaved, each in its own process (so that no library's idle worker threads
take the cores of the next): the median time of a forward pass over --reps runs after a
warm-up, per round; the table reports the median over rounds and the ratios autodnn /
onnxruntime and autodnn / PyTorch (target: at most 0.7 for both).

    source "$(bench/peers/setup.sh)"     # torch, torchvision, onnx, onnxruntime
    python3 bench/resnet50-e2e.py [--threads 1,2] [--mb 1] [--rounds 3] [--reps 20]
                                  [--dir DIR] [--skip-export] [--json]

onnxruntime: `intra_op_num_threads=T`, `inter_op_num_threads=1`, sequential execution, all
graph optimisations. PyTorch: `torch.set_num_threads(T)`. autodnn: `--threads T`, NCHW,
the handle's default selection (benchmark policy), prepared weights. Not run by CI.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "target", "release", "examples", "resnet50")


def median_ms(fn, reps):
    fn()  # warm-up
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def rel_err(a, t):
    import numpy as np

    return float(np.abs(a - t).max() / np.abs(t).max())


def worker(args):
    """One library's median in this process; prints a JSON line."""
    import numpy as np

    x = np.load(os.path.join(args.dir, "input.npy"))[: args.mb].copy()
    ref = np.load(os.path.join(args.dir, "torch_logits.npy"))[: args.mb]
    if args.worker == "torch":
        import torch
        import torchvision

        torch.set_num_threads(args.threads)
        model = torchvision.models.resnet50(weights=None)
        model.load_state_dict(torch.load(os.path.join(args.dir, "resnet50_state.pt")))
        model.eval()
        xt = torch.from_numpy(x)
        with torch.no_grad():
            out = model(xt).numpy()
            ms = median_ms(lambda: model(xt), args.reps)
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(
            os.path.join(args.dir, "resnet50.onnx"), so, providers=["CPUExecutionProvider"]
        )
        feed = {"input": x}
        out = sess.run(None, feed)[0]
        ms = median_ms(lambda: sess.run(None, feed), args.reps)
    print(json.dumps({"ms": ms, "rel_err_logits": rel_err(out, ref)}))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--mb", default="1", help="batch sizes, comma-separated (e.g. 1,8)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dir", default="/tmp/autodnn-resnet50")
    ap.add_argument("--skip-export", action="store_true", help="reuse DIR's export")
    ap.add_argument("--json", action="store_true", help="also print the rows as JSON lines")
    ap.add_argument("--worker", choices=["torch", "ort"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, dest="wthreads", help=argparse.SUPPRESS)
    ap.add_argument("--worker-mb", type=int, dest="wmb", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.threads, args.mb = args.wthreads, args.wmb
        return worker(args)

    threads = [int(t) for t in args.threads.split(",")]
    mbs = [int(m) for m in args.mb.split(",")]
    if not args.skip_export:
        subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", "export_resnet50.py"), args.dir,
             "--mb", str(max(mbs))],
            check=True,
        )
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "autodnn", "--example", "resnet50"],
        check=True,
        cwd=ROOT,
    )
    rows = []
    for mb in mbs:
        for t in threads:
            res = {"autodnn": [], "pytorch": [], "onnxruntime": []}
            err = {}
            for r in range(args.rounds):
                a = run_json([EXAMPLE, args.dir, "--threads", str(t), "--reps", str(args.reps),
                              "--mb", str(mb), "--json"])
                res["autodnn"].append(a["ms"])
                err["autodnn"] = a["rel_err_logits"]
                err["top1"] = f'{a["top1_agree"]}/{mb}'
                for name, w in (("pytorch", "torch"), ("onnxruntime", "ort")):
                    o = run_json([sys.executable, os.path.abspath(__file__), "--dir", args.dir,
                                  "--reps", str(args.reps), "--worker", w,
                                  "--worker-threads", str(t), "--worker-mb", str(mb)])
                    res[name].append(o["ms"])
                    err[name] = o["rel_err_logits"]
                print(f"# mb {mb}, {t} threads, round {r + 1}: "
                      + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in res.items()),
                      file=sys.stderr, flush=True)
            med = {k: statistics.median(v) for k, v in res.items()}
            rows.append({"mb": mb, "threads": t, **{f"{k}_ms": v for k, v in med.items()},
                         "vs_ort": med["autodnn"] / med["onnxruntime"],
                         "vs_pytorch": med["autodnn"] / med["pytorch"],
                         "rel_err_logits": err, "rounds": args.rounds, "reps": args.reps})
    print(f"\nResNet-50 forward pass, medians of {args.rounds} interleaved rounds of {args.reps} "
          "runs; ms (target: autodnn <= 0.7x both)")
    print("| batch | threads | autodnn | PyTorch | onnxruntime | autodnn/ort | autodnn/PyTorch "
          "| met |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        met = "yes" if r["vs_ort"] <= 0.7 and r["vs_pytorch"] <= 0.7 else "no"
        print(f'| {r["mb"]} | {r["threads"]} | {r["autodnn_ms"]:.1f} | {r["pytorch_ms"]:.1f} | '
              f'{r["onnxruntime_ms"]:.1f} | {r["vs_ort"]:.2f} | {r["vs_pytorch"]:.2f} | {met} |')
    e = rows[-1]["rel_err_logits"]
    print(f"max rel error of the logits vs PyTorch's export: autodnn {e['autodnn']:.2e}, "
          f"onnxruntime {e['onnxruntime']:.2e}, PyTorch rerun {e['pytorch']:.2e}; autodnn top-1 "
          f"{e['top1']}")
    if args.json:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
