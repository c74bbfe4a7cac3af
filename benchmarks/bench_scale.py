"""Scale-out benchmark: one study grid run by the local executor and by Ray, side by side.

    .venv/bin/python benchmarks/bench_scale.py                      # a subset of the demo grid
    .venv/bin/python benchmarks/bench_scale.py --models micro-1-25K micro-6-2.7M --max-tokens 200000

Prints tokens/s of `local` (one process, all threads) and `ray` (one worker per CPU, one thread
each), their ratio, the share of worker time in planning, loading weights, scoring and writing,
and Ray's scheduling overhead per unit (units of already complete entries, Ray minus local).
Both runs start from an empty cache and must produce byte-identical shards.

`--local-only` skips Ray (no network namespace needed) and `--gpt2-random` adds a GPT-2-small-shaped
model with random weights (saved to the work dir; the bundled tokenizer, ranks over all 50,257
output rows), to see what loading and planning cost next to scoring for a model of real size:

    .venv/bin/python benchmarks/bench_scale.py --local-only --gpt2-random \
        --max-tokens 8000 --shard-tokens 2000

The figure printed as "loading + planning" is the share of the units' worker time spent planning
(config, tokenizer, tokenising the corpus) and loading weights (with the load check); run the same
script with an older rbplab on PYTHONPATH to compare.

Ray picks the machine's interface address by itself; the benchmark re-runs itself inside a network
namespace that holds only loopback (`unshare -n`), so the local cluster talks on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_MODELS = ["micro-1-25K", "micro-2-85K", "micro-3-200K", "micro-4-559K"]
DEFAULT_CORPORA = ["humaneval", "prose"]
NETNS_ENV = "RBPLAB_BENCH_IN_NETNS"


def reexec_in_netns() -> None:
    if os.environ.get(NETNS_ENV):
        return
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {command}"],
        env={**os.environ, NETNS_ENV: "1"},
    )
    sys.exit(proc.returncode)


def shard_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("shard-*.parquet"))
    }


def save_random_gpt2(path: Path) -> Path:
    """GPT-2 small's shape (124M parameters, |V| = 50,257, 1,024 positions), random weights."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(Path(__file__).resolve().parent.parent / "data" / "tokenizer")
    GPT2LMHeadModel(GPT2Config()).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def worker_shares(name: str, run) -> None:
    total = sum(run.timings.values()) or 1.0
    shares = ", ".join(f"{k} {v:.1f} s ({v / total:.0%})" for k, v in run.timings.items())
    print(f"{name} worker time: planning on driver {run.plan_seconds:.1f} s; units: {shares}")
    setup = run.timings.get("plan", 0.0) + run.timings.get("load", 0.0)
    print(f"{name} loading + planning: {setup:.1f} s of {total:.1f} s worker time ({setup / total:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--corpora", nargs="+", default=DEFAULT_CORPORA)
    parser.add_argument("--max-tokens", type=int, default=40_000, help="per model and corpus")
    parser.add_argument("--shard-tokens", type=int, default=10_000, help="tokens per shard (work unit size)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-netns", action="store_true", help="do not re-run inside `unshare -n`")
    parser.add_argument("--local-only", action="store_true", help="the local executor only (no Ray)")
    parser.add_argument("--gpt2-random", action="store_true", help="add a random GPT-2-small-shaped model")
    args = parser.parse_args()
    if not args.no_netns and not args.local_only:
        reexec_in_netns()

    import torch

    from rbplab.grid import Grid
    from rbplab.runner import RayOptions, run_study
    from rbplab.runner.executors import connect_ray, warm_up_workers

    work = Path(tempfile.mkdtemp(prefix="rbplab-bench-scale-"))
    models = list(args.models)
    settings = {"max_tokens": args.max_tokens, "shard_tokens": args.shard_tokens}
    if args.gpt2_random:
        models.append(str(save_random_gpt2(work / "gpt2-random")))
        # the bundled tokenizer is smaller than GPT-2's: rank over every output row, as GPT-2 would
        settings["include_padded_vocab"] = True
    study = Grid.read(
        {
            "models": models,
            "corpora": args.corpora,
            "settings": settings,
        }
    )
    print(
        f"grid: {len(models)} models x {len(args.corpora)} corpora, {args.max_tokens} tokens each, "
        f"shards of {args.shard_tokens}; {args.workers} CPUs; work dir {work}"
    )

    torch.set_num_threads(args.workers)
    started = time.perf_counter()
    local = run_study(study, cache_dir=work / "local", progress=False, shards_per_unit=1)
    local_seconds = time.perf_counter() - started
    assert local.ok, local.failures
    tokens = int(local.table["tokens"].sum())
    if args.local_only:
        print(
            f"local (1 process x {args.workers} thr): {local_seconds:.1f} s, "
            f"{tokens / local_seconds:.0f} tok/s"
        )
        worker_shares("local", local)
        return

    options = RayOptions(num_cpus=args.workers, cpus_per_task=1)
    clock = time.perf_counter()
    connect_ray(options)
    ray_start = time.perf_counter() - clock
    clock = time.perf_counter()
    warmed = warm_up_workers(options, args.workers)
    warm_up = time.perf_counter() - clock
    started = time.perf_counter()
    ray_run = run_study(
        study, executor="ray", ray=options, cache_dir=work / "ray", progress=False, shards_per_unit=1
    )
    ray_seconds = time.perf_counter() - started
    assert ray_run.ok, ray_run.failures
    identical = shard_digests(work / "local") == shard_digests(work / "ray")

    units = sum(-(-n // args.shard_tokens) for n in local.table["tokens"])
    print(f"\n{'executor':<28}{'seconds':>10}{'tokens/s':>12}")
    for label, seconds in (
        (f"local (1 process x {args.workers} thr)", local_seconds),
        (f"ray ({args.workers} workers x 1 thr)", ray_seconds),
    ):
        print(f"{label:<28}{seconds:>10.1f}{tokens / seconds:>12.0f}")
    print(
        f"ray / local throughput: {local_seconds / ray_seconds:.2f}x  ({tokens} tokens, {units} units; "
        f"not included: cluster start {ray_start:.1f} s, importing the model code in {warmed} workers "
        f"{warm_up:.1f} s); shards byte-identical: {identical}"
    )

    for name, run in (("local", local), ("ray", ray_run)):
        worker_shares(name, run)

    # Scheduling overhead: the same units again, every entry complete (a unit then only re-plans
    # from metadata and returns), run in this process and as Ray tasks.
    from rbplab.runner.executors import run_local, run_ray
    from rbplab.runner.units import plan_study

    plan = plan_study(study, work / "ray", shards_per_unit=1)
    clock = time.perf_counter()
    run_local(plan.units, work / "ray", lambda n: None)
    per_local = (time.perf_counter() - clock) / len(plan.units)
    clock = time.perf_counter()
    run_ray(plan.units, work / "ray", lambda n: None, options)
    per_ray = (time.perf_counter() - clock) / len(plan.units)
    print(
        f"empty units ({len(plan.units)}): local {per_local * 1000:.0f} ms/unit, "
        f"ray {per_ray * 1000:.0f} ms/unit, overhead {1000 * (per_ray - per_local):.0f} ms/unit"
    )


if __name__ == "__main__":
    main()
