"""One model on one corpus through `rbplab.extract`, for tests that check a single run's entry."""

from __future__ import annotations

from typing import Any

import rbplab
from rbplab.catalog import ModelSpec
from rbplab.extraction.plan import ExtractResult
from rbplab.grid import Grid


def extract_run(
    model: Any,
    corpus: Any,
    settings: Any = None,
    *,
    cache_dir: Any = None,
    progress: bool = False,
    **overrides: Any,
) -> ExtractResult:
    """`rbplab.extract` of the one-run grid `model` x `corpus`; `model` a name or path (resolved
    as given, as a ModelSpec: no family lookup) or a ModelSpec."""
    spec = model if isinstance(model, ModelSpec) else ModelSpec(str(model))
    grid = Grid.from_names([spec], [corpus], settings, **overrides)
    (result,) = rbplab.extract(grid, cache_dir=cache_dir, progress=progress)
    return result
