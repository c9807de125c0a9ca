#!/usr/bin/env bash
# Reduced-precision GEMM against f32 on this machine, with its peaks, in one run: rounds of
# `autodnn peak` (f32 FMA, bf16 dot product) and `autodnn gemm` at M = N = K (default 1024)
# with f32, bf16 and f16 operands and f32 under allow_bf16, each with the default units
# choice (auto) and with the bf16 units forced (always); medians and ratios to f32.
#
#   cargo build --release --bin autodnn
#   bench/gemm-precision.sh [ROUNDS=5] [THREADS=1] [SIZE=1024]
#
# Rounds are interleaved (every configuration once per round), so a slow stretch of the
# machine hits them alike. Not run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
R=${1:-5}; T=${2:-1}; S=${3:-1024}
BIN="$ROOT/target/release/autodnn"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
gflops() { python3 -c 'import json,sys; print(json.load(sys.stdin)["gflops"])'; }
has_bf16=1
"$BIN" peak --threads 1 --dtype bf16 --json >/dev/null 2>&1 || has_bf16=0
for _ in $(seq 1 "$R"); do
    echo "peak_f32 $("$BIN" peak --threads "$T" --json | gflops)" >>"$OUT"
    if [ "$has_bf16" = 1 ]; then
        echo "peak_bf16 $("$BIN" peak --threads "$T" --dtype bf16 --json | gflops)" >>"$OUT"
    fi
    for cfg in "f32:--dtype f32" "bf16_auto:--dtype bf16" "f16:--dtype f16" \
        "allow_bf16_auto:--math allow_bf16" "bf16_always:--dtype bf16 --bf16-units always" \
        "allow_bf16_always:--math allow_bf16 --bf16-units always"; do
        name=${cfg%%:*}
        # shellcheck disable=SC2086
        set -- ${cfg#*:}
        echo "$name $("$BIN" gemm --m "$S" --n "$S" --k "$S" --threads "$T" --reps 20 "$@" --json | gflops)" >>"$OUT"
    done
done
python3 - "$OUT" "$T" "$S" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, value = line.split()
    runs[name].append(float(value))
f32 = statistics.median(runs["f32"])
print(f"threads {sys.argv[2]}, {sys.argv[3]}^3, GFLOP/s (median of {len(runs['f32'])} rounds)")
for name, values in runs.items():
    m = statistics.median(values)
    rounds = " ".join(f"{v:.0f}" for v in values)
    print(f"{name:18s} {m:8.1f}  {m / f32:5.2f}x f32   ({rounds})")
PY
