#!/usr/bin/env bash
# ResNet-50's layers: every autodnn algorithm, with prepared weights and plain, against
# onnxruntime and ncnn, measured in one run (rounds interleaved), then a table of per-layer
# medians, totals weighted by the layers' counts, and the ratios.
#
#   source "$(bench/peers/setup.sh)"      # numpy, onnxruntime, ncnn
#   cargo build --release --bin autodnn
#   bench/conv-peers.sh [ROUNDS=5] [THREADS=1] [MB=1] [OUTDIR]
#
# Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-5}; T=${2:-1}; MB=${3:-1}; OUT=${4:-$(mktemp -d)}
PEERS="${PEERS:-$ROOT/bench/peers/peer_conv.py}"
SHAPES="$ROOT/crates/autodnn/data/shapes/shapes_resnet_50"
BIN="$ROOT/target/release/autodnn"
mkdir -p "$OUT"
for i in $(seq 1 "$R"); do
  python3 "$PEERS" --engine ort --threads "$T" --mb "$MB" "$SHAPES" > "$OUT/ort_$i.jsonl" 2>/dev/null
  python3 "$PEERS" --engine ncnn --threads "$T" --mb "$MB" "$SHAPES" > "$OUT/ncnn_$i.jsonl" 2>/dev/null
  "$BIN" conv --model resnet50 --mb "$MB" --threads "$T" --prepared --json > "$OUT/prep_$i.jsonl"
  "$BIN" conv --model resnet50 --mb "$MB" --threads "$T" --json > "$OUT/plain_$i.jsonl"
done
python3 "$ROOT/bench/conv_table.py" "$OUT" "$R"
