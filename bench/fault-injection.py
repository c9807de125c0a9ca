#!/usr/bin/env python3
"""Fault injection over a whole model: tune it (`benchmark`), then, for each distinct first
choice A, rerun A's layers from the cache with AUTODNN_FAIL_ALLOC=A and --check, so that the
first choice's workspace allocation fails on every layer. Prints, per layer, what ran instead
and the fallback events; exits 1 unless every layer completed, correctly, after a fallback.

    cargo build --release --bin autodnn
    python3 bench/fault-injection.py [--model resnet50] [--threads 1]

Not run by CI (tests/select.rs and the CLI tests cover fallback on small problems).
"""
import argparse, collections, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("AUTODNN_BIN", os.path.join(ROOT, "target", "release", "autodnn"))


def tune(cache, threads, args, env=None):
    r = subprocess.run([BIN, "tune", "--threads", threads, "--cache", cache, "--json",
                        "--check", "--reps", "3", *args],
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return r.returncode, lines, r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--threads", default="1")
    a = ap.parse_args()
    cache = os.path.join(tempfile.mkdtemp(prefix="autodnn-fault-"), "tuning.json")
    _, first, _ = tune(cache, a.threads, ["--model", a.model, "--policy", "benchmark"])
    groups = collections.defaultdict(list)
    for layer in first[:-1]:
        groups[layer["algo"]].append(layer["problem"])
    ok, layers, events = True, 0, 0
    for algo, problems in groups.items():
        rc, lines, err = tune(cache, a.threads, ["--policy", "cached_only", *problems],
                              {"AUTODNN_FAIL_ALLOC": algo, "AUTODNN_LOG": "dispatch"})
        for layer in lines[:-1]:
            good = rc == 0 and layer["algo"] != algo and layer["fallbacks"] >= 1
            ok &= good
            layers += 1
            events += layer["fallbacks"]
            print(f"{layer['problem'].split(chr(34))[1]:36s} first {algo:14s} "
                  f"ran {layer['algo']:14s} fallbacks {layer['fallbacks']} "
                  f"{'ok' if good else 'FAILED'}")
        logged = [line for line in err.splitlines() if "fallback" in line]
        if logged:
            print("    " + logged[0])
    print(f"{layers} layers, {events} fallback events, all right: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
