"""`rbplab run STUDY`: a study file's grid, run by the local executor, on Ray, or as one slice of a
SLURM array; `--plan` prints its cost (`rbplab plan`) and runs nothing."""

from __future__ import annotations

import argparse

from rbplab.cli.extract_command import positive_int
from rbplab.cli.output import add_format_argument, print_table
from rbplab.cli.plan_command import add_cost_arguments, run_study_plan
from rbplab.core.errors import InvalidArgumentError


def configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="a study TOML file (models/families, corpora, revisions, [settings])")
    p.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="where units run (default local)"
    )
    p.add_argument("--cache-dir", help="the shared cache (default $RBPLAB_CACHE or ~/.cache/rbplab)")
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
