"""A run: one model evaluated on one corpus, with its size S and its per-token statistics.

Analysis functions take runs in any of the forms `as_runs` accepts; the study holds a list of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.core.stats import TokenStats


@dataclass(frozen=True, eq=False)
class Run:
    """One model evaluated on one corpus; S is the non-embedding parameter count."""

    family: str
    model: str
    corpus: str
    S: float
    stats: TokenStats


RunsLike = Iterable[Run] | pd.DataFrame | Mapping[str, tuple[float, TokenStats]]


def as_runs(runs: RunsLike) -> list[Run]:
    """Accepts Run objects, a DataFrame with columns family, model, corpus, S, stats, or a
    mapping model -> (S, TokenStats) (family "default", corpus "default")."""
    if isinstance(runs, pd.DataFrame):
        missing = {"family", "model", "corpus", "S", "stats"} - set(runs.columns)
        if missing:
            raise ValueError(f"runs frame lacks {sorted(missing)}; needs family, model, corpus, S, stats")
        rows = runs.itertuples()
        out = [Run(str(r.family), str(r.model), str(r.corpus), float(r.S), r.stats) for r in rows]
    elif isinstance(runs, Mapping):
        out = [Run("default", str(m), "default", float(s), st) for m, (s, st) in runs.items()]
    else:
        out = list(runs)
    for run in out:
        if not isinstance(run, Run) or not isinstance(run.stats, TokenStats):
            raise TypeError(f"expected Run(family, model, corpus, S, stats: TokenStats), got {run!r}")
        if not np.isfinite(run.S) or run.S <= 0:
            raise ValueError(f"model {run.model!r}: S must be a positive number, got {run.S}")
    keys = [(r.family, r.model, r.corpus) for r in out]
    if len(set(keys)) != len(keys):
        raise ValueError("each (family, model, corpus) must appear once in runs")
    return out
