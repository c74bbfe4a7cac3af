"""A run's token statistics, read from its cache entry (extracted first where it is missing).

Importing this module imports no torch or transformers: `rbplab.load_stats` is reachable from an
analysis session without model code. Planning the run (config, tokenizer, the key) and, on a miss,
scoring it import them when `load_stats` is called.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.catalog.models import ModelSpec
from rbplab.core.errors import RbplabWarning
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.core.stats import TokenStats
from rbplab.extraction.fingerprints import record_plan
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError


def load_stats(
    model: ModelSpec | str,
    corpus: str | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    **overrides: Any,
) -> TokenStats:
    """TokenStats of (model, corpus): extract (a cache hit runs no forward pass), then read the cache.

    A shard that fails its checksum on reading is reported, recomputed, and the entry read again.
    """
    return load_run(model, corpus, settings, cache_dir=cache_dir, progress=progress, **overrides)[0]


def load_run(
    model: ModelSpec | str,
    corpus: str | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    **overrides: Any,
) -> tuple[TokenStats, dict]:
    """`load_stats` and the entry's manifest (e.g. its ``training`` block: step, D, C).

    The number of shards and the rows of each are derived from the corpus (`count_problems`),
    never taken from the manifest: an entry that holds fewer (or more) is treated as damaged."""
    # model code (torch, transformers) is imported only now, when a run is read
    from rbplab.extraction.pipeline import extract_plan
    from rbplab.extraction.plan import count_problems, plan_extraction

    plan = plan_extraction(model, corpus, resolve_settings(settings, **overrides))
    for attempt in (1, 2):
        result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
        record_plan(plan, cache_dir)
        entry = CacheEntry(cache_dir, plan.key_spec)
        try:
            problems = count_problems(plan, result.manifest)
            if problems:
                raise entry.damaged(problems[0])
            return entry.read_stats(), result.manifest
        except CacheCorruptedError as err:
            if attempt == 2:
                raise
            warnings.warn(f"{err}; recomputing the damaged shards now", RbplabWarning, stacklevel=3)
    raise AssertionError("unreachable")
