"""Where results are kept: the rank cache (the inputs, models and corpora, are `rbplab.catalog`).

`cache` owns the on-disk layout of entries (keys, shards, manifests, locks, listing, removal) and
the checks that nothing read back is trusted unless derived again; `archive` exports and imports
entries; `files` writes files atomically and reads entry files safely (no links, no special files,
bounded sizes); `hub` decides whether the Hugging Face hub can be reached and resolves a revision
there to its commit; `paths` finds the bundled data. Nothing here runs a model.
"""

from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import cache_key as cache_key  # importable here: the cache-key test pins it

__all__ = ["CacheEntry", "list_entries"]
