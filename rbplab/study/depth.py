"""A grid's runs at the layers its settings name (`ExtractionSettings.layers`), read from the cache:
the input of the depth analyses (`rbplab.analysis.depth`).

Each (model, corpus) of the grid is planned at every layer (`rbplab.extraction.plan.plan_layers`:
model code is imported, no weights load) and each layer's entry read; a layer the cache lacks is
a `MissingRunsError` naming it, or, with ``extract=True``, computed with the run's other missing
layers from one forward pass per batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from rbplab.analysis.depth import DepthRun, depth_fits, depth_table, first_depth
from rbplab.core.runs import Run
from rbplab.grid import Grid, require_grid
from rbplab.study.lookup import MissingRunsError

__all__ = ["depth_fits", "depth_study", "depth_table", "first_depth", "load_depth_runs"]


def load_depth_runs(
    grid: Grid, cache_dir: str | Path | None = None, *, extract: bool = False
) -> list[DepthRun]:
    """Every run of `grid` (models outer) at every layer its settings name, as `DepthRun`s whose
    stats are their entries' summaries; extract: compute the layers the cache lacks."""
    from rbplab.extraction.pipeline import extract_plans
    from rbplab.extraction.plan import model_layers, plan_layers
    from rbplab.store.cache.entry import CacheEntry, open_summaries

    grid = require_grid(grid, "load_depth_runs")
    described: dict = {}
    found: list[tuple[Run, int, int, CacheEntry, dict]] = []
    missing: list[str] = []
    for run in grid.runs(outer="model"):
        plans = plan_layers(run.model, run.corpus, grid.settings, described=described)
        n_layers = model_layers(plans[0].described)
        if extract:
            extract_plans(plans, cache_dir=cache_dir, progress=False)
        S = run.model.S or float(plans[0].described.info.n_nonembedding)
        labels = {
            "family": run.model.family or "custom",
            "model": run.label,
            "corpus": run.corpus_label,
            "S": S,
        }
        for plan in plans:
            layer = n_layers - 1 if plan.layer is None else plan.layer
            entry = CacheEntry(cache_dir, plan.key_spec)
            if not entry.is_complete():
                missing.append(f"{run.label} layer {layer} on {run.corpus_label}")
                continue
            found.append((labels, layer, n_layers, entry, entry.manifest()))
    if missing:
        raise MissingRunsError.of_runs(
            missing, cache_dir, remedy="extract=True, or rbplab extract --layers ..."
        )
    summaries = open_summaries([(entry, manifest) for *_, entry, manifest in found], cache_dir)
    return [
        DepthRun(Run(**labels, stats=summary), layer, n_layers)
        for (labels, layer, n_layers, _, _), summary in zip(found, summaries, strict=True)
    ]


def depth_study(
    grid: Grid,
    ks: Iterable[int] | int,
    cache_dir: str | Path | None = None,
    *,
    ties: Iterable[str] | str | None = None,
    extract: bool = False,
) -> pd.DataFrame:
    """`depth_table` of `grid`'s runs at its layers (`load_depth_runs`)."""
    return depth_table(load_depth_runs(grid, cache_dir, extract=extract), ks, ties)
