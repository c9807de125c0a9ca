#!/usr/bin/env bash
# One training step's convolutions (forward, backward data, backward filter) of ResNet-50 and
# MobileNet v1 at batch 8, autodnn against PyTorch's CPU path, on 1 and 2 threads, measured
# in one run (rounds interleaved), then a table of medians per direction and the ratios.
#
#   source "$(bench/peers/setup.sh)"      # PyTorch among the peers
#   cargo build --release --bin autodnn
#   bench/training.sh [ROUNDS=3] [MB=8] [OUTDIR]
#   MODELS=mobilenet_v1 bench/training.sh 3     # one model only
#
# autodnn's figure per layer is its fastest algorithm with plain weights (`conv --dir all`,
# every algorithm but the slow `direct`). Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-3}; MB=${2:-8}; OUT=${3:-$(mktemp -d)}
PEERS="${PEERS:-$ROOT/bench/peers/peer_conv.py}"
BIN="$ROOT/target/release/autodnn"
ALGOS=depthwise,depthwise_batch,winograd_4x4,winograd_4x4_batch,winograd_6x6,winograd_6x6_batch,winograd_2x2,fft_tiling,fft,implicit_gemm,implicit_gemm_batch,gemm,gemm_batch
MODELS=${MODELS:-resnet50 mobilenet_v1}
mkdir -p "$OUT"
declare -A SHAPES=([resnet50]=shapes_resnet_50 [mobilenet_v1]=shapes_mobilenet_v1)
for i in $(seq 1 "$R"); do
  for T in 1 2; do
    for M in $MODELS; do
      for D in fwd bwd_d bwd_w; do
        python3 "$PEERS" --engine torch --dir "$D" --threads "$T" --mb "$MB" --reps 5 \
          "$ROOT/crates/autodnn/data/shapes/${SHAPES[$M]}" 2>/dev/null \
          | tail -1 > "$OUT/torch_${M}_${T}_${D}_$i.json"
      done
      "$BIN" conv --model "$M" --mb "$MB" --threads "$T" --reps 5 --dir all --algo "$ALGOS" \
        --json > "$OUT/autodnn_${M}_${T}_$i.jsonl"
    done
  done
done
python3 "$ROOT/bench/training_table.py" "$OUT" "$R" $MODELS
