#!/usr/bin/env bash
# Reduced-precision convolution against the peers, in one run: a built-in model's layers
# (default ResNet-50) with prepared weights in autodnn's strict f32, on bf16 tensors (strict
# and under allow_bf16, which adds Winograd's bf16 pairs), and f32 under allow_bf16 (each
# layer's fastest algorithm, as `autodnn conv` totals), beside
# OpenVINO and PyTorch in bf16 and onnxruntime in f32, then a table of medians and ratios.
#
#   source "$(bench/peers/setup.sh)"      # numpy, onnxruntime, OpenVINO, PyTorch
#   cargo build --release --bin autodnn
#   bench/precision-peers.sh [ROUNDS=3] [THREADS=1] [MB=1] [MODEL=resnet50] [OUTDIR]
#   LAYOUT=nhwc bench/precision-peers.sh 3 1 1 mobilenet_dw   # autodnn's tensors in NHWC
#
# Rounds are interleaved (every configuration once per round). Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-3}; T=${2:-1}; MB=${3:-1}; MODEL=${4:-resnet50}; OUT=${5:-$(mktemp -d)}
PEERS="$ROOT/bench/peers/peer_conv.py"
SHAPES="$ROOT/crates/autodnn/data/shapes/shapes_${MODEL/resnet50/resnet_50}"
BIN="$ROOT/target/release/autodnn"
REPS=${REPS:-5}
mkdir -p "$OUT"
total() { tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["ms_weighted"])'; }
for i in $(seq 1 "$R"); do
    a=(conv --model "$MODEL" --mb "$MB" --threads "$T" --prepared --reps "$REPS" --json
       --layout "${LAYOUT:-nchw}")
    echo "f32 $("$BIN" "${a[@]}" | total)" >>"$OUT/totals"
    echo "bf16 $("$BIN" "${a[@]}" --dtype bf16 | total)" >>"$OUT/totals"
    echo "allow_bf16 $("$BIN" "${a[@]}" --math allow_bf16 | total)" >>"$OUT/totals"
    echo "bf16_allow $("$BIN" "${a[@]}" --dtype bf16 --math allow_bf16 | total)" >>"$OUT/totals"
    for e in ov torch; do
        echo "${e}_bf16 $(python3 "$PEERS" --engine $e --precision bf16 --threads "$T" --mb "$MB" \
            --reps "$REPS" "$SHAPES" 2>/dev/null | total)" >>"$OUT/totals"
    done
    echo "ort_f32 $(python3 "$PEERS" --engine ort --threads "$T" --mb "$MB" --reps "$REPS" \
        "$SHAPES" 2>/dev/null | total)" >>"$OUT/totals"
done
python3 - "$OUT/totals" "$MODEL" "$MB" "$T" <<'EOF'
import statistics as st, sys
v = {}
for line in open(sys.argv[1]):
    k, x = line.split()
    v.setdefault(k, []).append(float(x))
m = {k: st.median(x) for k, x in v.items()}
print(f"{sys.argv[2]}, batch {sys.argv[3]}, {sys.argv[4]} thread(s), medians of {len(v['f32'])} rounds (ms)")
for k in ["f32", "bf16", "bf16_allow", "allow_bf16", "ov_bf16", "torch_bf16", "ort_f32"]:
    print(f"  {k:11s} {m[k]:9.2f}   rounds {v[k]}")
print(f"  bf16 / OpenVINO bf16  {m['bf16'] / m['ov_bf16']:.3f}")
print(f"  bf16 / PyTorch bf16   {m['bf16'] / m['torch_bf16']:.3f}")
print(f"  bf16 allow_bf16 / OpenVINO bf16  {m['bf16_allow'] / m['ov_bf16']:.3f}")
print(f"  bf16 allow_bf16 / PyTorch bf16   {m['bf16_allow'] / m['torch_bf16']:.3f}")
print(f"  bf16 / autodnn f32    {m['bf16'] / m['f32']:.3f}")
print(f"  allow_bf16 / f32      {m['allow_bf16'] / m['f32']:.3f}")
print(f"  bf16 / onnxruntime f32 {m['bf16'] / m['ort_f32']:.3f}")
EOF
