"""A grid of models x corpora through the cache, in this process: the Python face of `rbplab extract`.

Corpora are loaded once, before any model is touched, so a bad corpus fails the grid at once;
every (model, corpus) pair is one cached `extract` call (a hit runs no model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.extraction.pipeline import extract
from rbplab.extraction.sources import ModelSpec, as_spec
from rbplab.store.corpora import Corpus, LazyCorpus, open_corpus
from rbplab.store.files import cache_root

GRID_COLUMNS = ["model", "corpus", "n_tokens", "from_cache", "key", "path"]


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
    done. Returns one row per pair: model, corpus, n_tokens, from_cache, key, path."""
    settings = resolve_settings(settings, **overrides)
    labelled = dict(models) if isinstance(models, Mapping) else {_label(m): m for m in models}
    if not labelled:
        raise ValueError("extract_many needs at least one model")
    loaded = [c if isinstance(c, (Corpus, LazyCorpus)) else open_corpus(c) for c in corpora]
    if not loaded:
        raise ValueError("extract_many needs at least one corpus")
    root = cache_root(cache_dir)
    rows = []
    for label, model in labelled.items():
        for corpus in loaded:
            result = extract(model, corpus, settings, cache_dir=root, progress=progress)
            row = {
                "model": label,
                "corpus": corpus.name,
                "n_tokens": result.n_tokens,
                "from_cache": result.from_cache,
                "key": result.key,
                "path": str(result.path),
            }
            if on_result is not None:
                on_result(row)
            rows.append(row)
    return pd.DataFrame(rows, columns=GRID_COLUMNS)


def _label(model: ModelSpec | str) -> str:
    return as_spec(model).name_or_path
