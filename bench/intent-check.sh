#!/usr/bin/env bash
# Does each selection intent pick its own fastest algorithm? Per built-in model and intent
# (plain calls, and calls with prepared weights: `--prepared`), `tune --policy exhaustive`
# times every accepting algorithm of every distinct layer (three turns, medians), and the
# default race (`tune`, policy benchmark) chooses on its own, each into a fresh cache; then,
# by the exhaustive medians, the layers where the race chose the exhaustive winner, and the
# network time of the race's choices against that of the winners (counts weighted).
#
#   cargo build --release --bin autodnn
#   bench/intent-check.sh [THREADS=1] [MODEL...]      # default: every built-in model
#
# Target (issue 18): every intent picks the fastest algorithm for that intent on every
# network. Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
T=${1:-1}
shift 1 2>/dev/null || shift $#
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(resnet50 googlenet_v1 vgg11 alexnet mobilenet_v1 yolov2)
fi
BIN="$ROOT/target/release/autodnn"
OUT=$(mktemp -d)
printf '%-14s %-9s %8s %12s %12s %9s\n' model intent agree race_ms best_ms race/best
for m in "${MODELS[@]}"; do
  for intent in plain prepared; do
    flag=(); [ "$intent" = prepared ] && flag=(--prepared)
    "$BIN" tune --model "$m" --threads "$T" "${flag[@]}" --policy exhaustive \
      --cache "$OUT/${m}_${intent}_ex.json" --json > "$OUT/${m}_${intent}_ex.jsonl"
    "$BIN" tune --model "$m" --threads "$T" "${flag[@]}" \
      --cache "$OUT/${m}_${intent}_race.json" --json > "$OUT/${m}_${intent}_race.jsonl"
    python3 - "$m" "$intent" "$OUT/${m}_${intent}" <<'PY'
import json, re, sys
model, intent, base = sys.argv[1:4]

def key_of_spec(s):
    v = {k: int(x) for k, x in re.findall(r"(mb|g|ic|ih|iw|oc|oh|ow|kh|kw|sh|sw|ph|pw|dh|dw)(\d+)", s.split('n"')[0])}
    return (v["mb"], v["ic"], v["ih"], v["iw"], v["oc"], v["kh"], v["kw"], v["sh"], v["sw"],
            v["ph"], v["pw"], v["dh"] + 1, v["dw"] + 1, v.get("g", 1))

def key_of_entry(k):
    p = k["problem"]
    n, c, h, w = p["x"]["dims"]
    o, _, r, s = p["w"]["dims"]
    cv = p["conv"]
    return (n, c, h, w, o, r, s, *cv["stride"], cv["padding"]["top"], cv["padding"]["left"],
            *cv["dilation"], cv["groups"])

times = {}
for e in json.load(open(base + "_ex.json"))["entries"]:
    times[key_of_entry(e["key"])] = {r["algo"]: r["ms"] for r in e["value"]["records"]
                                     if r["status"] == "ok" and r["ms"] is not None}
rows = [json.loads(l) for l in open(base + "_race.jsonl") if l.strip()]
agree = n = 0
race_ms = best_ms = 0.0
misses = []
for r in rows:
    if r.get("total") or "algo" not in r:
        continue
    t = times[key_of_spec(r["problem"])]
    best = min(t, key=t.get)
    n += 1
    agree += r["algo"] == best
    race_ms += r["count"] * t.get(r["algo"], float("nan"))
    best_ms += r["count"] * t[best]
    if r["algo"] != best:
        misses.append(f'{r["problem"].split(chr(34))[1] if chr(34) in r["problem"] else r["problem"]}: '
                      f'{r["algo"]} {t.get(r["algo"], float("nan")):.3f} vs {best} {t[best]:.3f}')
print(f"{model:14s} {intent:9s} {agree:3d}/{n:<4d} {race_ms:12.3f} {best_ms:12.3f} {race_ms/best_ms:9.3f}")
for line in misses:
    print("    " + line)
PY
  done
done
