"""Whether the cache already holds a plan's run: `cache_hit`.

A hit is a complete entry that passes every store check and holds the shards and tokens the plan's
corpus, tokenizer and window settings give; it loads no weights and runs no forward pass. An entry
that fails is reported once and marked incomplete, so the caller recomputes what it lacks.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from rbplab.extraction.plan import Plan, count_problems
from rbplab.store.cache import CacheCorruptedError, CacheEntry


@dataclass(frozen=True)
class ExtractResult:
    key: str
    path: Path
    n_tokens: int
    from_cache: bool
    manifest: dict


def cache_hit(entry: CacheEntry, plan: Plan | None = None) -> ExtractResult | None:
    """The result of a complete entry that passes every store check and, given the `plan` it was
    keyed from, holds the shards and tokens the plan's corpus, tokenizer and window settings give
    (`count_problems`; tokenizes the corpus, memoised; skipped where `Plan.counts_derivable` is false);
    None otherwise. An entry that fails is reported with one warning and marked incomplete, so the
    caller recomputes what it lacks. A miscounted entry that cannot be marked (a read-only cache)
    is a CacheCorruptedError: it is never served as it is."""
    if not entry.is_complete():
        return None
    try:
        manifest = entry.manifest()
    except CacheCorruptedError as err:
        warnings.warn(str(err), stacklevel=3)
        return None
    derivable = plan is not None and plan.counts_derivable
    problems = count_problems(plan, manifest) if derivable else []
    if problems:
        err = entry.damaged(problems[0])
        if entry.is_complete():
            raise err
        warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=3)
        return None
    return ExtractResult(entry.key, entry.path, int(manifest["n_tokens"]), True, manifest)
