#!/usr/bin/env python3
"""Table of bench/training.sh's results: per model, thread count and direction, the median
over rounds of autodnn's and PyTorch's weighted totals, and their ratio."""
import json
import statistics
import sys

out, rounds = sys.argv[1], int(sys.argv[2])
models = sys.argv[3:] or ["resnet50", "mobilenet_v1"]
print(f"{'model':13s} {'T':>2s} {'dir':6s} {'autodnn ms':>11s} {'torch ms':>10s} {'ratio':>6s}")
for model in models:
    for t in [1, 2]:
        ours = {d: [] for d in ["fwd", "bwd_d", "bwd_w", "all"]}
        theirs = {d: [] for d in ours}
        for i in range(1, rounds + 1):
            for line in open(f"{out}/autodnn_{model}_{t}_{i}.jsonl"):
                e = json.loads(line)
                if e.get("total"):
                    ours[e["dir"]].append(e["ms_weighted"])
            step = 0.0
            for d in ["fwd", "bwd_d", "bwd_w"]:
                ms = json.load(open(f"{out}/torch_{model}_{t}_{d}_{i}.json"))["ms_weighted"]
                theirs[d].append(ms)
                step += ms
            theirs["all"].append(step)
        for d in ["fwd", "bwd_d", "bwd_w", "all"]:
            a, b = statistics.median(ours[d]), statistics.median(theirs[d])
            print(f"{model:13s} {t:2d} {d:6s} {a:11.1f} {b:10.1f} {a / b:6.2f}")
