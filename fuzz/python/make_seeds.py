"""Writes the seed corpus of the Python functional API's harness (fuzz/corpus/python_functional):
for each call the harness makes, random inputs are tried and the first that reaches something
new (a compared result of an algorithm, an error class naming an argument) is kept, up to
--per-op inputs per call. Deterministic for a given --seed.

    python fuzz/python/make_seeds.py [--per-op 5] [--tries 1500] [--seed 1] [--op I ...]
"""

import argparse
import hashlib
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import functional  # noqa: E402


NO_COMPARE = {functional.fuzz_queries, functional.fuzz_handle, functional.fuzz_raw}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-op", type=int, default=5)
    ap.add_argument("--tries", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--op", type=int, action="append",
                    help="only these calls (indices into functional.OPS; default: all)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "corpus", "python_functional"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    kept = 0
    for op in args.op if args.op else range(len(functional.OPS)):
        found = 0
        for _ in range(args.tries):
            if found >= args.per_op:
                break
            # Mostly small bytes (the plain, valid choices), now and then anything.
            body = bytes(rng.choice([0, 0, 0, 1, 2, 3, rng.randrange(256)])
                         for _ in range(rng.randrange(8, 64)))
            data = bytes([op]) + body
            before = set(functional.REACHED)
            functional.one_input(data)
            new = functional.REACHED - before
            # Inputs that compare a result of something new (an algorithm); for the calls
            # that compare nothing (handles, queries, junk), inputs reaching new outcomes.
            compares = functional.OPS[op] not in NO_COMPARE
            if any(t[0] == "compared" for t in new) or (new and not compares):
                name = hashlib.sha1(data).hexdigest()[:16]
                with open(os.path.join(args.out, name), "wb") as f:
                    f.write(data)
                found += 1
                kept += 1
    print(f"{kept} seeds in {args.out}; reached {len(functional.REACHED)} outcomes")


if __name__ == "__main__":
    main()
