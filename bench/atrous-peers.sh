#!/usr/bin/env bash
# Dilated (atrous) convolutions against onnxruntime, batch 1, in one run (rounds interleaved):
# per layer of bench/shapes/atrous_3x3, and in total over benchdnn's
# shapes_dilated_2d_strided_padding, autodnn's time as `tune --prepared` chose it (tuned once
# into a fresh cache, then each round times the cached choices), the best algorithm per layer
# with prepared weights (`conv --prepared`), and onnxruntime's; medians over rounds.
#
#   source "$(bench/peers/setup.sh)"      # numpy, onnxruntime, ncnn
#   cargo build --release --bin autodnn
#   bench/atrous-peers.sh [ROUNDS=5] [THREADS=1]
#
# Target (issue 18): at most 0.8x onnxruntime's time. Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-5}; T=${2:-1}
PEERS="${PEERS:-$ROOT/bench/peers/peer_conv.py}"
BIN="$ROOT/target/release/autodnn"
OUT=$(mktemp -d)
LISTS=("$ROOT/bench/shapes/atrous_3x3" "$ROOT/crates/autodnn/data/shapes/shapes_dilated_2d_strided_padding")
for l in "${!LISTS[@]}"; do
  "$BIN" tune --threads "$T" --mb 1 --prepared --cache "$OUT/cache_$l.json" "${LISTS[$l]}" >/dev/null
done
for i in $(seq 1 "$R"); do
  for l in "${!LISTS[@]}"; do
    f=${LISTS[$l]}
    python3 "$PEERS" --engine ort --threads "$T" --mb 1 "$f" > "$OUT/ort_${l}_$i.jsonl" 2>/dev/null
    "$BIN" tune --threads "$T" --mb 1 --prepared --cache "$OUT/cache_$l.json" \
      --policy cached_only --json "$f" > "$OUT/tuned_${l}_$i.jsonl"
    "$BIN" conv --threads "$T" --mb 1 --prepared --json "$f" > "$OUT/best_${l}_$i.jsonl"
  done
done
python3 - "$OUT" "$R" "${#LISTS[@]}" <<'PY'
import json, statistics as st, sys
out, rounds, lists = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]

def name(p):
    return p.split('n"')[-1].rstrip('"') if 'n"' in p else p

for l in range(lists):
    ort, tuned, best, algo = {}, {}, {}, {}
    tot = {"ort": [], "tuned": [], "best": []}
    for i in range(1, rounds + 1):
        t_o = t_t = t_b = 0.0
        for d in rows(f"{out}/ort_{l}_{i}.jsonl"):
            if d.get("total"):
                continue
            ort.setdefault(d["name"], []).append(d["ms_median"])
            t_o += d["ms_median"]
        for d in rows(f"{out}/tuned_{l}_{i}.jsonl"):
            if d.get("total") or "ms" not in d:
                continue
            n = name(d["problem"])
            tuned.setdefault(n, []).append(d["ms"])
            algo[n] = d["algo"]
            t_t += d["ms"] * d.get("count", 1)
        for d in rows(f"{out}/best_{l}_{i}.jsonl"):
            if d.get("total"):
                continue
            ok = [r["ms"] for r in d["results"] if r["status"] == "ok"]
            n = name(d["problem"])
            best.setdefault(n, []).append(min(ok))
            t_b += min(ok) * d.get("count", 1)
        tot["ort"].append(t_o); tot["tuned"].append(t_t); tot["best"].append(t_b)
    if l == 0:
        print(f"{'layer':16s} {'tuned ms':>9s} {'best ms':>9s} {'ort ms':>9s} {'tuned/ort':>9s} {'best/ort':>9s}  tuned choice")
        for n in ort:
            o, t, b = st.median(ort[n]), st.median(tuned.get(n, [float('nan')])), st.median(best.get(n, [float('nan')]))
            print(f"{n:16s} {t:9.3f} {b:9.3f} {o:9.3f} {t/o:9.3f} {b/o:9.3f}  {algo.get(n, '?')}")
    o, t, b = (st.median(tot[k]) for k in ("ort", "tuned", "best"))
    label = "atrous_3x3 total" if l == 0 else "dilated_2d total"
    print(f"{label:16s} {t:9.3f} {b:9.3f} {o:9.3f} {t/o:9.3f} {b/o:9.3f}")
PY
