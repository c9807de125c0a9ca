#!/usr/bin/env bash
# Fuzz campaign of the Python functional API (atheris, libFuzzer's engine).
#
#   fuzz/python/run.sh [RUNS]
#
# Needs a Python with numpy, atheris and autodnn installed (`pip install ./python atheris`;
# PYTHON=path/to/python picks one, default python3). Runs fuzz/python/functional.py for RUNS
# executions (default 1000000; MAX_TIME=seconds also stops it after that long), one process
# pinned to one core, with the limits of fuzz/run.sh: an input running over 1 s is a hang
# (-timeout=1), a process over 2 GiB fails (-rss_limit_mb=2048), as does any single
# allocation over 1 GiB (-malloc_limit_mb=1024). New inputs go to
# fuzz/corpus-work/python_functional (not committed); the committed seeds
# (fuzz/corpus/python_functional) and pinned findings (fuzz/regressions/python_functional)
# are read as well. Findings land in fuzz/artifacts/python_functional. The final statistics
# (executions, exec/s, peak RSS) are appended to fuzz/campaign.log.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1000000}
py=${PYTHON:-python3}
t=python_functional
mkdir -p "corpus-work/$t" "corpus/$t" "regressions/$t" "artifacts/$t"
pin=()
if command -v taskset >/dev/null; then
    pin=(taskset -c "${CORE:-0}")
fi
start=$(date +%s)
set +e
"${pin[@]}" "$py" python/functional.py "corpus-work/$t" "corpus/$t" "regressions/$t" \
    -runs="$runs" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
    ${MAX_TIME:+-max_total_time=$MAX_TIME} >"campaign-$t.out" 2>&1
status=$?
set -e
end=$(date +%s)
{
    echo "$(date -u +%FT%TZ) $t runs=$runs wall=$((end - start))s status=$status"
    grep -E "^(stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|SUMMARY)" \
        "campaign-$t.out" || true
    grep -E "Test unit written|Done [0-9]+ runs" "campaign-$t.out" || true
} | tee -a campaign.log
