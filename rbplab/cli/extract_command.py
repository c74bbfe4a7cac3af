"""`rbplab extract`: compute a grid's per-token rank statistics into the cache, or say which
runs the cache already holds (read from plan records, without importing the model stack)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rbplab.cli.arguments import add_grid_arguments, grid_from_args

if TYPE_CHECKING:
    from rbplab.extraction.plan import ExtractResult


def configure_extract(p: argparse.ArgumentParser) -> None:
    add_grid_arguments(p, defaults=False)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_extract(args: argparse.Namespace) -> int:
    from rbplab.store.files import CacheLocationError, cache_root, check_writable

    # Everything that can be checked without torch is checked before any model is touched.
    grid = grid_from_args(args)
    root = cache_root(args.cache_dir)
    try:
        check_writable(root)
    except CacheLocationError:
        if not root.is_dir():
            raise
        # An existing cache that cannot be written (a shared, read-only mount) still serves hits;
        # a run that needs to write fails with this same error before loading any weights.

    def say(model: str, corpus: str, n_tokens: int, from_cache: bool, key: str, path) -> None:
        state = "cached" if from_cache else "extracted"
        print("\t".join(str(c) for c in (model, corpus, f"{n_tokens} tokens", state, key[:12], path)))

    # A grid the cache already holds is answered from plan records, as `rbplab fit` reads it:
    # planning would import torch and transformers and describe every model (seconds) to learn
    # keys the records already give.
    # Plan records name the final layer's entries only: other layers are found by planning.
    hits = recorded_hits(grid, root) if grid.settings.layers is None else None
    if hits is not None:
        for hit in hits:
            say(*hit)
        return 0

    from rbplab.extraction.pipeline import extract

    def said(result: ExtractResult) -> None:
        model = result.model if result.layer is None else f"{result.model} layer {result.layer}"
        say(model, result.corpus, result.n_tokens, result.from_cache, result.key, result.path)

    extract(grid, cache_dir=root, progress=not args.no_progress, on_result=said)
    return 0


def recorded_hits(grid, root) -> list[tuple] | None:
    """(model, corpus, tokens, True, key, path) of every run of `grid`, models outer as `extract`
    runs them, when the lookup `rbplab fit` makes (`rbplab.study.lookup.resolve_entries`: plan
    records, any shard size when none is asked) finds each complete, its manifest passing its
    rules, its shard files all on disk at their recorded sizes, and its shards holding the rows
    its plan record says the corpus gives (what a cache hit checks, the count from the record an
    earlier extraction wrote instead of tokenizing the corpus again); None when one is not, so
    `extract` runs the grid and checks it in full. Model code is imported only for a run
    without a plan record."""
    from rbplab.catalog.corpora import LazyCorpus
    from rbplab.extraction.fingerprints import known_plan
    from rbplab.store.cache.reading import CacheError
    from rbplab.study.lookup import resolve_entries

    hits = []
    for resolved in resolve_entries(grid, root, outer="model"):
        entry, run = resolved.entry, resolved.run
        if not entry.is_complete():
            return None
        try:
            manifest = entry.manifest(mark_damaged=False)  # extract itself marks and repairs
        except CacheError:
            return None
        if entry.shard_file_problems(manifest):
            return None
        found = known_plan(run.model, run.corpus, grid.settings, root)
        if found is None or found.key != entry.key:
            return None
        # A hub corpus's documents are not read for a cached entry, so a hit is not counted
        # against them (cache_hit skips it too); any other entry holds the rows its record keeps.
        unread = isinstance(run.corpus, LazyCorpus) and not run.corpus.loaded
        rows = tuple(int(record["rows"]) for record in manifest["shards"])
        if not unread and found.rows != rows:
            return None  # counts never derived, or the entry lost shards since (issue 31)
        hits.append((run.label, str(run.corpus.name), int(manifest["n_tokens"]), True, entry.key, entry.path))
    return hits
