"""Every run of a grid extracted in this process, one after another: `rbplab.extract`, the Python
face of `rbplab extract` (`rbplab.runner` spreads a grid's shards over worker processes instead).

Corpora are opened once, before any model is touched, so a bad corpus fails the grid at once;
every run of the grid (`rbplab.grid.Grid.runs`, models outer so each model's weights load once)
is one cached `extract_plan` (a hit runs no model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rbplab.core.errors import InvalidArgumentError
from rbplab.extraction.hits import ExtractResult
from rbplab.extraction.known_plans import record_plan
from rbplab.extraction.pipeline import extract_plan
from rbplab.extraction.plan import plan_extraction
from rbplab.grid import Grid
from rbplab.grid.grid import require_grid


def extract(
    grid: Grid,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    on_result: Callable[[ExtractResult], None] | None = None,
) -> list[ExtractResult]:
    """Rank statistics of every run of `grid` (every model at every revision, on every corpus,
    under its settings), computed into the cache unless already there.

    grid: a `rbplab.grid.Grid`, e.g. ``Grid.from_names(["micro-1-25K"], ["prose"],
    max_tokens=2000)`` or ``Grid.read("study.toml")``. Each run is one cache entry: a complete
    entry is a hit (no weights loaded, no forward pass); a partial one resumes from the shards on
    disk. cache_dir: the cache (default: $RBPLAB_CACHE, else ~/.cache/rbplab). progress: a
    progress bar per computed run. on_result: called with each run's result as it is done.

    Returns one `ExtractResult` per run, models outer: its `model` (``model@revision`` for a
    checkpoint) and `corpus` labels, `n_tokens`, `from_cache`, the entry's `key`, `path` and
    `manifest`; ``pandas.DataFrame(results)`` is them as a table.
    """
    grid = require_grid(grid, "rbplab.extract")
    opened = grid.opened  # every corpus opened (and checked) before any model is described
    if not opened:
        raise InvalidArgumentError("a grid needs at least one corpus")
    results, described = [], {}  # each model described once for the whole grid
    for run in grid.runs():
        plan = plan_extraction(run.model, run.corpus, grid.settings, described=described)
        result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
        record_plan(plan, cache_dir)  # the next analysis of this run finds its key without model code
        result = replace(result, model=run.label, corpus=str(run.corpus.name))
        if on_result is not None:
            on_result(result)
        results.append(result)
    return results
