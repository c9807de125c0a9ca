#!/usr/bin/env bash
# autodnn's backward convolutions against PyTorch's on the same integer data: for each
# problem and direction, bench/peers/peer_conv.py saves x, w, dy and PyTorch's dx, dw, db;
# `autodnn conv --dir D` computes them from the .npy files with every exact algorithm; the
# outputs must be equal element for element.
#
#   source "$(bench/peers/setup.sh)"      # PyTorch among the peers
#   cargo build --release --bin autodnn
#   bench/torch-agreement.sh [PROBLEM...]
#
# Exits 1 on any difference. Not run by CI (it needs PyTorch).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS:-$ROOT/bench/peers/peer_conv.py}"
BIN="$ROOT/target/release/autodnn"
OUT=$(mktemp -d)
PROBLEMS=("$@")
[[ ${#PROBLEMS[@]} -gt 0 ]] || PROBLEMS=(
  'mb2ic16ih14oc24kh3ph1n"p3x3"' 'mb2ic16ih14oc32kh1ph0sh2n"p1x1s2"'
  'mb2g8ic8ih15oc8kh3ph1sh2n"pdw"' 'mb1ic3ih33oc8kh7ph3sh2n"p7x7s2"'
  'mb2ic12ih10oc6kh3ph2dh1n"pdil"' 'mb2g2ic8ih9oc10kh5ph2n"pgrp"'
)
fail=0
for prob in "${PROBLEMS[@]}"; do
  for d in bwd_d bwd_w bwd_wb; do
    python3 "$PEERS" --engine torch --dir "$d" --reps 1 --warmup 0 --save-dir "$OUT/$d" "$prob" \
      > "$OUT/peer.json"
    folder=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["saved"])' "$OUT/peer.json")
    case $d in
      bwd_d) algos=$("$BIN" conv "$prob" --dir bwd_d --json --reps 1 | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if not e.get("total"):
        print(" ".join(r["algo"] for r in e["results"] if r["status"] == "ok"))') ;;
      *) algos=$("$BIN" conv "$prob" --dir bwd_w --json --reps 1 | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if not e.get("total"):
        print(" ".join(r["algo"] for r in e["results"] if r["status"] == "ok"))') ;;
    esac
    for a in $algos; do
      case $a in winograd*|fft*) continue ;; esac   # not exact by design
      case $d in
        bwd_d) "$BIN" conv "$prob" --dir bwd_d --algo "$a" --weights "$folder/w.npy" \
                 --dy "$folder/dy.npy" --output "$OUT/dx.npy" > /dev/null
               pairs="$OUT/dx.npy:$folder/dx_torch.npy" ;;
        bwd_w) "$BIN" conv "$prob" --dir bwd_w --algo "$a" --input "$folder/x.npy" \
                 --dy "$folder/dy.npy" --output "$OUT/dw.npy" > /dev/null
               pairs="$OUT/dw.npy:$folder/dw_torch.npy" ;;
        bwd_wb) "$BIN" conv "$prob" --dir bwd_wb --algo "$a" --input "$folder/x.npy" \
                 --dy "$folder/dy.npy" --output "$OUT/dw.npy" --output-bias "$OUT/db.npy" > /dev/null
                pairs="$OUT/dw.npy:$folder/dw_torch.npy $OUT/db.npy:$folder/db_torch.npy" ;;
      esac
      for pair in $pairs; do
        if python3 -c '
import numpy as np, sys
a, b = (np.load(f) for f in sys.argv[1].split(":"))
sys.exit(0 if a.shape == b.shape and np.array_equal(a, b) else 1)' "$pair"; then
          echo "equal  $d $a ${prob}"
        else
          echo "DIFFER $d $a ${prob} (${pair##*/})"; fail=1
        fi
      done
    done
  done
done
rm -rf "$OUT"
exit $fail
