"""Time a no-op `rbplab extract` (every run cached) beside a cached `rbplab fit` of the same grid,
each in a fresh process as a user starts it, on a warm cache.

    .venv/bin/python benchmarks/bench_extract_noop.py                 # the demo's cache ($RBPLAB_CACHE)
    .venv/bin/python benchmarks/bench_extract_noop.py --cache DIR --family micro --corpus prose -n 5

Both commands read the cache as it is (neither writes to a warm cache: extract's hits and fit's
plan records are already there). Each runs `-n` times, alternating, after one unmeasured run of
each; the table gives the minimum, median and maximum wall time, the modules of torch and
transformers each imported, and the ratio of the medians (the aim: extract within 1.5x of fit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = """
import contextlib, io, json, sys
from rbplab.cli.app import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
cached = out.getvalue().count("\\tcached\\t")
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy, "cached": cached}))
"""


def _run(argv: list[str], cache: str) -> tuple[float, dict]:
    env = {**os.environ, "RBPLAB_CACHE": cache}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit(f"rbplab {' '.join(argv)} failed: {out.stderr.strip().splitlines()[-1:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise SystemExit(f"rbplab {' '.join(argv)} exited {result['code']}: {out.stderr.strip()}")
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.environ.get("RBPLAB_CACHE"), help="a warm cache (make demo's)")
    parser.add_argument("--family", default="micro")
    parser.add_argument("--corpus", nargs="+", default=["prose", "humaneval"])
    parser.add_argument("--max-tokens", type=int, help="as the cached runs were extracted")
    parser.add_argument("-n", type=int, default=5, help="runs per command")
    args = parser.parse_args()
    if not args.cache:
        parser.error("give --cache or set RBPLAB_CACHE to a cache that holds the runs (make demo)")
    grid = ["-f", args.family, "-c", *args.corpus]
    grid += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
    commands = {"extract (no-op)": ["extract", *grid, "--no-progress"], "fit": ["fit", *grid]}
    for argv in commands.values():  # warm the file cache; extract must find every run cached
        _, result = _run(argv, args.cache)
    times: dict[str, list[float]] = {name: [] for name in commands}
    found: dict[str, dict] = {}
    for _ in range(args.n):
        for name, argv in commands.items():
            seconds, found[name] = _run(argv, args.cache)
            times[name].append(seconds)
    runs = found["extract (no-op)"]["cached"]
    print(f"rbplab extract / fit {' '.join(grid)} ({runs} cached runs): wall seconds over {args.n} processes")
    print(f"{'command':<16} {'min':>6} {'median':>7} {'max':>6}  imports")
    for name, values in times.items():
        imported = ", ".join(found[name]["heavy"]) or "neither torch nor transformers"
        median = statistics.median(values)
        print(f"{name:<16} {min(values):6.2f} {median:7.2f} {max(values):6.2f}  {imported}")
    ratio = statistics.median(times["extract (no-op)"]) / statistics.median(times["fit"])
    print(f"extract / fit (median): {ratio:.2f}x (aim: at most 1.5x)")


if __name__ == "__main__":
    main()
