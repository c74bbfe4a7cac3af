"""Time a cached analysis as a user starts it: `rbplab fit` in a fresh process on a warm cache,
with plan records (keys found without model code) and without (every key derived from the model).

    .venv/bin/python benchmarks/bench_cached_fit.py                  # the demo's cache ($RBPLAB_CACHE)
    .venv/bin/python benchmarks/bench_cached_fit.py --cache DIR --family micro --corpus prose -n 5

The cache is copied to a temporary folder first (plan records are written into the copy, never
into DIR). Each variant runs `-n` times, alternating, and prints the minimum, median and maximum
wall time and whether torch or transformers were imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIT = """
import json, sys
from rbplab.cli.app import main
code = main(["fit", "-f", sys.argv[1], "-c", *sys.argv[2].split(",")])
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def _run(cache: Path, family: str, corpora: str) -> tuple[float, dict]:
    env = {**os.environ, "RBPLAB_CACHE": str(cache)}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", FIT, family, corpora], env=env, capture_output=True, text=True, check=True
    )
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.environ.get("RBPLAB_CACHE"), help="a warm cache (make demo's)")
    parser.add_argument("--family", default="micro")
    parser.add_argument("--corpus", default="prose", help="comma-separated corpora")
    parser.add_argument("-n", type=int, default=5, help="runs per variant")
    args = parser.parse_args()
    if not args.cache:
        parser.error("give --cache or set RBPLAB_CACHE to a cache that holds the runs (make demo)")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        shutil.copytree(args.cache, cache, symlinks=True)
        shutil.rmtree(cache / "plans", ignore_errors=True)
        _run(cache, args.family, args.corpus)  # plans the runs once: writes their records
        times: dict[str, list[float]] = {"plan records": [], "keys derived from the models": []}
        heavy: dict[str, list[str]] = {}
        for _ in range(args.n):
            for variant in times:
                if variant != "plan records":
                    shutil.rmtree(cache / "plans", ignore_errors=True)
                seconds, result = _run(cache, args.family, args.corpus)
                if result["code"] != 0:
                    raise SystemExit(f"rbplab fit exited {result['code']}")
                times[variant].append(seconds)
                heavy[variant] = result["heavy"]
    print(f"rbplab fit -f {args.family} -c {args.corpus}: wall seconds over {args.n} fresh processes")
    print(f"{'variant':<30} {'min':>6} {'median':>7} {'max':>6}  imports")
    for variant, values in times.items():
        imported = ", ".join(heavy[variant]) or "neither torch nor transformers"
        median = statistics.median(values)
        print(f"{variant:<30} {min(values):6.2f} {median:7.2f} {max(values):6.2f}  {imported}")
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    ratio = medians["keys derived from the models"] / medians["plan records"]
    print(f"speed-up (median): {ratio:.1f}x")


if __name__ == "__main__":
    main()
