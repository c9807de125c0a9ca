#!/usr/bin/env bash
# Fuzz campaigns of autodnn's input surfaces (nightly toolchain, cargo-fuzz, libFuzzer).
#
#   fuzz/run.sh [RUNS] [TARGET...]
#
# Runs each target (all of them by default) in turn, one process at a time, for RUNS
# executions (default 1000000; MAX_TIME=seconds also stops each target after that long),
# with libFuzzer's limits: an input running over 1 s is a hang (-timeout=1), a process over
# 2 GiB of memory fails (-rss_limit_mb=2048), and so does any single allocation over 1 GiB
# (-malloc_limit_mb=1024). New inputs go to fuzz/corpus-work/TARGET (not committed); the
# committed seeds under fuzz/corpus/TARGET and the pinned findings under
# fuzz/regressions/TARGET are read as well. Findings land in fuzz/artifacts/TARGET.
# Each target's final statistics (executions, exec/s) are appended to fuzz/campaign.log.
#
# SANITIZER=none builds without AddressSanitizer (debug assertions and overflow checks stay
# on): several times faster, for long campaigns; the targets' own allocator
# (autodnn_fuzz::alloc_cap) then enforces the 1 GiB limit on one allocation, which libFuzzer
# cannot without a sanitizer. Memory safety is checked by scripts/memcheck.sh. Each sanitizer
# builds in its own folder (fuzz/target/SANITIZER).
set -euo pipefail
cd "$(dirname "$0")"
runs=${1:-1000000}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(problem_string descriptors cache_file cost_model_file gemm npy plans capi ops plan_file)
fi
san=${SANITIZER:-address}
# Timed selections come many a second here: no 150 ms wake-up of the workers before each
# (it made a capi campaign run at 60 inputs a second instead of about 1000).
export AUTODNN_WAKE_UP_MS=${AUTODNN_WAKE_UP_MS:-0}
# Nor 5 ms of timed runs per candidate of an exhaustive selection (a C API Find): ten runs
# each (a Find of ten candidates took 50 ms or more, and held capi at about 125 inputs a
# second on a grown corpus).
export AUTODNN_EXHAUSTIVE_MIN_MS=${AUTODNN_EXHAUSTIVE_MIN_MS:-0}
# Comparison tracing (libFuzzer's value profile of every compare) helps the file parsers
# find magic values; in the targets that run kernels, the traced compares of the library's
# loops (the thread pool's idle spinning among them) took half a capi campaign's time, so
# those build without it, in their own folder (problem_string's tokens come from its
# dictionary).
traced=" cache_file cost_model_file npy plan_file "
build_for() {
    if [[ $traced == *" $1 "* ]]; then
        echo --sanitizer "$san" --target-dir "target/$san"
    else
        echo --sanitizer "$san" --no-trace-compares --target-dir "target/$san-nocmp"
    fi
}
for t in "${targets[@]}"; do
    read -ra build <<<"$(build_for "$t")"
    cargo +nightly fuzz build "${build[@]}" "$t"
done
for t in "${targets[@]}"; do
    read -ra build <<<"$(build_for "$t")"
    mkdir -p "corpus-work/$t" "corpus/$t" "regressions/$t"
    dict=()
    if [ -f "dicts/$t.dict" ]; then
        dict=("-dict=dicts/$t.dict")
    fi
    start=$(date +%s)
    set +e
    cargo +nightly fuzz run "${build[@]}" "$t" "corpus-work/$t" "corpus/$t" "regressions/$t" -- \
        -runs="$runs" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -print_final_stats=1 ${MAX_TIME:+-max_total_time=$MAX_TIME} "${dict[@]}" \
        >"campaign-$t.out" 2>&1
    status=$?
    set -e
    end=$(date +%s)
    {
        echo "$(date -u +%FT%TZ) $t sanitizer=$san runs=$runs wall=$((end - start))s status=$status build: ${build[*]}"
        grep -E "^(stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|SUMMARY)" \
            "campaign-$t.out" || true
        grep -E "Test unit written" "campaign-$t.out" || true
    } | tee -a campaign.log
done
