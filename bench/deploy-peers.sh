#!/usr/bin/env bash
# Inference deployment, per built-in model: the network time as `tune --prepared` chose it
# (selection for prepared weights; tuned once into a fresh cache, then each round times the
# cached choices), the best algorithm per layer with prepared weights (`conv --prepared`),
# and onnxruntime's and ncnn's layers, in one run (rounds interleaved); medians over rounds.
#
#   source "$(bench/peers/setup.sh)"      # numpy, onnxruntime, ncnn
#   cargo build --release --bin autodnn
#   bench/deploy-peers.sh [ROUNDS=3] [THREADS=1] [MODEL...]   # default: every built-in model
#
# Targets (issue 18): tuned within 2 % of the per-layer best, at most 0.75x onnxruntime's and
# 0.9x ncnn's time. Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-3}; T=${2:-1}
shift 2 2>/dev/null || shift $#
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(resnet50 googlenet_v1 vgg11 alexnet mobilenet_v1 yolov2)
fi
PEERS="${PEERS:-$ROOT/bench/peers/peer_conv.py}"
BIN="$ROOT/target/release/autodnn"
OUT=$(mktemp -d)
shapes_of() {
  case "$1" in
    resnet50) echo shapes_resnet_50 ;;
    vgg11) echo shapes_vgg_11 ;;
    *) echo "shapes_$1" ;;
  esac
}
total() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
printf '%-14s %10s %10s %10s %10s %9s %9s %9s\n' model tuned best ort ncnn tuned/best tuned/ort tuned/ncnn
for m in "${MODELS[@]}"; do
  shapes="$ROOT/crates/autodnn/data/shapes/$(shapes_of "$m")"
  cache="$OUT/$m.json"
  "$BIN" tune --model "$m" --threads "$T" --prepared --cache "$cache" --json >/dev/null
  : > "$OUT/$m.rows"
  for i in $(seq 1 "$R"); do
    tuned=$("$BIN" tune --model "$m" --threads "$T" --prepared --cache "$cache" \
      --policy cached_only --json | total total_ms)
    best=$("$BIN" conv --model "$m" --threads "$T" --prepared | tail -1 | sed 's/^total: \([0-9.]*\) ms.*/\1/')
    ort=$(python3 "$PEERS" --engine ort --threads "$T" --mb 1 "$shapes" 2>/dev/null | total ms_weighted)
    ncnn=$(python3 "$PEERS" --engine ncnn --threads "$T" --mb 1 "$shapes" 2>/dev/null | total ms_weighted)
    echo "$tuned $best $ort $ncnn" >> "$OUT/$m.rows"
  done
  python3 - "$m" "$OUT/$m.rows" <<'EOF'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
t, b, o, n = (st.median(c) for c in zip(*rows))
print(f"{sys.argv[1]:14s} {t:10.2f} {b:10.2f} {o:10.2f} {n:10.2f} {t/b:9.3f} {t/o:9.3f} {t/n:9.3f}")
EOF
done
