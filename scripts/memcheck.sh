#!/usr/bin/env bash
# Memory-safety checks of the kernels over the test suite (not run by CI: hours under valgrind).
#
#   scripts/memcheck.sh valgrind [BINARY-NAME...]   # the test binaries under valgrind memcheck
#   scripts/memcheck.sh asan [CARGO-TEST-ARGS...]   # the test suite under AddressSanitizer
#
# valgrind: valgrind's CPU has no AVX-512, so the run-time detection picks the AVX2 and scalar
# kernels, and the tests that loop over every available instruction set run both. Each test
# binary of the workspace (or the named ones, e.g. `algorithms gemm`) runs under memcheck, the
# processes it starts (the `autodnn` command in the CLI tests) too; any report fails the run.
# Logs go to target/memcheck/NAME.log (valgrind's own in NAME.log.PID); it builds in
# target/memcheck/build.
# valgrind 3.19 zeroes bits 32-127 of a scalar FMA's destination (vfmadd213ss and the rest),
# which the CPU keeps: compiled code that keeps another value there computes it wrong under
# valgrind only. epilogue's transcendental_activations_within_tolerance (winograd_4x4 with
# tanh, AVX2) fails so; it passes natively on every instruction set (README, Memory safety).
#
# asan: the nightly toolchain's -Zsanitizer=address, every test of the workspace on every
# instruction set this machine has (AVX-512 included), in its own target folder
# (target/asan). Requests too large to satisfy return null (allocator_may_return_null), as the
# system's allocator does, so that the tests of out-of-memory errors run. The C programs of the
# C API tests link the instrumented libautodnn with the toolchain's own AddressSanitizer runtime
# (through CC, which the tests read), so they are checked too. The library and CI stay on
# stable; this is a check, not a build.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true

case "$mode" in
valgrind)
  command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
  mkdir -p target/memcheck
  # Its own build folder, so that other builds cannot replace a binary while it runs.
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/memcheck/build}
  # The test binaries, as cargo builds them for `cargo test` (lib, integration tests, CLI).
  # Release builds (with debug info): the kernels as users run them, and many times faster
  # under valgrind than unoptimised code.
  mapfile -t exes < <(cargo test --workspace --locked --release --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + " " + m["executable"])
')
  # The CLI tests run the command itself: build it as they do.
  cargo build --locked --release -p autodnn-cli >/dev/null 2>&1 || true
  failed=0
  for entry in "${exes[@]}"; do
    name=${entry%% *}; exe=${entry#* }
    if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
    log=target/memcheck/$name.log
    # valgrind's logs of an earlier run (another pid) would be counted as this run's.
    rm -f "$log" "$log".*
    start=$(date +%s)
    # Children traced: the `autodnn` command of the CLI tests, the C programs of the C API
    # tests; not the C compiler, cargo or cbindgen those tests run (the header test runs cargo
    # metadata: its own reports are not the library's).
    if valgrind -q --error-exitcode=99 --trace-children=yes --child-silent-after-fork=yes \
      --trace-children-skip='*/cc,*/gcc,*/clang,*/cc1,*/collect2,*/ld,*/ld.bfd,*/as,*/cargo,*/rustc,*/cbindgen' \
      --leak-check=no --log-file="$log.%p" "$exe" --test-threads=1 >"$log" 2>&1; then
      status=ok
    else
      status="FAILED (exit $?)"; failed=1
    fi
    reports=$(cat "$log".* 2>/dev/null | grep -c '^==[0-9]*== [A-Z]' || true)
    echo "$name: $status, $reports valgrind report lines, $(( $(date +%s) - start )) s"
    grep -h "test result" "$log" | sed 's/^/    /' || true
  done
  exit $failed
  ;;
asan)
  rt=$(rustc +nightly --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/lib/librustc-nightly_rt.asan.a
  [ -f "$rt" ] || { echo "the nightly toolchain's AddressSanitizer runtime is missing: $rt" >&2; exit 1; }
  # -rdynamic: the shared libautodnn resolves the runtime's symbols from the program.
  CC="${CC:-cc} -Wl,--whole-archive $rt -Wl,--no-whole-archive -rdynamic" \
  RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
    cargo +nightly test --workspace --release --target x86_64-unknown-linux-gnu \
    --target-dir target/asan --lib --bins --tests "$@"
  ;;
*)
  sed -n '2,15p' "$0" >&2
  exit 2
  ;;
esac
