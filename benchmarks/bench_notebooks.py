"""Time notebooks as the report runs them (a fresh kernel each, headless, through papermill) on the
cache `make demo` fills, with their default parameters (target for 06_training_dynamics: under
30 s).

    .venv/bin/python benchmarks/bench_notebooks.py                         # 06, default cache
    .venv/bin/python benchmarks/bench_notebooks.py 06 07 --repeat 3        # several, 3 runs each
    RBPLAB_CACHE=/path/to/cache .venv/bin/python benchmarks/bench_notebooks.py

Prints, per notebook, the wall time of each run (kernel start included) and the median, and
whether it ran on real checkpoints or fell back to synthetic ones. The cache is only read.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rbplab.report.execution import execute_notebook, list_notebooks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", default=["06"], help="numbers or names (default: 06)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per notebook (default 1)")
    args = parser.parse_args()
    available = {p.stem: p for p in list_notebooks()}
    for wanted in args.notebooks:
        matches = [stem for stem in available if stem == wanted or stem.startswith(f"{wanted}_")]
        if len(matches) != 1:
            raise SystemExit(f"no single notebook matches {wanted!r}; available: {sorted(available)}")
        stem = matches[0]
        times = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as out:
                start = time.perf_counter()
                result = execute_notebook(available[stem], Path(out), {})
                times.append(time.perf_counter() - start)
                if not result.ok:
                    raise SystemExit(f"{stem} failed: {result.error}")
                synthetic = (Path(out) / stem / "banner.txt").is_file()
        runs = ", ".join(f"{t:.1f}" for t in times)
        data = "SYNTHETIC checkpoints" if synthetic else "the cached data"
        print(f"{stem}: {statistics.median(times):.1f} s median of {len(times)} ({runs} s), on {data}")


if __name__ == "__main__":
    main()
