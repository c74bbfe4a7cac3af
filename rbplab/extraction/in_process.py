"""Every run of a grid extracted in this process, one after another: the Python face of
`rbplab extract` (`rbplab.runner` spreads a grid's shards over worker processes instead).

Corpora are opened once, before any model is touched, so a bad corpus fails the grid at once;
every run of the grid (`rbplab.grid.Grid.runs`, models outer so each model's weights load once)
is one cached `extract` (a hit runs no model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.catalog.models import ModelSpec, ResolvedModel
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.extraction.known_plans import record_plan
from rbplab.extraction.pipeline import extract_plan
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.sources import as_resolved
from rbplab.grid import Grid

GRID_COLUMNS = ["model", "corpus", "n_tokens", "from_cache", "key", "path"]


def extract_grid(
    grid: Grid,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Extract every run of `grid`; `on_result` receives each row as it is done. Returns one row
    per run: model (``model@revision`` for a checkpoint), corpus, n_tokens, from_cache, key, path."""
    opened = grid.opened  # every corpus opened (and checked) before any model is described
    if not opened:
        raise InvalidArgumentError("a grid needs at least one corpus")
    rows, described = [], {}  # each model described once for the whole grid
    for run in grid.runs():
        plan = plan_extraction(run.model, run.corpus, grid.settings, described=described)
        result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
        record_plan(plan, cache_dir)  # the next analysis of this run finds its key without model code
        row = {
            "model": run.label,
            "corpus": run.corpus.name,
            "n_tokens": result.n_tokens,
            "from_cache": result.from_cache,
            "key": result.key,
            "path": str(result.path),
        }
        if on_result is not None:
            on_result(row)
        rows.append(row)
    return pd.DataFrame(rows, columns=GRID_COLUMNS)


def extract_many(
    models: Iterable[ModelSpec | str] | Mapping[str, ModelSpec | str],
    corpora: Iterable[str | Path | Corpus | LazyCorpus],
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    **overrides: Any,
) -> pd.DataFrame:
    """Extract every model on every corpus (models outer, so each model's weights load once).

    models: names, paths, hub ids or ModelSpecs, or a mapping label -> model (the label names
    the row). corpora: names, paths or Corpus objects. `on_result` receives each row as it is
    done. Returns one row per pair: model, corpus, n_tokens, from_cache, key, path. A study's
    grid (families, revisions) is `extract_grid(Grid.build(...))`."""
    settings = resolve_settings(settings, **overrides)
    labelled = dict(models) if isinstance(models, Mapping) else {_label(m): m for m in models}
    if not labelled:
        raise InvalidArgumentError("extract_many needs at least one model")
    members = tuple(_member(label, model) for label, model in labelled.items())
    grid = Grid(None, members, tuple(corpora), {}, settings)
    return extract_grid(grid, cache_dir=cache_dir, progress=progress, on_result=on_result)


def _member(label: str, model: ResolvedModel | ModelSpec | str) -> ResolvedModel:
    """`model` resolved once, reported under `label`."""
    return replace(as_resolved(model), model=label)


def _label(model: ResolvedModel | ModelSpec | str) -> str:
    if isinstance(model, ResolvedModel):
        return model.model
    return model.name_or_path if isinstance(model, ModelSpec) else str(model)
