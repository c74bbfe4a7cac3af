"""`extract`: a grid's runs into the cache, each read back from it when the cache already holds it.

Every run of a grid extracted in this process, one after another: `rbplab.extract`, the Python
face of `rbplab extract` (`rbplab.runner` spreads a grid's shards over worker processes instead).

Corpora are opened once, before any model is touched, so a bad corpus fails the grid at once;
every run of the grid (`rbplab.grid.Grid.runs`, models outer so each model's weights load once)
is one cached `extract_plans` over the layers its settings name (a hit runs no model; the
layers it lacks are scored from one forward pass per batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rbplab.core.errors import InvalidArgumentError
from rbplab.extraction.fingerprints import record_plan
from rbplab.extraction.plan import ExtractResult, Plan, cache_hit, plan_layers
from rbplab.extraction.scoring import Scorer, compute_shards, make_scorer, sound_shards
from rbplab.extraction.weights import load_weights
from rbplab.grid import Grid, require_grid
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
    return extract_plans([plan], cache_dir=cache_dir, progress=progress)[0]


def extract_plans(
    plans: Sequence[Plan], *, cache_dir: str | Path | None = None, progress: bool = True
) -> list[ExtractResult]:
    """The cache entries of one run's plans at one or more layers (`plan_layers`), in their order:
    each hit as it is, the others computed together, one forward pass per batch for every layer
    they lack (resuming from the shards on disk). Writes nothing outside the entries."""
    entries = [CacheEntry(cache_dir, plan.key_spec) for plan in plans]
    # a hit writes nothing, so a read-only cache serves it
    hits = [cache_hit(entry, plan) for plan, entry in zip(plans, entries, strict=True)]
    todo = [i for i, hit in enumerate(hits) if hit is None]
    if todo:
        computed = _compute([plans[i] for i in todo], [entries[i] for i in todo], progress)
        for i, result in zip(todo, computed, strict=True):
            hits[i] = result
    return hits


def load_scorer(plan: Plan) -> Scorer:
    """The plan's model with its weights loaded and its head checked: the expensive step a cache
    hit skips."""
    return make_scorer(plan, load_weights(plan.described))


def _compute(plans: list[Plan], entries: list[CacheEntry], progress: bool) -> list[ExtractResult]:
    """Compute the shards the `entries` (one run's, at its plans' layers) lack, resuming from those
    on disk, and finalise them."""
    # A model that cannot be loaded fails here, before the entry directory exists (no litter).
    check_writable(entries[0].root)
    plan = plans[0]
    scorer = load_scorer(plan)
    if any(p.layer is not None for p in plans):
        scorer.lens()  # a model the lens cannot read is refused before any entry is started
    shards = plan.shards
    targets, results = [], [None] * len(plans)
    for i, (layer_plan, entry) in enumerate(zip(plans, entries, strict=True)):
        with entry.lock():
            hit = cache_hit(entry, layer_plan)  # another process finished it while we waited
            if hit is not None:
                results[i] = hit
                continue
            done = sound_shards(entry, shards)  # damaged and miscounted shards removed here
        targets.append((i, layer_plan, entry, done))
    if targets:
        done = set.intersection(*(t[3] for t in targets))
        todo = sorted(set().union(*(set(range(len(shards))) - t[3] for t in targets)))
        total = sum(w.n_scored for shard in shards for w in shard)
        initial = sum(w.n_scored for i in done for w in shards[i])
        label = f"{plan.spec.model.name} x {plan.corpus.name}"
        try:
            with _progress(total, initial, label, progress) as bar:
                compute_shards(
                    [(t[1], t[2]) for t in targets],
                    todo,
                    get_scorer=lambda _plan: scorer,
                    on_tokens=bar.update,
                )
        except BaseException:
            for target in targets:
                target[2].discard_if_unstarted()  # failed before its first shard: no folder left behind
            raise
    for i, layer_plan, entry, _ in targets:
        hit = cache_hit(entry, layer_plan)
        if hit is None:  # every shard was computed or waited for, so only a failed write gets here
            raise CacheError(f"cache entry {entry.key[:12]} is not complete after computing its shards")
        results[i] = ExtractResult(
            entry.key, entry.path, hit.n_tokens, False, hit.manifest, layer=layer_plan.layer
        )
    return results


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
        plans = plan_layers(run.model, run.corpus, grid.settings, described=described)
        extracted = extract_plans(plans, cache_dir=cache_dir, progress=progress)
        for plan, result in zip(plans, extracted, strict=True):
            if plan.layer is None:  # the next analysis of this run finds its key without model code
                record_plan(plan, cache_dir)
            result = replace(result, model=run.label, corpus=str(run.corpus.name), layer=plan.layer)
            if on_result is not None:
                on_result(result)
            results.append(result)
    return results
