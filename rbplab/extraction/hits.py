"""Whether the cache already holds a plan's run: `cache_hit`, and what `rbplab plan` shows of it.

A hit is a complete entry whose manifest passes every store check, whose every shard file is on
disk at the size its records give (stat calls: no shard is read or hashed), and which holds the
shards and tokens the plan's corpus, tokenizer and window settings give; it loads no weights and
runs no forward pass. An entry that fails is reported once and marked incomplete, so the caller
recomputes what it lacks. `hit_problems` is the same judgement without marking anything, so
`rbplab plan` (which writes nothing) and `rbplab run` call the same entries cached.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from rbplab.extraction.plan import Plan, count_problems
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError


@dataclass(frozen=True)
class ExtractResult:
    """One run's cache entry after extraction: its key, folder, scored tokens, whether it was a
    cache hit, its manifest, and (from `rbplab.extract`) the run's model and corpus labels."""

    key: str
    path: Path
    n_tokens: int
    from_cache: bool
    manifest: dict
    model: str = ""  # the run's label: the model, ``model@revision`` for a checkpoint
    corpus: str = ""  # the corpus's name


def cache_hit(entry: CacheEntry, plan: Plan | None = None) -> ExtractResult | None:
    """The result of a complete entry that passes every store check, whose shard files are all on
    disk at their recorded sizes, and which, given the `plan` it was keyed from, holds the shards
    and tokens the plan's corpus, tokenizer and window settings give (`hit_problems`); None
    otherwise. An entry that fails is reported with one warning and marked incomplete, so the
    caller recomputes what it lacks. A miscounted entry that cannot be marked (a read-only cache)
    is a CacheCorruptedError: it is never served as it is."""
    if not entry.is_complete():
        return None
    try:
        manifest = entry.manifest()
    except CacheCorruptedError as err:
        warnings.warn(str(err), stacklevel=3)
        return None
    problems = list(hit_problems(entry, plan, manifest).values())
    if problems:
        err = entry.damaged(problems[0])
        if entry.is_complete():
            raise err
        warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=3)
        return None
    return ExtractResult(entry.key, entry.path, int(manifest["n_tokens"]), True, manifest)


def hit_problems(entry: CacheEntry, plan: Plan | None, manifest: dict) -> dict[int | None, str]:
    """What keeps a complete entry with a checked `manifest` from being a hit, without marking or
    removing anything: {shard index: problem} for each listed shard file that is missing, not a
    regular file, not its recorded size or without an agreeing .sha256 record (stat calls and
    record reads), then {None: problem} for shard counts other than the `plan`'s (tokenizes the
    corpus, memoised; skipped where `Plan.counts_derivable` is false). Empty: a hit."""
    found: dict[int | None, str] = dict(entry.shard_file_problems(manifest))
    if plan is not None and plan.counts_derivable and not found:
        counts = count_problems(plan, manifest)
        if counts:
            found[None] = counts[0]
    return found


def entry_damage(entry: CacheEntry, plan: Plan | None) -> tuple[dict | None, dict[int | None, str]]:
    """(checked manifest, `hit_problems`) of a complete entry, read only: (None, {None: why}) when its
    manifest itself breaks a rule. Nothing is marked or removed (what `rbplab plan` shows)."""
    try:
        manifest = entry.load_manifest()
    except (OSError, ValueError) as err:  # UnsafeFileError is an OSError
        return None, {None: f"its manifest is unreadable ({err})"}
    problems = entry.manifest_problems(manifest)
    if problems:
        return None, {None: problems[0]}
    return manifest, hit_problems(entry, plan, manifest)
