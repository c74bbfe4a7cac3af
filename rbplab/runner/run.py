"""Running a whole study: plan on the driver, execute the units, one progress bar, one table.

    rbplab run study.toml                        # in this process
    rbplab run study.toml --executor ray         # Ray tasks (a running cluster, or a local one)
    rbplab run study.toml --task-index $SLURM_ARRAY_TASK_ID --num-tasks $SLURM_ARRAY_TASK_COUNT

A re-run after any failure resumes: finished shards are kept, complete entries are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rbplab.core.errors import InvalidArgumentError
from rbplab.grid import Grid
from rbplab.runner.executors import RayOptions, UnitOutcome, cluster_gpus, run_local, run_processes, run_ray
from rbplab.runner.units import DEFAULT_SHARDS_PER_UNIT, StudyPlan, plan_study, slice_units
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.files import cache_root, check_writable

EXECUTORS = ("local", "ray")
TABLE_COLUMNS = [
    "model",
    "revision",
    "corpus",
    "tokens",
    "computed",
    "seconds",
    "tok_per_s",
    "state",
    "workers",
    "key",
]


@dataclass(frozen=True)
class StudyRun:
    """What a run did: one row per entry (`table`), the failures, and the time it took."""

    table: pd.DataFrame
    failures: tuple[str, ...]
    seconds: float
    plan_seconds: float
    timings: dict[str, float]  # summed over units: plan, load, score, write (seconds of worker time)

    @property
    def ok(self) -> bool:
        return not self.failures


def run_study(
    grid: Grid,
    *,
    executor: str = "local",
    cache_dir: str | Path | None = None,
    ray: RayOptions | None = None,
    task_index: int | None = None,
    num_tasks: int | None = None,
    shards_per_unit: int = DEFAULT_SHARDS_PER_UNIT,
    workers: int = 1,
    progress: bool = True,
    say: Callable[[str], object] | None = None,
) -> StudyRun:
    """Run every unit of `grid` into the cache (a study file's grid: `Grid.read(path)`).

    executor "local" runs units in this process (`workers` > 1: in that many processes of this
    machine, the CPUs split between them); "ray" runs them as Ray tasks (`ray` options)."""
    started = time.perf_counter()
    if not isinstance(grid, Grid):
        raise InvalidArgumentError(
            f"run_study takes a Grid, got {type(grid).__name__}; read a study file with Grid.read(path)"
        )
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if not isinstance(workers, int) or workers < 1:
        raise InvalidArgumentError(f"workers must be a positive integer, got {workers!r}")
    if (task_index is None) != (num_tasks is None):
        raise InvalidArgumentError("give both --task-index and --num-tasks (a SLURM array slice), or neither")
    if num_tasks is not None:
        slice_units((), task_index, num_tasks)  # checks the slice before any planning writes a spec
    accelerator = False
    if executor == "ray":  # fail on a missing Ray or an unreachable cluster before any work
        options = ray or RayOptions()
        accelerator = (options.gpus_per_task or 0) > 0 or (
            options.gpus_per_task is None and cluster_gpus(options) > 0
        )
    root = cache_root(cache_dir)
    plan = plan_study(grid, root, shards_per_unit, accelerator=accelerator)
    plan_seconds = time.perf_counter() - started
    units = plan.units if task_index is None else slice_units(plan.units, task_index, num_tasks)
    # Biggest models first, so the last units to finish are short (work ~ tokens x size S), and
    # the units of one model next to each other, so a worker's loaded model serves several.
    sizes = {e.key: e.S or 1.0 for e in plan.entries}
    todo = tuple(sorted(plan.pending(units), key=lambda u: (-sizes[u.key], str(u.ref), -u.n_tokens)))
    if todo:
        check_writable(root)
    total = sum(u.n_tokens for u in todo)
    from tqdm.auto import tqdm

    bar = tqdm(
        total=total,
        unit="tok",
        unit_scale=True,
        desc=f"rbplab run ({executor})",
        disable=not progress or not todo,
    )

    def on_tokens(n: int) -> None:
        bar.update(max(0, min(n, bar.total - bar.n)))  # a retried unit reports its shards again

    with bar:
        if executor == "ray" and todo:
            outcomes = run_ray(todo, root, on_tokens, ray or RayOptions())
        elif workers > 1 and len(todo) > 1:
            outcomes = run_processes(todo, root, on_tokens, workers)
        else:
            outcomes = run_local(todo, root, on_tokens)
    table = _table(plan, outcomes, root, {u.key for u in units})
    failures = tuple(f"{o.unit.name}: {o.error}" for o in outcomes if o.error)
    if task_index is None:  # a slice leaves other slices' entries incomplete by design
        failed_keys = {o.unit.key for o in outcomes if o.error}
        failures += tuple(
            f"{r.model} x {r.corpus}: entry {r.key[:12]} is incomplete"
            for r in table.itertuples()
            if r.state == "incomplete" and r.key not in failed_keys
        )
    for line in failures:
        (say or print)(f"failed: {line}")
    timings: dict[str, float] = {}
    for o in outcomes:
        for name, value in (o.result.timings if o.result else {}).items():
            timings[name] = timings.get(name, 0.0) + value
    return StudyRun(table, failures, time.perf_counter() - started, plan_seconds, timings)


def _table(plan: StudyPlan, outcomes: list[UnitOutcome], root: Path, keys: set[str]) -> pd.DataFrame:
    computed: dict[str, list] = {}
    for o in outcomes:
        if o.result is not None:
            computed.setdefault(o.unit.key, []).append(o.result)
    rows = []
    for e in plan.entries:
        if e.key not in keys:
            continue
        entry = CacheEntry.open(e.key, root)
        complete = entry.is_complete()
        producers = entry.manifest()["provenance"].get("producers", []) if complete else []
        results = computed.get(e.key, [])
        tokens = sum(r.tokens_computed for r in results)
        seconds = sum(r.seconds for r in results)
        state = "cached" if e.cached else ("computed" if complete else "incomplete")
        rows.append(
            {
                "model": e.model,
                "revision": e.revision,
                "corpus": e.corpus,
                "tokens": e.n_tokens,
                "computed": tokens,
                "seconds": round(seconds, 2),
                "tok_per_s": round(tokens / seconds, 1) if tokens and seconds > 0 else None,
                "state": state,
                "workers": ", ".join(producers) if not e.cached else "",
                "key": e.key,
            }
        )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)
