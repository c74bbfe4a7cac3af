"""How close `rbplab plan`'s time estimate comes to the run it plans: plan, then run, each study on
an empty cache, in separate processes as a user would, on a quiet machine and with one core kept
busy by another process (`python3 -c 'while True: pass'`, as a shared machine has).

    .venv/bin/python benchmarks/bench_plan.py                  # micro pair and GPT-2-shaped model
    .venv/bin/python benchmarks/bench_plan.py --repeats 3 --skip-gpt2 --workers 1 2 --load idle busy

Two studies: micro-1-25K and micro-2-85K on prose and humaneval at `--max-tokens` (default 20,000)
each, and a random GPT-2-small-shaped model (124M parameters, the bundled tokenizer, ranking all
50,257 output rows) on `--gpt2-tokens` prose tokens (default 4,000). Each is planned and run with
`--workers` N (default 1 and 2: in the driver, and in local worker processes) under each `--load`.
Prints, per study, load, workers and repeat, the plan's estimate at N workers (from its own probe of
the cheapest model, in the workers' setup: threads and processes, shown), the run's time as `rbplab
run` reports it (driver planning and units; interpreter start-up not included) and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rbplab(*args: str, cache: Path) -> str:
    command = [sys.executable, "-m", "rbplab", *args]
    env = {**os.environ, "RBPLAB_CACHE": str(cache)}
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout


def measure(study: Path, work: Path, label: str, workers: int) -> float:
    cache = Path(tempfile.mkdtemp(dir=work, prefix="cache-"))
    n = ("--workers", str(workers))
    totals = json.loads(rbplab("plan", str(study), *n, "--format", "json", cache=cache))["totals"]
    out = rbplab("run", str(study), *n, "--no-progress", cache=cache)
    match = re.search(r"entries in ([0-9.]+) s \(planning ([0-9.]+) s\)", out)
    if not match:
        raise RuntimeError(f"no run time in the output of rbplab run:\n{out}")
    measured = float(match.group(1))
    rate = totals["throughput"]
    estimate = totals["wall_seconds"]
    ratio = estimate / measured
    print(
        f"{label}: estimated {estimate:.1f} s (probe {rate['tokens_per_second']:,.0f} tok/s per worker of "
        f"{Path(rate['model']).name}, {rate['threads']} thread(s) x {rate['processes']} process(es)), "
        f"measured {measured:.1f} s (planning {match.group(2)} s): estimate / measured {ratio:.2f}; "
        f"load {open('/proc/loadavg').read().split()[0]}",
        flush=True,
    )
    return ratio


@contextlib.contextmanager
def machine_load(kind: str) -> Iterator[None]:
    """ "idle": nothing added; "busy": one process spinning on a core for the duration."""
    if kind == "idle":
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-tokens", type=int, default=20_000, help="micro study: tokens per entry")
    parser.add_argument("--gpt2-tokens", type=int, default=4_000, help="GPT-2-shaped study: tokens")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-gpt2", action="store_true")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="rbplab run --workers")
    parser.add_argument(
        "--load", nargs="+", choices=["idle", "busy"], default=["idle", "busy"], help="added machine load"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rbplab-bench-plan-"))
    micro = work / "micro.toml"
    micro.write_text(
        'models = ["micro-1-25K", "micro-2-85K"]\ncorpora = ["prose", "humaneval"]\n'
        f"[settings]\nmax_tokens = {args.max_tokens}\n"
    )
    studies = [("micro pair", micro)]
    if not args.skip_gpt2:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_scale import save_random_gpt2

        model = save_random_gpt2(work / "gpt2-random")
        gpt2 = work / "gpt2.toml"
        gpt2.write_text(
            f'models = ["{model}"]\ncorpora = ["prose"]\n'
            f"[settings]\nmax_tokens = {args.gpt2_tokens}\ninclude_padded_vocab = true\n"
        )
        studies.append(("GPT-2-shaped", gpt2))
    ratios: dict[str, list[float]] = {}
    for load in args.load:
        with machine_load(load):
            for workers in args.workers:
                for repeat in range(args.repeats):
                    for label, study in studies:
                        case = f"{label}, {load}, {workers} worker(s)"
                        ratio = measure(study, work, f"{case} #{repeat + 1}", workers)
                        ratios.setdefault(case, []).append(ratio)
    for case, values in ratios.items():
        print(f"{case}: estimate / measured {', '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
