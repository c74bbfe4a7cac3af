"""Time the missing-run error as a user meets it: `rbplab fit` in a fresh process when the cache
lacks the runs asked for, on an empty cache and on a filled one (settings that no entry has).

    .venv/bin/python benchmarks/bench_missing_runs.py                        # an empty cache only
    .venv/bin/python benchmarks/bench_missing_runs.py --cache ~/.cache/rbplab -n 5

The filled cache is only read. Each variant runs `-n` times and prints the minimum, median and
maximum wall time, the exit status and whether torch or transformers were imported (the check
reads the entries' specs; it describes no model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIT = """
import json, sys
from rbplab.cli.app import main
code = main(["fit", "-f", "micro", "-c", "prose", "humaneval", "--max-tokens", sys.argv[1]])
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def _run(cache: Path, max_tokens: str) -> tuple[float, dict]:
    env = {**os.environ, "RBPLAB_CACHE": str(cache)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FIT, max_tokens], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="a filled cache, only read (default: none)")
    parser.add_argument("-n", type=int, default=3, help="runs per variant (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as empty:
        variants = {"empty cache": Path(empty)}
        if args.cache is not None:
            variants[f"{args.cache} (max_tokens 123)"] = args.cache
        for name, cache in variants.items():
            times, info = [], {}
            for _ in range(args.n):
                seconds, info = _run(cache, "123")
                times.append(seconds)
            print(
                f"{name}: min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
                f"max {max(times):.2f} s; exit {info.get('code')}, imported {info.get('heavy') or 'neither'}"
            )


if __name__ == "__main__":
    main()
