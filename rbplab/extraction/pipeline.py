"""A plan -> its cache entry: `extract_plan` and `load_scorer` (`rbplab.extract` runs a grid's
plans through `extract_plan`).

A cache hit (`rbplab.extraction.hits`) loads no weights and runs no forward pass. Otherwise the
weights are loaded and checked before the entry's folder exists (a model that cannot be loaded
leaves nothing behind), and the plan's shards (`Plan.shards`) are computed by the shard loop
(`rbplab.extraction.shard_loop`); a run that is killed resumes from the shards already on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rbplab.extraction.hits import ExtractResult, cache_hit
from rbplab.extraction.plan import Plan
from rbplab.extraction.scoring import Scorer, make_scorer
from rbplab.extraction.shard_loop import compute_shards, sound_shards
from rbplab.extraction.weights import load_weights
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheError
from rbplab.store.files import check_writable


def _progress(total: int, initial: int, label: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="tok",
        unit_scale=True,
        desc=label,
        disable=not enabled,
        smoothing=0.1,
    )


def extract_plan(plan: Plan, *, cache_dir: str | Path | None = None, progress: bool = True) -> ExtractResult:
    """The cache entry of a made plan (`plan_extraction`): a hit as it is, else computed (resuming
    from the shards on disk). Writes nothing outside the entry
    (`repair` relies on that), so callers that keep plan records write them (`record_plan`)."""
    entry = CacheEntry(cache_dir, plan.key_spec)
    hit = cache_hit(entry, plan)  # a hit writes nothing, so a read-only cache serves it
    return hit if hit is not None else _compute(plan, entry, progress)


def load_scorer(plan: Plan) -> Scorer:
    """The plan's model with its weights loaded and its head checked: the expensive step a cache
    hit skips."""
    return make_scorer(plan, load_weights(plan.described))


def _compute(plan: Plan, entry: CacheEntry, progress: bool) -> ExtractResult:
    """Compute the shards `entry` lacks, resuming from those on disk, and finalise it."""
    # A model that cannot be loaded fails here, before the entry directory exists (no litter).
    check_writable(entry.root)
    scorer = load_scorer(plan)
    shards = plan.shards
    with entry.lock():
        hit = cache_hit(entry, plan)  # another process finished it while we waited for the lock
        if hit is not None:
            return hit
        done = sound_shards(entry, shards)  # damaged and miscounted shards removed here
    todo = [i for i in range(len(shards)) if i not in done]
    total = sum(w.n_scored for shard in shards for w in shard)
    initial = sum(w.n_scored for i in done for w in shards[i])
    label = f"{plan.spec.model.name} x {plan.corpus.name}"
    try:
        with _progress(total, initial, label, progress) as bar:
            compute_shards(plan, entry, todo, get_scorer=lambda _plan: scorer, on_tokens=bar.update)
    except BaseException:
        entry.discard_if_unstarted()  # failed before its first shard: no folder left behind
        raise
    hit = cache_hit(entry, plan)
    if hit is None:  # every shard was computed or waited for, so only a failed write gets here
        raise CacheError(f"cache entry {entry.key[:12]} is not complete after computing its shards")
    return ExtractResult(entry.key, entry.path, hit.n_tokens, False, hit.manifest)
