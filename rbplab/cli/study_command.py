"""`rbplab plan` and `rbplab run`: what a study's grid will cost before it runs, and running it (local,
Ray or a SLURM array slice).

`rbplab plan STUDY | GRID-ARGS` and `rbplab run STUDY --plan`: what a grid will cost before it runs.

One row per (model, corpus) entry (cache key, cached / partial / missing, tokens to score, forward
FLOPs, memory needed against what the device has, estimated time) and the totals, with the wall
time at `--workers` workers. Computed by `rbplab.runner.costs`; nothing is written to the cache.

`rbplab run STUDY`: a study file's grid, run by the local executor, on Ray, or as one slice of a
SLURM array; `--plan` prints its cost (`rbplab plan`) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from rbplab.cli.arguments import (
    add_cache_dir_argument,
    add_grid_arguments,
    grid_from_args,
    positive_float,
    positive_int,
    refuse_study_with_grid_options,
)
from rbplab.cli.output import (
    FORMAT_HELP,
    FORMATS,
    add_format_argument,
    human_bytes,
    human_seconds,
    print_table,
)
from rbplab.core.display import size
from rbplab.core.errors import InvalidArgumentError


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """How the estimate is made: shared by `plan` and `run --plan`."""
    g = p.add_argument_group("cost estimate")
    g.add_argument(
        "--tokens-per-second",
        type=positive_float,
        help="throughput of one worker on the grid's cheapest model on the run's device (default: "
        "measured by a short probe here in the workers' setup, which loads that model's weights)",
    )
    g.add_argument(
        "--probe-tokens",
        type=positive_int,
        help="tokens of the corpus the probe draws its batches from (default: one shard, 65,536)",
    )
    g.add_argument(
        "--probe-seconds",
        type=float,
        default=3.0,
        help="the probe scores its tokens again and again for this long (default 3; more on a busy machine)",
    )
    g.add_argument("--no-probe", action="store_true", help="no probe and no times (reads no weights)")


def configure_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", nargs="?", help="a study TOML file (or give the grid with -m/-f/-c)")
    add_grid_arguments(p, defaults=False)
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="workers (GPUs, Ray tasks, array tasks) for the wall time",
    )
    p.add_argument("--shards-per-unit", type=positive_int, default=4, help="shards per work unit (default 4)")
    add_cost_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="table", help=FORMAT_HELP)


def run_plan(args: argparse.Namespace) -> int:
    from rbplab.grid import Grid

    if args.study:
        refuse_study_with_grid_options(args)
        grid = Grid.read(args.study)
    elif not (args.model or args.family or args.corpus):
        raise InvalidArgumentError("give a study file, or the grid: --model/--family and --corpus")
    else:
        grid = grid_from_args(args)
    return _print_plan(grid, args, accelerator=False)


def run_study_plan(args: argparse.Namespace) -> int:
    """`rbplab run STUDY --plan`: the plan of the study the run would run, and nothing run."""
    from rbplab.grid import Grid

    accelerator = args.executor == "ray" and (args.gpus_per_task or 0) > 0
    return _print_plan(Grid.read(args.study), args, accelerator=accelerator)


def _print_plan(grid, args: argparse.Namespace, accelerator: bool) -> int:
    from rbplab.runner.costs import estimate_costs

    plan = estimate_costs(
        grid,
        args.cache_dir,
        tokens_per_second=args.tokens_per_second,
        probe_tokens=args.probe_tokens,
        probe_seconds=args.probe_seconds,
        workers=args.workers,
        shards_per_unit=args.shards_per_unit,
        accelerator=accelerator,
        probe=not args.no_probe,
    )
    if args.format == "csv":
        print(plan.table.to_csv(index=False), end="")
    elif args.format == "json":
        totals = asdict(plan.totals)
        print(
            json.dumps(
                {"entries": json.loads(plan.table.to_json(orient="records")), "totals": totals}, indent=1
            )
        )
    else:
        print(format_table(plan.table))
        for line in totals_lines(plan.totals):
            print(line)
    return 0


def format_table(table) -> str:
    if table.empty:
        return "(no entries)"
    shown = table.assign(
        key=table["key"].map(lambda k: k[:12] if isinstance(k, str) else "?"),
        tokens=[
            f"{'<=' if not exact else ''}{n:,}"
            for n, exact in zip(table["tokens"], table["tokens_exact"], strict=True)
        ],
        tokens_to_score=table["tokens_to_score"].map(lambda n: f"{n:,}"),
        S=table["S"].map(size),
        flops=table["flops"].map(lambda f: f"{f:.3g}"),
        memory=[
            human_bytes(m)
            if fits is None
            else f"{human_bytes(m)} / {human_bytes(d)}{'' if fits else ' DOES NOT FIT'}"
            for m, d, fits in zip(table["memory_bytes"], table["device_bytes"], table["fits"], strict=True)
        ],
        time=table["seconds"].map(human_seconds),
    )
    # The plan's own columns a reader acts on, then the two derived above (memory, time).
    columns = ["model", "revision", "corpus", "key", "state", "tokens", "tokens_to_score", "S", "dtype"]
    columns += ["flops", "memory", "time", "note"]
    if shown["revision"].isna().all():
        columns.remove("revision")
    if not shown["note"].astype(bool).any():
        columns.remove("note")
    return shown[columns].to_string(index=False)


def _memory_line(t) -> str:
    need = f"memory: up to {human_bytes(t.memory_bytes)}"
    if t.device_bytes is None:
        return f"{need} on {t.device}: compare with their memory"
    line = f"{need} of {human_bytes(t.device_bytes)} on {t.device}"
    if not t.fits:
        line += " (some models DO NOT FIT: --device-map auto, a larger device, or --batch-tokens)"
    return line


def probe_setup(rate) -> str:
    """How the probe ran: the workers' thread count, and how many scored at once."""
    threads = f"{rate.threads} torch thread{'s' if rate.threads != 1 else ''}"
    if rate.processes > 1:
        return f"{threads} in each of {rate.processes} worker processes scoring at once"
    return f"{threads}, one worker"


def totals_lines(t) -> list[str]:
    bound = "" if t.tokens_exact else " (an upper bound: some corpora could not be read here)"
    lines = [
        f"{t.entries} entries: {t.cached} cached, {t.partial} partial, {t.missing} missing"
        + (f", {t.damaged} damaged (the run repairs them)" if t.damaged else "")
        + (
            f", {t.unknown} unknown ({'corpus or config' if t.registry_sized else 'corpus'} not reachable)"
            if t.unknown
            else ""
        ),
        f"to score: {t.tokens_to_score:,} tokens{bound}, {t.flops:.3g} forward FLOPs",
        _memory_line(t),
    ]
    for corpus, why in t.unreachable.items():
        lines.append(f"{corpus}: not readable here ({why}); its tokens are the max_tokens bound")
    if t.registry_sized:
        lines.append(
            f"sized from families.csv (config not here, offline?): {', '.join(t.registry_sized)}; "
            "FLOPs and memory from the registry's shapes, tokens the max_tokens bound, keys unknown"
        )
    rate = t.throughput
    if rate is None:
        lines.append(
            "time: not estimated (no probe here): give --tokens-per-second, the cheapest model's "
            "throughput on the run's device"
        )
        return lines
    how = (
        f"measured here: {rate.tokens:,} tokens in {rate.seconds:.2f} s, {probe_setup(rate)}"
        if rate.measured
        else "given by --tokens-per-second"
    )
    lines.append(
        f"throughput: {rate.tokens_per_second:,.0f} tok/s per worker of {rate.model} on {rate.device} "
        f"({how}), {rate.flops_per_second:.3g} FLOP/s"
    )
    start = (
        f", starting worker processes {human_seconds(rate.startup_seconds)}" if rate.startup_seconds else ""
    )
    line = (
        f"time: {human_seconds(t.seconds)} on one worker ({(t.seconds or 0) / 3600:.3g} worker-hours; "
        f"planning {human_seconds(t.planning_seconds)}{start}, then loading and scoring)"
    )
    if t.workers > 1:
        line += f", {human_seconds(t.wall_seconds)} at {t.workers} workers"
    lines.append(line)
    return lines


def configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="a study TOML file (models/families, corpora, revisions, [settings])")
    p.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="where units run (default local)"
    )
    add_cache_dir_argument(p)
    p.add_argument("--shards-per-unit", type=positive_int, default=4, help="shards per work unit (default 4)")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="local executor: processes on this machine (default 1)",
    )
    ray = p.add_argument_group("ray executor")
    ray.add_argument("--address", help="Ray cluster address (default: a running cluster, else a local one)")
    ray.add_argument(
        "--gpus-per-task", type=float, help="GPUs per unit (default 1 when the cluster has GPUs)"
    )
    ray.add_argument(
        "--cpus-per-task", type=float, default=1, help="CPUs (torch threads) per unit (default 1)"
    )
    ray.add_argument(
        "--max-retries", type=int, default=3, help="retries of units whose worker died (default 3)"
    )
    ray.add_argument("--num-cpus", type=positive_int, help="CPUs of a local Ray cluster started for the run")
    slurm = p.add_argument_group("SLURM arrays (no Ray)")
    slurm.add_argument("--task-index", type=int, help="this task's index, e.g. $SLURM_ARRAY_TASK_ID")
    slurm.add_argument("--num-tasks", type=positive_int, help="number of tasks, e.g. $SLURM_ARRAY_TASK_COUNT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plan", action="store_true", help="print the study's cost (rbplab plan) and run nothing")
    add_cost_arguments(p)
    add_format_argument(p)


def run_study_file(args: argparse.Namespace) -> int:
    from rbplab.grid import Grid
    from rbplab.runner import RayOptions, run_study

    if args.plan:
        return run_study_plan(args)
    if args.executor != "ray" and (args.address or args.gpus_per_task is not None):
        raise InvalidArgumentError("--address and --gpus-per-task need --executor ray")
    options = RayOptions(
        address=args.address,
        gpus_per_task=args.gpus_per_task,
        cpus_per_task=args.cpus_per_task,
        max_retries=args.max_retries,
        num_cpus=args.num_cpus,
    )
    result = run_study(
        Grid.read(args.study),
        executor=args.executor,
        cache_dir=args.cache_dir,
        ray=options,
        task_index=args.task_index,
        num_tasks=args.num_tasks,
        shards_per_unit=args.shards_per_unit,
        workers=args.workers,
        progress=not args.no_progress,
    )
    table = result.table.assign(key=result.table["key"].str[:12]) if args.format == "table" else result.table
    print_table(table, args.format)
    if args.format == "table":
        print(f"{len(table)} entries in {result.seconds:.1f} s (planning {result.plan_seconds:.1f} s)")
    return 0 if result.ok else 1
