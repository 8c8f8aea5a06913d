#!/usr/bin/env python3
"""Lists the slowest packages and tests of `go test -json` logs.

    scripts/slowtests.py [-n 30] [-sub] .cache/test.json .cache/test-mlx.json

For each log: the sum of the package times (the main pass runs two
packages at a time, so its wall time is about half that sum), the N
slowest packages and the N slowest top-level tests (with -sub, subtests
too), each with its elapsed seconds and result.
"""

import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=30, help="rows per list")
    ap.add_argument("-sub", action="store_true", help="list subtests too")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    for path in args.logs:
        pkgs, tests = {}, []
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("Action") not in ("pass", "fail", "skip") or "Elapsed" not in e:
                    continue
                test = e.get("Test")
                if not test:
                    pkgs[e["Package"]] = (e["Elapsed"], e["Action"])
                elif args.sub or "/" not in test:
                    tests.append((e["Elapsed"], e["Package"], test, e["Action"]))
        print(f"== {path}: {len(pkgs)} packages, {sum(v for v, _ in pkgs.values()):.0f} s summed")
        for p, (v, a) in sorted(pkgs.items(), key=lambda kv: -kv[1][0])[: args.n]:
            print(f"{v:8.1f}  {a:4}  {p}")
        print()
        for v, p, t, a in sorted(tests, reverse=True)[: args.n]:
            print(f"{v:8.1f}  {a:4}  {p} {t}")
        print()


if __name__ == "__main__":
    main()
