#!/usr/bin/env python3
"""Selection policies against `exhaustive`, measured in one run, for one built-in model.

1. `autodnn tune --policy exhaustive` with a fresh cache: every candidate's median (10 runs)
   lands in that cache and is the yardstick;
2. `--policy heuristic` with the shipped cost model, then `autodnn calibrate` beside a fresh
   cache and `--policy heuristic` again with the fitted model;
3. `--policy benchmark` (racing) with a fresh cache, then again on the same cache.

For each policy: how many layers' picks are within 3 % of the exhaustive winner's time, the
network total of the picks' exhaustive times against the winners', the tuning time and
cache hits.

    cargo build --release --bin autodnn
    python3 bench/selection.py [--model resnet50] [--threads 1] [--mb 1] [--dir fwd]
                               [--prepared] [--policies heuristic,calibrated,benchmark]
                               [--workdir DIR] [--cost-model FILE]

`--dir` (fwd, bwd_d, bwd_w) picks the operation whose selection is measured; `--prepared`
measures selection for calls with prepared weights (every policy, exhaustive included, with
`tune --prepared`); `--policies` keeps some of the policies (`benchmark` alone skips the
calibration). `--workdir DIR` keeps the caches there (a second run reads `exhaustive`'s
from its cache and times nothing for it; the policies' caches start fresh each run);
`--cost-model FILE` has `calibrated` use that fit instead of running `autodnn calibrate`.
Each intent's race on every built-in model:

    for m in resnet50 googlenet_v1 vgg11 alexnet mobilenet_v1 yolov2; do
      python3 bench/selection.py --model $m --policies benchmark
      python3 bench/selection.py --model $m --policies benchmark --prepared
    done

Run it on an idle machine: timings taken while other work runs pick noise.

Not run by CI.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("AUTODNN_BIN", os.path.join(ROOT, "target", "release", "autodnn"))
WITHIN = 1.03


OPS = {"fwd": "conv_forward", "bwd_d": "conv_backward_data", "bwd_w": "conv_backward_filter"}
ARGS = None


def tune(model, threads, policy, cache):
    out = subprocess.run(
        [BIN, "tune", "--model", model, "--threads", threads, "--policy", policy,
         "--cache", cache, "--mb", ARGS.mb, "--dir", ARGS.dir, "--json"]
        + (["--prepared"] if ARGS.prepared else []),
        capture_output=True, text=True, check=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return lines[:-1], lines[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--mb", default="1")
    ap.add_argument("--dir", default="fwd", choices=sorted(OPS))
    ap.add_argument("--prepared", action="store_true")
    ap.add_argument("--policies", default="heuristic,calibrated,benchmark")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--cost-model", default=None)
    global ARGS
    args = ARGS = ap.parse_args()
    tmp = args.workdir or tempfile.mkdtemp(prefix="autodnn-selection-")
    try:
        dirs = {d: os.path.join(tmp, d) for d in ["ex", "shipped", "fitted", "bench"]}
        for name, d in dirs.items():
            if name != "ex":
                shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d, exist_ok=True)
        cache = {d: os.path.join(p, "tuning.json") for d, p in dirs.items()}
        # A kept exhaustive cache is read back (`cached_only` times nothing); its first
        # run's tuning time stays the yardstick.
        first = os.path.join(dirs["ex"], "first_total.json")
        if os.path.exists(first):
            ex_layers, ex_total = tune(args.model, args.threads, "cached_only", cache["ex"])
            with open(first) as f:
                ex_total["tuning_ms"] = json.load(f)["tuning_ms"]
        else:
            ex_layers, ex_total = tune(args.model, args.threads, "exhaustive", cache["ex"])
            with open(first, "w") as f:
                json.dump(ex_total, f)
        # Every candidate's exhaustive median, by canonical problem (the cache lists them
        # without the layer names that `tune` adds after `n`).
        shown = subprocess.run([BIN, "cache", "show", "--cache", cache["ex"], "--json"],
                               capture_output=True, text=True, check=True).stdout
        records = {}
        for line in shown.splitlines():
            e = json.loads(line)
            if e.get("op", "conv_forward") != OPS[args.dir]:
                continue
            records[e["problem"]] = {r["algo"]: r["ms"] for r in e["records"]
                                     if r["status"] == "ok"}
        per_layer = [records[layer["problem"].split('n"')[0]] for layer in ex_layers]
        wanted = set(args.policies.split(","))
        results = []
        if "heuristic" in wanted:
            results.append(("heuristic (shipped)",
                            *tune(args.model, args.threads, "heuristic", cache["shipped"])))
        if "calibrated" in wanted:
            fitted = os.path.join(dirs["fitted"], "cost_model.json")
            if args.cost_model:
                shutil.copyfile(args.cost_model, fitted)
            else:
                subprocess.run([BIN, "calibrate", "--threads", args.threads, "--out", fitted],
                               capture_output=True, check=True)
            results.append(("heuristic (calibrated)",
                            *tune(args.model, args.threads, "heuristic", cache["fitted"])))
        if "benchmark" in wanted:
            results.append(("benchmark", *tune(args.model, args.threads, "benchmark",
                                               cache["bench"])))
            results.append(("benchmark, 2nd run", *tune(args.model, args.threads, "benchmark",
                                                        cache["bench"])))
        intent = ", prepared weights" if args.prepared else ""
        print(f"model {args.model}, batch {args.mb}, {args.dir}{intent}, {args.threads} thread(s); "
              f"exhaustive: "
              f"{ex_total['total_ms']:.2f} ms, tuning {ex_total['tuning_ms']:.0f} ms")
        for name, layers, total in results:
            within, picked, best, misses = 0, 0.0, 0.0, []
            for layer, recs in zip(layers, per_layer):
                fastest = min(recs.values())
                mine = recs.get(layer["algo"], float("inf"))
                within += mine <= fastest * WITHIN
                picked += mine * layer["count"]
                best += fastest * layer["count"]
                if mine > fastest * WITHIN:
                    misses.append(f"    {layer['problem'].split(chr(34))[1]}: {layer['algo']} "
                                  f"{mine / fastest:.3f}x the winner")
            print(f"{name:24s} within 3%: {within}/{len(layers)}, total {picked / best:.3f}x "
                  f"exhaustive's, tuning {total['tuning_ms']:.1f} ms "
                  f"({total['tuning_ms'] / ex_total['tuning_ms']:.2f} of exhaustive's), "
                  f"cache hits {total['cache_hits']}")
            for miss in misses:
                print(miss)
    finally:
        if not args.workdir:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
